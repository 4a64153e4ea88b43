"""vaswani.runs.ownership: one writer per output folder; of two runs started together, one is refused, naming
the other, and a lock left by a killed run is named and taken over."""

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO
from training_helpers import run_in_process, tiny_argv

pytestmark = pytest.mark.usefixtures("one_thread")


def test_two_runs_started_together_on_one_folder_one_is_refused_naming_the_other(tmp_path):
    # both long enough that the one that gets the folder is still training when the other one asks for it
    argv = [sys.executable, str(REPO / "scripts" / "train.py"),
            *tiny_argv(tmp_path / "run", max_steps=100_000, save_steps=100_000, eval_steps=100_000)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2)]
    try:
        finished = None
        while finished is None:  # the refused one exits within seconds; the other trains until it is stopped
            for run in runs:
                try:
                    run.wait(timeout=0.5)
                    finished = run
                    break
                except subprocess.TimeoutExpired:
                    pass
        other = runs[1] if finished is runs[0] else runs[0]
        assert other.poll() is None, "exactly one of the two runs may write in the folder"
        stderr = finished.stderr.read()
        assert finished.returncode == 1, stderr[-3000:]
        assert f"is in use by another run: process {other.pid} on " in stderr
        assert "Traceback" not in stderr
    finally:
        for run in runs:
            run.kill()
            run.wait()


def test_a_lock_left_by_a_killed_run_is_named_and_taken_over(tmp_path, capsys):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": "yesterday"}))
    run_in_process(tiny_argv(tmp_path, max_steps=2, save_steps=100, eval_steps=100))
    out = capsys.readouterr().out
    assert (f"Note: the previous run in {tmp_path} (process 999999 on elsewhere, started yesterday (?)) ended "
            "without releasing its lock (killed?); taking the folder over.") in out
    record = json.loads((tmp_path / ".run.lock").read_text())
    assert record["pid"] == os.getpid() and "released" in record  # this run's, let go at its end
