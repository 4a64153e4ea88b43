"""vaswani.training's update, engine and loop: one update (micro-batches weighted by their tokens, gradients clipped
before the step), a run's course (early stopping, mixed precision, activation checkpointing, torch.compile, the
quick-start config), and what stops a run: processes without a process group, a loss or weights no longer finite, an
engine that cannot engage. DeepSpeed's batch numbers, and a run without the plot and TensorBoard extras."""

import importlib.util
import json
import math
import re

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, pipeline

from helpers import REPO, tiny_config
from training_helpers import metrics_records, reset_accelerate, run_in_process, tiny_argv
from vaswani import VaswaniForConditionalGeneration
from vaswani.training.arguments import parse_arguments
from vaswani.training.batching import collate
from vaswani.training.checkpoints import latest_checkpoint, list_checkpoints
from vaswani.runs.errors import TrainingDiverged, TrainingError
from vaswani.training.state import TrainingProgress
from vaswani.training.update import run_update

pytestmark = pytest.mark.usefixtures("one_thread")


# --- one update: accumulation weighting and clipping -----------------------------------------------------------------


def update_args(max_grad_norm=0.0):
    return parse_arguments(["--max_grad_norm", str(max_grad_norm), "--output_dir", "unused"])[2]


def pairs_batch(tokenizer, pairs):
    rows = {"input_ids": [tokenizer(s)["input_ids"] for s, _ in pairs],
            "labels": [tokenizer(text_target=t)["input_ids"] for _, t in pairs]}
    return collate(rows, tokenizer.pad_token_id)


def gradients_after_update(model, micro_batches, accumulation):
    """Run one update with SGD at learning rate 1, so that the change of the weights is minus the gradient."""
    accelerator = Accelerator(cpu=True)
    accelerator.gradient_accumulation_steps = accumulation
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    prepared, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    try:
        loss, tokens, norm = run_update(accelerator, prepared, optimizer, schedule, micro_batches,
                                        update_args(), TrainingProgress())
    finally:
        reset_accelerate()
    return [b - p.detach() for b, p in zip(before, model.parameters())], loss, tokens


def test_accumulated_micro_batches_give_the_gradient_of_one_big_batch(tokenizer):
    from helpers import PAIRS

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    whole, loss_whole, tokens_whole = gradients_after_update(model, [pairs_batch(tokenizer, PAIRS)], 1)
    model.load_state_dict(state)
    # unequal micro-batches: a plain mean of their losses would weigh the 2 pairs like the 8 others
    parts, loss_parts, tokens_parts = gradients_after_update(
        model, [pairs_batch(tokenizer, PAIRS[:2]), pairs_batch(tokenizer, PAIRS[2:])], 2
    )
    assert tokens_parts == tokens_whole
    assert loss_parts == pytest.approx(loss_whole, rel=1e-5)
    for a, b in zip(whole, parts):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gradients_are_clipped_before_the_step(tokenizer):
    from helpers import PAIRS

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    prepared, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    try:
        _, _, norm = run_update(accelerator, prepared, optimizer, schedule, [pairs_batch(tokenizer, PAIRS)],
                                update_args(max_grad_norm=0.5), TrainingProgress())
    finally:
        reset_accelerate()
    step = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]).norm().item()
    assert norm > 0.5, "the test needs a gradient larger than the limit"
    assert step == pytest.approx(0.5, rel=1e-3)


# --- a whole run ------------------------------------------------------------------------------------------------------


def test_early_stopping_stops_after_the_patience_runs_out(tmp_path):
    # a learning rate too small to change anything: the validation loss never improves after the first evaluation
    outcome = run_in_process(tiny_argv(tmp_path, learning_rate=1e-12, max_steps=40, eval_steps=2,
                                       best_metric="loss", early_stopping_patience=2))
    assert outcome.summary["steps"] == 6
    assert "early stopping" in outcome.summary["stopped_because"]
    assert outcome.summary["best_step"] == 2


# fp16 applies on a GPU only: on a CPU it is refused (test_run_records.py), where it used to be recorded as fp16
# while the run computed in fp32
ON_A_GPU_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 applies on a GPU; a CPU refuses it")


