"""A preempted job and a full disk lose nothing of a training run (the promises table of scripts/training.md):

- SIGTERM (what a preempted SLURM, Kubernetes or spot job receives) or SIGUSR1 (SLURM's early warning) during
  scripts/train.py: the update under way is finished, a complete checkpoint of it is written, the folder's lock is
  released, and the command says so in one line and exits with status 75 (resumable); `--resume` then gives the
  weights of a run that was never stopped, tensor for tensor. Under `accelerate launch` with two processes, a signal
  to one process only stops both after the same update.
- The same for a fine-tuning script, through the Trainer's control.
- A full disk inside torch.save at a checkpoint, or at metrics.jsonl: one line, no temporary folder left, the earlier
  checkpoints and the metrics lines already written intact.

The signals are real (`os.kill` of the process that trains, sent from inside an update: deterministic); the full
disk is the error torch raises on one (written to /dev/full), or an OSError(ENOSPC) from the write.
"""

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import transformers
from accelerate import Accelerator
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from helpers import PAIRS, QUIET, REPO, launch, load_script, write_jsonl
from training_helpers import metrics_records, processes_writing_to, reset_accelerate, run_in_process, tiny_argv
from vaswani.cli import run_command
from vaswani.training import engine, loop
from vaswani.training.checkpoints import list_checkpoints
from vaswani.runs.errors import CheckpointError, MetricsWriteError, TrainingError
from vaswani.runs.preemption import EXIT_RESUMABLE, STOP_SIGNALS, StoppedBySignal


pytestmark = pytest.mark.usefixtures("one_thread")
train_script = load_script("train")
OPTIONS = dict(max_steps=8, save_steps=4, eval_steps=100, dropout=0.1)  # dropout on: the RNG state must resume


@pytest.fixture(autouse=True)
def stop_signals_as_before():
    """A run stopped by a signal ignores the stop signals for the rest of the process's life (see StopSignals);
    this process goes on to other tests, with the handlers it had."""
    handlers = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    yield
    for number, handler in handlers.items():
        signal.signal(number, handler)


def signal_during_update(monkeypatch, number: int, update: int) -> None:
    """Send the real signal `number` to this process while update `update` (counted in this process) runs."""
    run_update, calls = loop.run_update, []

    def run_update_then_signal(*args, **kwargs):
        calls.append(None)
        if len(calls) == update:
            os.kill(os.getpid(), number)
        return run_update(*args, **kwargs)

    monkeypatch.setattr(loop, "run_update", run_update_then_signal)


def run_train_command(argv: list[str], monkeypatch) -> int:
    """scripts/train.py as its command line runs it (`run_command`), in this process; returns its exit status."""
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    try:
        with pytest.raises(SystemExit) as ended:
            run_command(train_script.main, TrainingError)
    finally:  # as run_in_process does
        reset_accelerate()
    return ended.value.code


def same_weights(first: Path, second: Path) -> None:
    """The model.safetensors of two folders hold the same tensors (as the kill-during-a-save test compares them)."""
    expected, found = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert expected.keys() == found.keys()
    for name in expected:
        torch.testing.assert_close(found[name], expected[name], rtol=1e-6, atol=1e-7)


def stopped_message(signal_name: str, checkpoint: Path) -> str:
    update = int(checkpoint.name.split("-")[1])
    return (
        f"train.py: stopped by {signal_name} after update {update}: its checkpoint {checkpoint} holds the run so far; "
        "the same command with --resume continues it exactly (exit status 75: stopped by a signal, resumable)."
    )


def test_sigterm_saves_the_update_under_way_exits_75_and_resume_gives_the_uninterrupted_weights(tmp_path, monkeypatch,
                                                                                                 capsys):
    run_in_process(tiny_argv(tmp_path / "uninterrupted", **OPTIONS))
    stopped = tmp_path / "stopped"
    signal_during_update(monkeypatch, signal.SIGTERM, update=5)
    status = run_train_command(tiny_argv(stopped, **OPTIONS), monkeypatch)

    assert status == EXIT_RESUMABLE == 75
    assert capsys.readouterr().err.strip().splitlines()[-1] == stopped_message(
        "SIGTERM", stopped / "checkpoints" / "step-00000005"
    )
    assert [path.name for _, path in list_checkpoints(stopped / "checkpoints")] == ["step-00000004", "step-00000005"]
    assert not [p for p in (stopped / "checkpoints").iterdir() if p.name.startswith(".")]
    assert json.loads((stopped / ".run.lock").read_text()).get("released"), "the lock is let go"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, "on its way out, the process ignores further signals"

    monkeypatch.undo()  # the updates run as they do
    run_in_process(tiny_argv(stopped, resume=True, **OPTIONS))
    same_weights(tmp_path / "uninterrupted" / "last", stopped / "last")
    assert [r["step"] for r in metrics_records(stopped) if "loss" in r] == list(range(1, 9))


