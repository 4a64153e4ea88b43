"""vaswani.training.checkpoints: the published best/ and last/ models, the checkpoints kept, a kill during a save
then --resume giving the weights of an uninterrupted run, resuming from a checkpoint that may not be what it seems
(crafted pickles, an earlier version's, a damaged one, the options it fixes, the last release's option names), a
failed save, and a published model left half-swapped."""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from helpers import REPO
from training_helpers import copy_of, metrics_records, run_in_process, run_script, tiny_argv
from vaswani.training import checkpoints as checkpoints_module
from vaswani.training.checkpoints import latest_checkpoint, list_checkpoints, remove_leftovers
from vaswani.runs.errors import CheckpointError, TrainingError
from vaswani.runs.records import weights_provenance
from vaswani.runs.manifests import MANIFEST_FILE
from vaswani.training.run_files import MODEL, mark, seal

pytestmark = pytest.mark.usefixtures("one_thread")


# --- what a run keeps -------------------------------------------------------------------------------------------------


def test_best_and_last_models_load_with_auto_classes_and_the_pipeline(finished_run):
    output_dir, _ = finished_run
    for name in ("best", "last"):
        model = AutoModelForSeq2SeqLM.from_pretrained(output_dir / name)
        tokenizer = AutoTokenizer.from_pretrained(output_dir / name)
        assert model.config.source_lang is None and model.generation_config.num_beams == 2
    last = load_file(output_dir / "last" / "model.safetensors")
    newest = load_file(latest_checkpoint(output_dir / "checkpoints") / "model" / "model.safetensors")
    assert all(torch.equal(last[k], newest[k]) for k in last)
    translator = pipeline("translation", model=str(output_dir / "last"), tokenizer=tokenizer, trust_remote_code=True)
    assert isinstance(translator("The dog sees a cat.")[0]["translation_text"], str)