@pytest.mark.parametrize("precision, checkpointing", [("bf16", False), pytest.param("fp16", False, marks=ON_A_GPU_ONLY),
                                                      ("no", True)],
                         ids=["bf16", "fp16", "fp32 with activation checkpointing"])
def test_mixed_precision_and_activation_checkpointing_train(tmp_path, precision, checkpointing):
    outcome = run_in_process(tiny_argv(tmp_path, mixed_precision=precision, max_steps=3, eval_steps=3,
                                       save_steps=3, gradient_checkpointing=checkpointing))
    assert outcome.model.is_activation_checkpointing == checkpointing
    assert outcome.summary["mixed_precision"] == precision
    assert all(math.isfinite(r["loss"]) for r in metrics_records(tmp_path) if "loss" in r)
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "last")


def test_torch_compile_trains_through_one_compiled_graph_giving_eagers_losses(tmp_path, monkeypatch):
    """--torch_compile with the `eager` backend (dynamo captures each update's forward with fullgraph, without
    inductor's code generation, minutes on a shared CPU; a GPU run gets inductor), against the same run with the
    compilation taken out (the same padded batches, eager updates)."""
    from torch._dynamo.utils import counters

    from vaswani.training import engine

    options = dict(dropout=0.0, max_steps=4, eval_steps=4, save_steps=4, torch_compile=True)
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        run_in_process(tiny_argv(tmp_path / "compiled", **options))
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    monkeypatch.setattr(engine, "compiled_for_updates", lambda accelerator, model: model)
    run_in_process(tiny_argv(tmp_path / "eager", **options))
    compiled, eager = ([r["loss"] for r in metrics_records(tmp_path / name) if "loss" in r] for name in
                       ("compiled", "eager"))
    assert len(compiled) == 4 and compiled == pytest.approx(eager, rel=1e-4)


