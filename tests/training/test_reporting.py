"""vaswani.training.reporting: what a run logs (metrics.jsonl, TensorBoard, the training curves, the summary), and a
metrics log cut by a kill."""

import json

import pytest

from training_helpers import copy_of, metrics_records, run_in_process, tiny_argv
from vaswani.runs.errors import TrainingError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_run_logs_metrics_tensorboard_curves_and_a_summary(finished_run):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed: pip install -e '.[tensorboard]'")
    pytest.importorskip("matplotlib", reason="the plot extra is not installed: pip install -e '.[plot]'")
    output_dir, summary = finished_run
    records = metrics_records(output_dir)
    training = [r for r in records if "loss" in r]
    assert [r["step"] for r in training] == list(range(1, 9))
    assert all(r["tokens_per_second"] > 0 and r["learning_rate"] > 0 for r in training)
    assert training[-1]["loss"] < training[0]["loss"], "the loss must fall"
    evaluations = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evaluations] == [4, 8]
    # both BLEUs with their signatures, under the names results files give them; the best model by sacreBLEU
    assert all(r["sacrebleu_signature"].startswith("nrefs:1|case:mixed|") for r in evaluations)
    assert all("|pretok:lc+moses-norm+moses-tok:" in r["tokenized_bleu_signature"] for r in evaluations)
    assert not any("bleu" in r for r in evaluations)
    assert list((output_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert (output_dir / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((output_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["steps"] == 8 and summary["tokens_per_second"] > 0
    best = max(evaluations, key=lambda r: r["sacrebleu"])
    assert summary["best_metric"] == "sacrebleu"
    assert summary["best_score"] == best["sacrebleu"] and summary["best_step"] == best["step"]


def test_a_metrics_log_cut_by_a_kill_resumes_and_a_broken_line_is_named(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    log = run / "metrics.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines) + "\n" + lines[-1][:40])  # a write cut half-way
    run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert [r["step"] for r in metrics_records(run) if "loss" in r] == list(range(1, 7))
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(TrainingError, match=rf"{log}, line 2: not a metrics record"):
        run_in_process(tiny_argv(run, max_steps=8, save_steps=2, eval_steps=100, dropout=0.1, resume=True))


class Killed(Exception):
    """Stands for a SIGKILL: the run ends where it is raised, with nothing after it."""


def test_a_run_killed_right_after_its_last_checkpoint_logs_each_evaluation_once_on_resume(tmp_path, monkeypatch):
    """Killed after the checkpoint of its last update (evaluated before it was saved), the resumed run evaluated
    that update again and wrote the same validation line twice into metrics.jsonl."""
    import vaswani.training.loop as loop

    publish_model = loop.publish_model

    def killed_before_last(accelerator, model, tokenizer, folder, *args, **kwargs):
        if folder.name == "last":
            raise Killed()
        return publish_model(accelerator, model, tokenizer, folder, *args, **kwargs)

    options = dict(max_steps=4, save_steps=2, eval_steps=2, dropout=0.1)
    with monkeypatch.context() as patch:
        patch.setattr(loop, "publish_model", killed_before_last)
        with pytest.raises(Killed):
            run_in_process(tiny_argv(tmp_path, **options))
    assert [r["step"] for r in metrics_records(tmp_path) if "val_loss" in r] == [2, 4]
    run_in_process(tiny_argv(tmp_path, resume=True, **options))
    assert [r["step"] for r in metrics_records(tmp_path) if "val_loss" in r] == [2, 4]
    assert (tmp_path / "last" / "config.json").is_file()