def test_only_the_last_checkpoints_are_kept(finished_run):
    output_dir, _ = finished_run
    assert [step for step, _ in list_checkpoints(output_dir / "checkpoints")] == [4, 6, 8]
    assert not [p for p in (output_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_an_average_of_folders_that_are_not_checkpoints_names_them(tmp_path):
    folders = [tmp_path / "run_a" / "best", tmp_path / "run_b" / "best"]
    checkpoints_module.write_averaging_record(tmp_path, folders)
    assert weights_provenance(str(tmp_path)) == (
        f"the mean of 2 checkpoints ({folders[0]}, {folders[1]}; scripts/average_checkpoints.py)")


# --- a kill during a save ---------------------------------------------------------------------------------------------


# train.py in a process that dies (SIGKILL) halfway through the save of the checkpoint of update {step}: its files
# written, not yet published (monkeypatched: the fsync that comes before the rename that publishes them)
KILLED_DURING_A_SAVE = """
import os, runpy, signal, sys
from vaswani.training import checkpoints

fsync_tree = checkpoints.fsync_tree

def die_before_publishing(folder):
    if folder.name.endswith("{step:08d}"):
        os.kill(os.getpid(), signal.SIGKILL)
    fsync_tree(folder)

checkpoints.fsync_tree = die_before_publishing
sys.argv[0] = {script!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script_killed_during_a_save(argv, step: int) -> subprocess.CompletedProcess:
    code = KILLED_DURING_A_SAVE.format(step=step, script=str(REPO / "scripts" / "train.py"))
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_kill_during_a_save_then_resume_gives_the_weights_of_an_uninterrupted_run(tmp_path):
    options = dict(max_steps=8, save_steps=2, eval_steps=100, dropout=0.1)  # dropout on: the RNG state must resume
    run_in_process(tiny_argv(tmp_path / "straight", **options))

    interrupted = tmp_path / "interrupted"
    killed = run_script_killed_during_a_save(tiny_argv(interrupted, **options), step=6)
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL
    leftovers = [p.name for p in (interrupted / "checkpoints").iterdir()]
    assert ".tmp-step-00000006" in leftovers, "the kill must come in the middle of a save"
    assert latest_checkpoint(interrupted / "checkpoints").name == "step-00000004"

    progress_file = interrupted / "checkpoints" / "step-00000004" / "training_progress.json"
    before_the_kill = json.loads(progress_file.read_text())["progress"]["wall_seconds"]
    assert before_the_kill > 0
    resume_started = time.perf_counter()
    resumed = run_script(tiny_argv(interrupted, resume=True, **options))
    resume_seconds = time.perf_counter() - resume_started
    assert "Resumed from" in resumed.stdout and "step-00000004: update 4" in resumed.stdout
    # the summary's wall time is the whole run's: the part before the checkpoint, and the resumed process
    wall_seconds = json.loads((interrupted / "summary.json").read_text())["wall_seconds"]
    assert before_the_kill < wall_seconds <= before_the_kill + resume_seconds
    straight = load_file(tmp_path / "straight" / "last" / "model.safetensors")
    again = load_file(interrupted / "last" / "model.safetensors")
    for name in straight:
        torch.testing.assert_close(again[name], straight[name], rtol=1e-6, atol=1e-7)
    steps = [r["step"] for r in metrics_records(interrupted) if "loss" in r]
    assert steps == list(range(1, 9)), "the log keeps each update once"


# --- resuming from a checkpoint that may not be what it seems -------------------------------------------------------


class RunsCode:
    """A pickle that runs code when it is loaded: what a crafted checkpoint file would hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_a_crafted_pickle_in_every_file_of_the_checkpoints_runs_nothing(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    marker = tmp_path / "pwned"
    for checkpoint in (run / "checkpoints").iterdir():
        # every file, the weights and the JSON records included; but the run's mark (its manifest, only ever parsed
        # as JSON), without which the folder is not known as the run's checkpoint and is refused before anything
        files = [p for p in checkpoint.rglob("*") if p.is_file() and p.name != MANIFEST_FILE]
        for path in files + [checkpoint / "custom_checkpoint_0.pkl"]:
            torch.save(RunsCode(marker), path)
    with pytest.raises(CheckpointError) as caught:
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert not marker.exists()
    message = str(caught.value)
    assert "no checkpoint can be continued from exactly" in message and "Nothing was loaded" in message
    assert "step-00000004: training_progress.json cannot be read" in message


def test_a_crafted_optimizer_state_is_refused_without_running_it(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    marker = tmp_path / "pwned"
    torch.save(RunsCode(marker), run / "checkpoints" / "step-00000004" / "optimizer.bin")
    with pytest.raises(CheckpointError, match=r"step-00000004 cannot be loaded \(it holds objects other than tensors "
                                              r"and plain data, which are refused: no code in it ran\). Remove that "
                                              r"folder to resume from the one before it"):
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert not marker.exists()


def test_a_checkpoint_of_an_earlier_version_with_a_pickled_progress_is_named_not_loaded(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    for checkpoint in (run / "checkpoints").iterdir():
        (checkpoint / "training_progress.json").rename(checkpoint / "custom_checkpoint_0.pkl")
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0.pkl, a pickle written by an earlier version"):
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))


@pytest.mark.parametrize("damage", ["random state missing", "weights truncated"])
def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_is_used(checkpointed_run, tmp_path, capsys, damage):
    run = copy_of(checkpointed_run, tmp_path)
    newest = run / "checkpoints" / "step-00000004"
    if damage == "random state missing":
        (newest / "random_states_0.pkl").unlink()
        reason = "random_states_0.pkl is missing"
    else:
        weights = newest / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        reason = "model.safetensors is damaged"
    run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    out = capsys.readouterr().out
    assert f"WARNING: --resume does not use {newest}: {reason}" in out
    assert "Resumed from" in out and "step-00000002: update 2" in out


def test_options_the_checkpoint_fixes_cannot_change_on_resume_and_the_learning_rate_can(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    options = dict(max_steps=6, save_steps=2, eval_steps=100, resume=True)
    with pytest.raises(TrainingError, match=r"these options differ from the run's.*--dropout 0.1 -> 0.2.*"
                                            r"--tokens_per_update 512 -> 1024"):
        run_in_process(tiny_argv(run, dropout=0.2, tokens_per_update=1024, **options))
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [2, 4]  # nothing written
    # a new peak learning rate takes effect from the update resumed at (peak 3e-3 -> 1e-3 after 4 warmup updates;
    # the rate logged at update k is the one of update k + 1)
    run_in_process(tiny_argv(run, dropout=0.1, **{**options, "learning_rate": 1e-3}))
    rates = {r["step"]: r["learning_rate"] for r in metrics_records(run) if "learning_rate" in r}
    assert rates[4] == pytest.approx(3e-3 * (4 / 5) ** 0.5) and rates[5] == pytest.approx(1e-3 * (4 / 6) ** 0.5)


# --- a save that fails ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EACCES], ids=["disk full", "not writable"])
def test_a_failed_save_raises_a_clear_error_and_keeps_earlier_checkpoints(tmp_path, monkeypatch, failure):
    original = Accelerator.save_state

    def save_state_that_fails(self, output_dir=None, **kwargs):
        if output_dir.endswith("step-00000004"):
            original(self, output_dir, **kwargs)  # part of it is written, as when a disk fills up
            raise OSError(failure, os.strerror(failure), output_dir)
        return original(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state_that_fails)
    with pytest.raises(CheckpointError) as caught:
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    message = str(caught.value)
    assert "Could not save the checkpoint of update 4" in message and os.strerror(failure) in message
    assert "the latest complete one is" in message and "step-00000002" in message
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "checkpoints" / "step-00000002" / "model")


def test_a_full_disk_inside_the_safetensors_writer_is_a_checkpoint_error(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    original = Accelerator.save_state

    def save_state_that_fills_the_disk(self, output_dir=None, **kwargs):
        if output_dir.endswith("step-00000004"):
            raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")
        return original(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state_that_fills_the_disk)
    with pytest.raises(CheckpointError, match=r"Could not save the checkpoint of update 4 .*No space left on device"):
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]


def test_a_half_swapped_published_model_is_put_back(tmp_path):
    """A swap cut between its two renames (where the system has no exchange): `best/` set aside as `.old-best`, the
    new one complete in `.tmp-best` is put in place; a new `last` not yet complete leaves the earlier one put back. A
    folder only named so, without the run's mark, is never touched (see tests/training/test_run_files.py)."""
    for name, complete in [(".old-best", True), (".tmp-best", True), (".old-last", True), (".tmp-last", False)]:
        mark(tmp_path / name, MODEL)
        (tmp_path / name / "config.json").write_text(json.dumps({"from": name}))
        if complete:
            seal(tmp_path / name, MODEL)
    remove_leftovers(tmp_path)
    assert json.loads((tmp_path / "best" / "config.json").read_text()) == {"from": ".tmp-best"}
    assert json.loads((tmp_path / "last" / "config.json").read_text()) == {"from": ".old-last"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["best", "last"]