def test_the_quickstart_config_runs_and_translates(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    output_dir = tmp_path / "quickstart"
    run_in_process(["--config", "scripts/configs/quickstart.yaml", "--output_dir", str(output_dir),
                    "--max_steps", "2", "--synthetic_train_size", "300", "--synthetic_validation_size", "10",
                    "--max_eval_samples", "2", "--report_to", "none"])
    translator = pipeline("translation", model=str(output_dir / "best"), trust_remote_code=True)
    assert isinstance(translator("The dog sees a cat.")[0]["translation_text"], str)


# --- what stops a run, and the engines --------------------------------------------------------------------------------


def test_processes_launched_without_a_process_group_are_refused_before_touching_the_folder(tmp_path, monkeypatch):
    # what torchrun sets; without ACCELERATE_USE_CPU on a machine without GPUs, each process would train alone
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(TrainingError, match=r"Launched as 2 processes \(WORLD_SIZE=2\), but they would each train "
                                            r"alone \(Accelerate sees 1\).*ACCELERATE_USE_CPU=1"):
        run_in_process(tiny_argv(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = VaswaniForConditionalGeneration.forward
    calls = {"count": 0}

    def forward_that_breaks(self, *args, **kwargs):
        outputs = original(self, *args, **kwargs)
        if self.training and outputs.loss is not None:
            calls["count"] += 1
            if calls["count"] > 6:  # update 4 of 2 micro-batches each
                outputs.loss = outputs.loss * float("nan")
        return outputs

    monkeypatch.setattr(VaswaniForConditionalGeneration, "forward", forward_that_breaks)
    with pytest.raises(TrainingDiverged, match=r"diverged at update 4: the loss is nan.*last good checkpoint is "
                                               r".*step-00000002"):
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2]
    good = load_file(latest_checkpoint(tmp_path / "checkpoints") / "model" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in good.values())


def test_an_update_that_blows_up_the_weights_is_never_checkpointed_or_called_good(tmp_path):
    # learning rate 1e10: update 1 multiplies the weights by ~1e10 (still finite); the loss of update 2 is not
    with pytest.raises(TrainingDiverged) as caught:
        run_in_process(tiny_argv(tmp_path, learning_rate=1e10, warmup_steps=1, save_steps=1, eval_steps=100))
    message = str(caught.value)
    assert re.search(r"diverged at update \d+: (the loss is (nan|inf)|the gradient norm is|the update made weights)",
                     message), message
    for _, checkpoint in list_checkpoints(tmp_path / "checkpoints"):  # what --resume could pick
        state = load_file(checkpoint / "model.safetensors")
        assert all(torch.isfinite(t).all() for t in state.values())
        assert str(checkpoint) in message or checkpoint != latest_checkpoint(tmp_path / "checkpoints")
    set_aside = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("diverged-"))
    if "the loss is" in message or "gradient norm" in message:
        # the weights that gave the non-finite loss were saved by the update before: set aside, not "good"
        assert set_aside and f"set aside as {tmp_path / 'checkpoints' / set_aside[-1]}" in message
    latest = latest_checkpoint(tmp_path / "checkpoints")
    assert f"The last good checkpoint is {latest or '(none saved yet)'}." in message


@pytest.mark.parametrize("variable, engine", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")])
def test_an_engine_the_config_asks_for_that_cannot_engage_stops_the_run(tmp_path, monkeypatch, variable, engine):
    """`accelerate launch --config_file scripts/configs/accelerate_fsdp.yaml` on a machine without GPUs: Accelerate
    would fall back to plain (DDP / single-process) training without a word."""
    monkeypatch.setenv(variable, "true")
    if engine == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        expected = (ImportError, "DeepSpeed is not installed")  # Accelerate's own message, before ours
    else:
        expected = (TrainingError, rf"asks for {engine} \({variable}=true\), but Accelerate set up NO on cpu: "
                                   rf"{engine} shards the model across GPUs and needs them")
    with pytest.raises(expected[0], match=expected[1]):
        run_in_process(tiny_argv(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_deepspeed_gets_a_micro_batch_size_and_the_runs_accumulation():
    """The token-budget loader has no batch size; without these numbers accelerator.prepare() refuses DeepSpeed.
    (DeepSpeed itself needs GPUs: scripts/training.md, "FSDP and DeepSpeed", says what is checked without them.)"""
    from types import SimpleNamespace

    from accelerate.utils import DeepSpeedPlugin

    from vaswani.training.engine import fit_deepspeed_config

    plugin = DeepSpeedPlugin(zero_stage=2, gradient_clipping=1.0)  # what accelerate_deepspeed.yaml gives
    assert plugin.is_auto("train_micro_batch_size_per_gpu")
    accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin))
    fit_deepspeed_config(accelerator, accumulation=3)
    assert plugin.get_value("train_micro_batch_size_per_gpu") == 1
    assert plugin.get_value("gradient_accumulation_steps") == 3
    assert plugin.get_value("zero_optimization.stage") == 2
    fit_deepspeed_config(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)), accumulation=3)  # no engine


def test_without_the_plot_and_tensorboard_extras_a_run_still_finishes(tmp_path, monkeypatch, capsys):
    """matplotlib and tensorboard are extras: without them --report_to auto logs nowhere, the curves are skipped with
    a line saying why, and --report_to tensorboard is refused before the run starts."""
    from vaswani.training import engine, loop

    for module in (engine, loop):  # the set-up asks for tensorboard, the end of the run for matplotlib
        monkeypatch.setattr(module, "installed", lambda package: package not in ("matplotlib", "tensorboard"))
    with pytest.raises(TrainingError, match=r"--report_to tensorboard: tensorboard is not installed"):
        run_in_process(tiny_argv(tmp_path / "refused", report_to="tensorboard"))
    assert not (tmp_path / "refused").exists()
    outcome = run_in_process(tiny_argv(tmp_path / "run", report_to="auto", max_steps=2, eval_steps=2, save_steps=2))
    assert outcome.summary["curves_file"] is None and not (tmp_path / "run" / "training_curves.png").exists()
    assert not (tmp_path / "run" / "tensorboard").exists()
    assert "No training_curves.png: matplotlib is not installed" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "arguments.json").read_text())["report_to"] == "none"
