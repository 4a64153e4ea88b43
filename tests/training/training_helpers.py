"""What the training tests share: a tiny run's command line, a run in this process or as a command, a copy of a run
to change, its metrics log, and runs launched as two processes.

Runs are tiny (a 55k-parameter model, a few hundred synthetic pairs, a few updates) and run in this process, except
where a process must die (the kill-and-resume test) or several must cooperate (test_training_distributed.py).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from accelerate.state import AcceleratorState, GradientState

from helpers import REPO
from vaswani.training.arguments import parse_arguments
from vaswani.training.loop import train

# the tracker of the shared runs: TensorBoard where its extra is installed (the tests that read its logs skip without it)
REPORT_TO = "tensorboard" if importlib.util.find_spec("tensorboard") else "none"


TINY_RUN = dict(  # on the synthetic task, the default data
    synthetic_train_size=240, synthetic_validation_size=12, max_source_length=32,
    max_target_length=32, preset="tiny", vocab_size=400, dropout=0.1, max_steps=8, max_tokens_per_batch=256,
    tokens_per_update=512, learning_rate=3e-3, warmup_steps=4, logging_steps=1, eval_steps=4, save_steps=2,
    keep_checkpoints=3, eval_num_beams=2, eval_max_new_tokens=12, max_eval_samples=6, eval_batch_size=4,
    report_to="none", seed=0,
)


def tiny_argv(output_dir, **overrides) -> list[str]:
    """Command-line arguments of a run that takes a few seconds on a CPU."""
    argv = ["--output_dir", str(output_dir)]
    for name, value in {**TINY_RUN, **overrides}.items():
        if value is not None:
            argv += [f"--{name}", *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    return argv


def run_in_process(argv):
    """A run of train.py's code in this process (quicker than a command); Accelerate's state is reset after it."""
    try:
        return train(*parse_arguments(argv))
    finally:
        reset_accelerate()


def reset_accelerate() -> None:
    """Accelerate keeps its state in class attributes: the next run in this process starts afresh."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def run_script(argv, check=True) -> subprocess.CompletedProcess:
    """scripts/train.py as a command in a fresh process, on one thread; a failure fails the test unless `check` is
    False."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), *argv], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if check and result.returncode != 0:
        pytest.fail(f"train.py failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def copy_of(run: Path, tmp_path: Path) -> Path:
    """A copy of the run folder `run` in `tmp_path`, to change without touching a run other tests share."""
    return Path(shutil.copytree(run, tmp_path / "run"))


def metrics_records(output_dir: Path) -> list[dict]:
    """The records of a run's metrics.jsonl, in order."""
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by whoever adopted it, counts as dead)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def processes_writing_to(output_dir: Path) -> list[int]:
    """The live processes, other than this one, whose command line names `output_dir`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(output_dir).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return [pid for pid in found if pid != os.getpid() and process_alive(pid)]
