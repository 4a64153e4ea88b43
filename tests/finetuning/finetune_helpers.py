"""What the fine-tuning tests share beyond helpers.py: training data for classification, call counting, the saved
weights, and two-process launches."""

import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from helpers import PAIRS, REPO, launch


def language_rows(english=0, german=1):
    """English sentences labelled `english`, German ones `german`: a task a tiny model learns in a few steps."""
    return [row for en, de in PAIRS for row in ({"text": en, "label": english}, {"text": de, "label": german})]


def count_calls(monkeypatch, cls) -> dict:
    """Count the calls of `cls.forward` from now on: `counter["calls"]`. Patch a plain module (not a layer that
    transformers wraps for checkpointing, whose wrapper must stay the outermost `forward`)."""
    counter = {"calls": 0}
    forward = cls.forward

    def counting_forward(self, *args, **kwargs):
        counter["calls"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(cls, "forward", counting_forward)
    return counter


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def run_two_processes(script: str, argv: list[str], launcher: str = "torchrun", timeout: int = 300) -> str:
    """Run a script on 2 CPU processes; returns stdout + stderr, failing with them if the run fails."""
    scripts = str(REPO / "scripts" / f"{script}.py")
    bin_dir = Path(sys.executable).parent
    if launcher == "torchrun":
        # --standalone: a free port (the suite's workers launch at the same time; the default is always 29500)
        command = [str(bin_dir / "torchrun"), "--standalone", "--nproc_per_node", "2", scripts, *argv,
                   "--use_cpu", "true"]
        env = {**os.environ}
    else:
        command = launch(Path(scripts), argv)
        env = {**os.environ, "ACCELERATE_USE_CPU": "1"}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"{launcher} run failed ({result.returncode}):\n{output[-6000:]}")
    return output