def test_sigusr1_stops_the_same_way(tmp_path, monkeypatch, capsys):
    signal_during_update(monkeypatch, signal.SIGUSR1, update=2)
    assert run_train_command(tiny_argv(tmp_path, **OPTIONS), monkeypatch) == 75
    checkpoint = tmp_path / "checkpoints" / "step-00000002"
    assert capsys.readouterr().err.strip().splitlines()[-1] == stopped_message("SIGUSR1", checkpoint)
    assert [path for _, path in list_checkpoints(tmp_path / "checkpoints")] == [checkpoint]


def test_two_processes_stop_after_the_same_update_when_one_of_them_gets_the_signal(tmp_path):
    """The signal reaches the second process only (the launcher and the first get none): the first learns of it
    through the reduction that checks each update's weights, and both write their part of one checkpoint."""
    output_dir = tmp_path / "run"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    argv = tiny_argv(output_dir, max_steps=100_000, save_steps=100_000, eval_steps=100_000)
    log = tmp_path / "stderr.txt"
    with training_under_way(launch(REPO / "scripts" / "train.py", argv), output_dir, log, env) as launcher:
        main_worker = json.loads((output_dir / ".run.lock").read_text())["pid"]
        second_worker = [pid for pid in processes_writing_to(output_dir) if pid not in (launcher.pid, main_worker)]
        assert len(second_worker) == 1
        os.kill(second_worker[0], signal.SIGTERM)
        launcher.wait(timeout=120)

    # the first process says it, once; both exit with 75 (the launcher then fails with its own status)
    stderr = log.read_text()
    stopped = [line for line in stderr.splitlines() if "train.py: stopped by" in line]
    assert len(stopped) == 1, stderr[-3000:]
    update = int(stopped[0].split("after update ")[1].split(":")[0])
    assert stopped[0].startswith(f"train.py: stopped by a stop signal to another process of the run after update "
                                 f"{update}: its checkpoint {output_dir / 'checkpoints' / f'step-{update:08d}'}")
    assert "exitcode  : 75" in stderr and "exitcode  : -" not in stderr
    # one complete checkpoint of that update, with both processes' random states; the log stops there too
    [(step, checkpoint)] = list_checkpoints(output_dir / "checkpoints")
    assert step == update and (checkpoint / "random_states_1.pkl").is_file()
    assert json.loads((checkpoint / "training_progress.json").read_text())["progress"]["step"] == update
    assert [r["step"] for r in metrics_records(output_dir)][-1] == update
    assert json.loads((output_dir / ".run.lock").read_text()).get("released")


def test_under_the_resumable_launcher_a_stopped_run_exits_75(tmp_path):
    """scripts/resumable_launch.py around `accelerate launch` on two processes: SIGTERM to it alone (as a container's
    first process gets it) reaches both workers, which stop after the same update with a checkpoint and exit 75; the
    launcher fails with its own status (1), and the command ends with 75 and a line saying why."""
    output_dir = tmp_path / "run"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    argv = tiny_argv(output_dir, max_steps=100_000, save_steps=100_000, eval_steps=100_000)
    command = [sys.executable, str(REPO / "scripts" / "resumable_launch.py"), *launch(REPO / "scripts" / "train.py",
                                                                                      argv)]
    log = tmp_path / "stderr.txt"
    with training_under_way(command, output_dir, log, env) as wrapper:
        os.kill(wrapper.pid, signal.SIGTERM)
        status = wrapper.wait(timeout=120)
    stderr = log.read_text()
    assert status == EXIT_RESUMABLE, stderr[-3000:]
    assert "exitcode  : 75" in stderr  # what the launcher alone says, ending with status 1
    assert stderr.strip().splitlines()[-1] == ("2 process(es) stopped on a signal after saving a checkpoint: exit "
                                               "status 75 (resumable; the launcher's own was 1).")
    [(step, checkpoint)] = list_checkpoints(output_dir / "checkpoints")
    assert (checkpoint / "random_states_1.pkl").is_file()


