"""vaswani.training.validation: summarization scored with ROUGE while training, and the distinct outputs counted,
with a warning where they do not depend on the input."""

import pytest

from helpers import write_jsonl
from training_helpers import metrics_records, run_in_process, tiny_argv

pytestmark = pytest.mark.usefixtures("one_thread")


def test_summarization_is_scored_with_rouge_and_counts_distinct_outputs(tmp_path, capsys):
    rows = [{"document": f"Anna: I will bring {n} cakes tomorrow.\nBen: Great!", "summary": f"Anna brings {n} cakes."}
            for n in ("two", "three", "four", "five", "six", "seven")] * 8
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    outcome = run_in_process(tiny_argv(tmp_path / "out", train_file=str(train_file), validation_file=str(train_file),
                                       task="summarization", source_column="document", target_column="summary",
                                       max_steps=2, eval_steps=2, too_long="truncate"))
    evaluation = [r for r in metrics_records(tmp_path / "out") if "val_loss" in r][-1]
    assert {"rouge1", "rouge2", "rougeL", "rougeLsum"} <= evaluation.keys()
    assert outcome.summary["best_metric"] == "rougeL"
    assert evaluation["distinct_inputs"] == 6 and 1 <= evaluation["distinct_outputs"] <= 6
    assert f"distinct outputs {evaluation['distinct_outputs']} of 6 inputs" in capsys.readouterr().out


def test_a_model_whose_outputs_do_not_depend_on_the_input_is_warned_about(tmp_path, capsys):
    # every dialogue has the same summary: the model learns to write it without reading the dialogue
    rows = [{"document": f"Anna: I will bring {n} cakes tomorrow.\nBen: Great!", "summary": "Anna brings cakes."}
            for n in ("two", "three", "four", "five", "six", "seven")] * 8
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    run_in_process(tiny_argv(tmp_path / "out", train_file=str(train_file), validation_file=str(train_file),
                             task="summarization", source_column="document", target_column="summary",
                             max_steps=8, eval_steps=8, too_long="truncate"))
    evaluation = [r for r in metrics_records(tmp_path / "out") if "val_loss" in r][-1]
    assert evaluation["distinct_inputs"] == 6 and evaluation["distinct_outputs"] < 3
    assert "warning" not in evaluation  # the metrics file holds numbers; the warning is printed
    assert (f"WARNING at update 8: The outputs do not depend on the input: {evaluation['distinct_outputs']} distinct "
            "output(s) for 6 distinct inputs") in capsys.readouterr().out
