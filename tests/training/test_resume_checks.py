"""What `--resume` checks before it loads anything, and what it does with a checkpoint of another number of processes.

A resume that cannot be exact is refused or named (the promises table of scripts/training.md): the data files and the
tokenizer differ from the fingerprints the checkpoint records; a value of training_progress.json of the wrong type or
out of what the run can reach; a random state that loads but that Accelerate would skip restoring. A checkpoint written by N processes goes
on on M: after the same batches of the same epoch, which the M processes then share.

The runs train on local files under a working folder that each test copies (the data are named by relative paths,
so a copy's files are the run's files and can be changed without touching the others').
"""

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import REPO, launch, write_jsonl
from training_helpers import metrics_records, run_in_process, tiny_argv
from vaswani.training.batching import TokenBudgetBatches
from vaswani.training.checkpoints import checkpoint_problem, list_checkpoints
from vaswani.runs.errors import CheckpointError, TrainingError
from vaswani.training.state import TrainingProgress
from vaswani.training.synthetic import generate_pairs


pytestmark = pytest.mark.usefixtures("one_thread")

DATA = dict(train_file="data/train.jsonl", validation_file="data/validation.jsonl")
RUN = dict(save_steps=2, eval_steps=100, dropout=0.1, **DATA)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding `data/` (600 training pairs, 12 validation pairs) and `run/`, a run of 4 updates on them
    with checkpoints at 2 and 4 (epoch 0: each update takes 2 of the epoch's batches)."""
    folder = tmp_path_factory.mktemp("resume-checks")
    (folder / "data").mkdir()
    write_jsonl(folder / "data" / "train.jsonl", generate_pairs(600, seed=0))
    write_jsonl(folder / "data" / "validation.jsonl", generate_pairs(12, seed=1))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        run_in_process(tiny_argv(folder / "run", max_steps=4, **RUN))
    return folder


@pytest.fixture
def copied(workdir, tmp_path, monkeypatch) -> Path:
    """A copy of the working folder, made the current one: its run resumes on its own copy of the data."""
    copy = Path(shutil.copytree(workdir, tmp_path / "work"))
    monkeypatch.chdir(copy)
    return copy


def resume(copy: Path, max_steps: int = 4, **options):
    return run_in_process(tiny_argv(copy / "run", max_steps=max_steps, resume=True, **{**RUN, **options}))


def checkpoint_steps(copy: Path) -> list[int]:
    return [step for step, _ in list_checkpoints(copy / "run" / "checkpoints")]


# --- the data and the tokenizer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["other rows", "600 -> 12 rows"])
def test_resuming_on_changed_data_is_refused_naming_the_file(copied, change):
    train_file = copied / "data" / "train.jsonl"
    before = train_file.stat().st_size
    write_jsonl(train_file, generate_pairs(600, seed=7) if change == "other rows" else generate_pairs(12, seed=0))
    with pytest.raises(TrainingError) as caught:
        resume(copied)
    message = str(caught.value)
    assert ("the data or the tokenizer differ from those the checkpoint was trained with (what was -> what is): "
            "--train_file data/train.jsonl: sha256 ") in message
    assert f", {before} bytes -> sha256 " in message and f", {train_file.stat().st_size} bytes" in message
    assert "--validation_file" not in message and "tokenizer/" not in message  # only what changed is named
    assert "would go on at epoch 0, batch 8 of other pairs" in message and "Nothing was loaded" in message
    assert checkpoint_steps(copied) == [2, 4]


def test_resuming_with_a_changed_tokenizer_is_refused(copied):
    # two pieces trade their ids: the tokenizer loads and fits the model as before, and reads every text otherwise
    tokenizer_file = copied / "run" / "tokenizer" / "tokenizer.json"
    tokenizer = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    tokenizer_file.write_text(json.dumps(tokenizer), encoding="utf-8")
    with pytest.raises(TrainingError, match=r"differ from those the checkpoint was trained with \(what was -> what "
                                            r"is\): the tokenizer learned \(tokenizer/\): tokenizer.json: sha256 "):
        resume(copied)


def test_a_checkpoint_without_fingerprints_resumes_with_one_warning(copied, capsys):
    for record in (copied / "run" / "checkpoints").glob("step-*/data_fingerprints.json"):
        record.unlink()  # as written by the versions before the fingerprints
    resume(copied)
    out = capsys.readouterr().out
    assert out.count("the data could not be checked to be the same") == 1
    assert "Resumed from" in out and "step-00000004: update 4" in out


# --- training_progress.json -----------------------------------------------------------------------------------------


def edit_progress(checkpoint: Path, **values) -> None:
    progress_file = checkpoint / "training_progress.json"
    record = json.loads(progress_file.read_text())
    record["progress"].update(values)
    progress_file.write_text(json.dumps(record))


@pytest.mark.parametrize("values, reason", [
    ({"step": 1e8}, "`step` is float 100000000.0; allowed: an integer, 0 or more"),
    ({"position": 1e9}, "`position` is float 1000000000.0; allowed: an integer, 0 or more"),
    ({"epoch": "abc"}, "`epoch` is str 'abc'; allowed: an integer, 0 or more"),
    ({"position": True}, "`position` is bool True; allowed: an integer, 0 or more"),
    ({"tokens": -1}, "`tokens` is int -1; allowed: an integer, 0 or more"),
    ({"step": 3}, "`step` is int 3; allowed: 4, the update the checkpoint is named for"),
    ({"wall_seconds": math.nan}, "`wall_seconds` is float nan; allowed: a finite number of seconds, 0 or more"),
    ({"best_score": 1.0, "best_step": 5}, "`best_step` is int 5; allowed: an update from 0 to `step` (4)"),
    ({"best_score": 1.0}, "`best_score` is float 1.0 and `best_step` NoneType None; allowed: both null"),
    ({"first_batch": [0]}, "`first_batch` is list; allowed: an integer, 0 or more"),
])
def test_each_progress_value_is_checked_and_named(workdir, tmp_path, values, reason):
    checkpoint = Path(shutil.copytree(workdir / "run" / "checkpoints" / "step-00000004", tmp_path / "step-00000004"))
    assert checkpoint_problem(checkpoint, TrainingProgress.problem) is None
    edit_progress(checkpoint, **values)
    assert checkpoint_problem(checkpoint, TrainingProgress.problem).startswith(f"training_progress.json: {reason}")


def test_a_progress_of_the_wrong_type_is_named_and_the_checkpoint_before_is_used(copied, capsys):
    newest = copied / "run" / "checkpoints" / "step-00000004"
    edit_progress(newest, step=1e8)  # resumed "after 100000000 updates" before the check
    resume(copied)
    out = capsys.readouterr().out
    assert (f"WARNING: --resume does not use {newest}: training_progress.json: `step` is float 100000000.0; "
            "allowed: an integer, 0 or more") in out
    assert "step-00000002: update 2" in out


@pytest.mark.parametrize("values, reason", [
    ({"position": 10**9}, r"`position` is 1000000000; allowed: at most \d+, the batches each of its 1 process\(es\) "
                          r"takes of epoch 0 \(from its batch 0\)"),
    ({"epoch": 10**6}, r"`epoch` is 1000000; allowed: at most 12, as far as 4 updates can go \(each takes at most "
                       r"2 batch\(es\) per process, and may begin a new epoch\)"),
])
def test_a_place_in_the_data_the_run_cannot_reach_is_refused(copied, values, reason):
    edit_progress(copied / "run" / "checkpoints" / "step-00000004", **values)
    with pytest.raises(CheckpointError, match=rf"step-00000004/training_progress.json: {reason}. Remove that folder"):
        resume(copied)
    assert checkpoint_steps(copied) == [2, 4]


# --- random states --------------------------------------------------------------------------------------------------


def written_states(checkpoint: Path) -> dict:
    return torch.load(checkpoint / "random_states_0.pkl", weights_only=False)


@pytest.mark.parametrize("damage, reason", [
    pytest.param(lambda states: {}, "holds no `random_state` (the state of Python's `random`)", id="empty"),
    pytest.param(lambda states: [], "holds a list, not the generators' states", id="not a dict"),
    pytest.param(lambda states: {k: v for k, v in states.items() if k != "torch_manual_seed"},
                 "holds no `torch_manual_seed` (the state of PyTorch's CPU generator)", id="no torch state"),
    pytest.param(lambda states: {**states, "torch_manual_seed": states["torch_manual_seed"][:100]},
                 "holds a `torch_manual_seed` (the state of PyTorch's CPU generator) that cannot be set (RuntimeError: "
                 "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size to be 100)",
                 id="torch state cut"),
    pytest.param(lambda states: {**states, "numpy_random_seed": ("MT19937", states["numpy_random_seed"][1][:10], 0,
                                                                 0, 0.0)},
                 "holds a `numpy_random_seed` (the state of NumPy's global generator) that cannot be set",
                 id="numpy state cut"),
    pytest.param(lambda states: {**states, "random_state": (3, (1, 2), None)},
                 "holds a `random_state` (the state of Python's `random`) that cannot be set (ValueError: state "
                 "vector is the wrong size)", id="python state cut"),
    pytest.param(lambda states: {**states, "step": "abc"}, "holds `step` str 'abc'; allowed: an integer, 0 or more",
                 id="step not a count"),
])
def test_the_contents_of_each_random_state_are_checked(workdir, tmp_path, damage, reason):
    checkpoint = Path(shutil.copytree(workdir / "run" / "checkpoints" / "step-00000004", tmp_path / "step-00000004"))
    torch.save(damage(written_states(checkpoint)), checkpoint / "random_states_0.pkl")
    problem = checkpoint_problem(checkpoint, TrainingProgress.problem)
    assert problem.startswith(f"random_states_0.pkl {reason}")
    assert problem.endswith("so the run would not continue as it would have")


def test_a_random_state_that_loads_but_holds_nothing_is_named_and_the_checkpoint_before_is_used(copied, capsys):
    newest = copied / "run" / "checkpoints" / "step-00000004"
    torch.save({}, newest / "random_states_0.pkl")  # Accelerate skipped restoring it without a word
    resume(copied)
    out = capsys.readouterr().out
    assert f"WARNING: --resume does not use {newest}: random_states_0.pkl holds no `random_state`" in out
    assert "step-00000002: update 2" in out


# --- a checkpoint of N processes resumed on M -----------------------------------------------------------------------


def lengths(count=300):
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(3, 40, (count,), generator=generator)
    return source.tolist(), (source + 2).tolist()


@pytest.mark.parametrize("before, after, position", [(3, 2, 4), (1, 2, 7), (2, 3, 5), (2, 4, 11)])
def test_a_continued_epoch_trains_each_of_its_batches_once_in_order(before, after, position):
    source, target = lengths()
    make = lambda processes, index: TokenBudgetBatches(source, target, 200, 0, processes, index)  # noqa: E731
    everything = make(1, 0).all_batches(0)
    # `before` processes have taken `position` batches each, then `after` processes go on from there
    taken = [batch for index in range(before) for batch in make(before, index).batches(0)[:position]]
    assert sorted(map(sorted, taken)) == sorted(map(sorted, everything[: position * before]))
    continued = []
    for index in range(after):
        batches = make(after, index)
        batches.continue_epoch(0, position * before)
        continued.append(batches.batches(0))
    assert len({len(share) for share in continued}) == 1
    in_update_order = [share[k] for k in range(len(continued[0])) for share in continued]
    left_out = (len(everything) - position * before) % after
    assert in_update_order == everything[position * before : len(everything) - left_out]
    # the next epoch is shared from its start again
    assert batches.batches(1) == make(after, after - 1).batches(1)


def test_the_rest_of_an_epoch_too_short_to_share_is_passed_over():
    source, target = lengths()
    batches = TokenBudgetBatches(source, target, 200, 0, num_processes=4, process_index=3)
    total = len(batches.all_batches(0))
    batches.continue_epoch(0, total - 3)  # 3 batches left for 4 processes
    assert batches.batches(0) == []
    epoch, position, first = next(batches.stream(0, 0))
    assert (epoch, position) == (1, 0) and first == batches.all_batches(1)[3]


def test_a_checkpoint_goes_on_on_two_processes_and_back_on_one_after_the_same_batches(copied, monkeypatch, capsys):
    """1 process -> 2 (accelerate launch) -> 1. An update takes 2 batches on one process (2 micro-batches) and on
    two (1 each); the epoch's list is the same for all, so each part goes on where the one before stopped."""
    checkpoints = copied / "run" / "checkpoints"
    # 1 -> 2: the checkpoint of update 4 has taken batches 0-7 of epoch 0; update 5 takes 8 and 9
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    argv = tiny_argv(copied / "run", max_steps=5, resume=True, **RUN)
    two = subprocess.run(launch(REPO / "scripts" / "train.py", argv), capture_output=True, text=True, timeout=400,
                         env=env, cwd=copied)
    assert two.returncode == 0, two.stderr[-5000:]
    assert (f"WARNING: {checkpoints / 'step-00000004'} was written by 1 process(es) and this run has 2: it goes on "
            "after the same pairs, from batch 8 of the ") in two.stdout
    assert "random states: process 0 restored, process 1 seeded anew (from --seed and the update)." in two.stdout
    record = json.loads((checkpoints / "step-00000005" / "training_progress.json").read_text())
    assert record["num_processes"] == 2
    assert {k: record["progress"][k] for k in ("step", "epoch", "first_batch", "position")} == {
        "step": 5, "epoch": 0, "first_batch": 8, "position": 1}

    # 2 -> 1: update 6 takes batches 10 and 11, in order
    seen = []
    original_stream = TokenBudgetBatches.stream

    def recording_stream(self, *args, **kwargs):
        for epoch, position, indices in original_stream(self, *args, **kwargs):
            seen.append((epoch, self.all_batches(epoch).index(indices)))
            yield epoch, position, indices

    monkeypatch.setattr(TokenBudgetBatches, "stream", recording_stream)
    outcome = resume(copied, max_steps=6)
    out = capsys.readouterr().out
    assert "was written by 2 process(es) and this run has 1: it goes on after the same pairs, from batch 10" in out
    assert "random states: process 0 restored, those of process 1 not used." in out
    assert seen[:2] == [(0, 10), (0, 11)]
    # Accelerate's count of micro-batches, which ends an update every 2 of them here, stays on the updates'
    # boundaries (as loaded, 5 from the two processes' 1 per update, it would end the update after 1 micro-batch)
    assert outcome.accelerator.step == 6 * 2
    assert outcome.summary["steps"] == 6
    assert [r["step"] for r in metrics_records(copied / "run") if "loss" in r] == list(range(1, 7))