def test_sigterm_during_the_set_up_exits_75_with_its_line(tmp_path, monkeypatch, capsys):
    """A signal before the first update (here while the data are prepared) ends the run at once, nothing being
    trained: one line and status 75, so that a job requeued on it starts again (it was 143, and no line)."""
    prepare_data = engine.prepare_data

    def prepare_data_then_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return prepare_data(*args, **kwargs)

    monkeypatch.setattr(engine, "prepare_data", prepare_data_then_signal)
    assert run_train_command(tiny_argv(tmp_path, **OPTIONS), monkeypatch) == EXIT_RESUMABLE
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train.py: stopped by SIGTERM while the run was being set up, before its first update: nothing was trained, "
        "so nothing is lost; the same command with --resume starts it again (exit status 75: stopped by a signal, "
        "resumable).")
    assert list_checkpoints(tmp_path / "checkpoints") == []
    assert json.loads((tmp_path / ".run.lock").read_text()).get("released")  # the folder let go


def catches(pid: int, number: int) -> bool:
    """Whether process `pid` has a handler of its own for signal `number` (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return False


def test_sigterm_while_train_py_imports_its_libraries_exits_75_with_its_line(tmp_path):
    """SIGTERM in train.py's first seconds, while it imports torch and transformers, exited 143 with no line."""
    process = subprocess.Popen([sys.executable, str(REPO / "scripts" / "train.py"), *tiny_argv(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 3  # the handler comes first in the script, seconds before its imports end
    while not catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_RESUMABLE, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == (
        "train.py: stopped by SIGTERM while the command was starting, before the run was set up: nothing was trained, "
        "so nothing is lost; the same command starts it again (exit status 75: stopped by a signal, resumable).")
    assert "Traceback" not in stderr and not (tmp_path / "checkpoints").exists()


@contextlib.contextmanager
def training_under_way(command: list[str], output_dir: Path, log: Path, env: dict):
    """`command` started in a session of its own, its stderr in `log` (a file, not a pipe: the progress bars would
    fill a pipe nobody reads yet), once its run has logged its first updates (a bounded wait); whatever is left of
    it is killed at the end."""
    with open(log, "w") as stderr_file:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr_file, env=env, cwd=REPO,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not metrics_started(output_dir):
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first updates"
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in processes_writing_to(output_dir):
            os.kill(pid, signal.SIGKILL)


def metrics_started(output_dir: Path) -> bool:
    """Whether the run has logged its first two updates (logging_steps=1)."""
    path = output_dir / "metrics.jsonl"
    return path.is_file() and path.read_text().count("\n") >= 2


# --- fine-tuning, through the Trainer ---------------------------------------------------------------------------

finetune_classification = load_script("finetune_classification")


def finetune_argv(tokenizer_dir: Path, data: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--preset", "tiny", "--tokenizer_name", str(tokenizer_dir), "--config_overrides", "dropout=0.1",
        "--train_file", str(data), "--output_dir", str(output_dir), "--per_device_train_batch_size", "4",
        "--do_train", "--max_steps", "6", "--save_strategy", "no", *QUIET, *extra,
    ]


def test_a_fine_tuning_script_saves_at_the_signal_and_resumes_from_that_update(tokenizer, tmp_path, monkeypatch):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    rows = [row for pair in PAIRS for row in ({"text": pair[0], "label": 0}, {"text": pair[1], "label": 1})]
    data = write_jsonl(tmp_path / "train.jsonl", rows)  # English or German?
    finetune_classification.main(finetune_argv(tmp_path / "tokenizer", data, tmp_path / "uninterrupted"))

    training_step, calls = transformers.Trainer.training_step, []

    def training_step_then_signal(self, *args, **kwargs):
        calls.append(None)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return training_step(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "training_step", training_step_then_signal)
    stopped = tmp_path / "stopped"
    with pytest.raises(StoppedBySignal) as caught:
        finetune_classification.main(finetune_argv(tmp_path / "tokenizer", data, stopped))
    assert caught.value.exit_status == 75
    assert str(caught.value) == (
        f"stopped by SIGTERM after update 3: its checkpoint {stopped / 'checkpoint-3'} holds the run so far; the "
        "same command with --resume_from_checkpoint last continues it (exit status 75: stopped by a signal, "
        "resumable)."
    )
    assert sorted(p.name for p in stopped.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-3"]
    assert not (stopped / "model.safetensors").exists(), "a stopped run publishes no final model"

    monkeypatch.undo()
    finetune_classification.main(finetune_argv(tmp_path / "tokenizer", data, stopped, "--resume_from_checkpoint",
                                               "last"))
    same_weights(tmp_path / "uninterrupted", stopped)


# --- a full disk ---------------------------------------------------------------------------------------------------


def torch_save_onto_a_full_disk(monkeypatch, where: str) -> None:
    """torch.save into a folder whose name holds `where` fails as on a full disk: written to /dev/full, torch raises
    what it raises there (a RuntimeError of its zip writer, while handling another)."""
    save = torch.save

    def save_or_fill_the_disk(obj, f, *args, **kwargs):
        if where in str(f):
            return save(obj, "/dev/full", *args, **kwargs)
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save_or_fill_the_disk)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device that is always full")
def test_a_full_disk_inside_torch_save_is_one_line_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    torch_save_onto_a_full_disk(monkeypatch, ".tmp-step-00000004")
    with pytest.raises(CheckpointError) as caught:
        run_in_process(tiny_argv(tmp_path, max_steps=4, save_steps=2, eval_steps=100))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Could not save the checkpoint of update 4 to {tmp_path / 'checkpoints'}")
    assert "torch could not write a file ([enforce fail" in message and "bytes left on that disk" in message
    assert "Its temporary folder is removed; earlier checkpoints are intact" in message
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "checkpoints" / "step-00000002" / "model")


def fill_the_disk_at_the_metrics_line_of(monkeypatch, output_dir: Path, update: int) -> None:
    """The write of update `update`'s line to metrics.jsonl stops halfway (a short write), then fails with ENOSPC."""
    write, metrics = os.write, output_dir / "metrics.jsonl"

    def write_until_full(descriptor, data):
        if metrics.exists() and os.fstat(descriptor).st_ino == metrics.stat().st_ino:
            if f'"step": {update},'.encode() in bytes(data):
                return write(descriptor, bytes(data)[: len(data) // 2])
            if not bytes(data).startswith(b"{"):  # the rest of that line
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(descriptor, data)

    monkeypatch.setattr(os, "write", write_until_full)


@pytest.mark.parametrize("checkpoints_fit", [True, False], ids=["a checkpoint still fits", "nothing fits"])
def test_a_full_disk_at_the_metrics_keeps_every_line_written_and_stops_in_one_line(tmp_path, monkeypatch,
                                                                                  checkpoints_fit):
    fill_the_disk_at_the_metrics_line_of(monkeypatch, tmp_path, update=5)
    if not checkpoints_fit:
        save_state = Accelerator.save_state

        def save_state_onto_a_full_disk(self, output_dir=None, **kwargs):
            if output_dir.endswith("step-00000005"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), output_dir)
            return save_state(self, output_dir, **kwargs)

        monkeypatch.setattr(Accelerator, "save_state", save_state_onto_a_full_disk)
    with pytest.raises(MetricsWriteError) as caught:
        run_in_process(tiny_argv(tmp_path, max_steps=8, save_steps=4, eval_steps=100))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Could not write the record of update 5 to {tmp_path / 'metrics.jsonl'} ([Errno 28] "
                              "No space left on device); the lines it held before are intact.")
    assert [r["step"] for r in metrics_records(tmp_path)] == [1, 2, 3, 4], "no line lost, none cut"
    checkpoints = [path.name for _, path in list_checkpoints(tmp_path / "checkpoints")]
    if checkpoints_fit:
        assert message.endswith("Saved the checkpoint of update 5 all the same. Free disk space, then continue with "
                                "--resume.")
        assert checkpoints == ["step-00000004", "step-00000005"]
    else:
        assert (f"A checkpoint of update 5 could not be written either (its temporary folder is removed); the latest "
                f"one is {tmp_path / 'checkpoints' / 'step-00000004'}") in message
        assert checkpoints == ["step-00000004"]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]
    assert json.loads((tmp_path / ".run.lock").read_text()).get("released")
