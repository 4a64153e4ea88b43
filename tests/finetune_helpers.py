"""Tiny data, checkpoints and launchers shared by the fine-tuning and evaluation tests."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import PAIRS, REPO, tiny_config
from vaswani import VaswaniForConditionalGeneration


NER_SENTENCES = [
    ("Peter Blackburn lives in Brussels .", "B-PER I-PER O O B-LOC O"),
    ("EU rejects German call to boycott British lamb .", "B-ORG O B-MISC O O O B-MISC O O"),
    ("Angela Merkel visited Paris on Monday .", "B-PER I-PER O B-LOC O O O"),
    ("The United Nations met in New York .", "O B-ORG I-ORG O O B-LOC I-LOC O"),
    ("Maria works for Siemens in Munich .", "B-PER O O B-ORG O B-LOC O"),
]
NER_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]

# Options every test run shares: quiet, no pinned memory (there is no GPU), nothing reported anywhere.
QUIET = ["--dataloader_pin_memory", "false", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0"]


@pytest.fixture(scope="module")
def one_thread():
    """Run the module's tiny models on one thread: on CPU cores shared with other work, a second torch thread mostly
    waits for the first (a step of the tiny model took 10x longer with two threads than with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def language_rows(english=0, german=1):
    """English sentences labelled `english`, German ones `german`: a task a tiny model learns in a few steps."""
    return [row for en, de in PAIRS for row in ({"text": en, "label": english}, {"text": de, "label": german})]


def ner_rows():
    return [{"id": i, "tokens": text.split(), "ner_tags": tags.split()} for i, (text, tags) in enumerate(NER_SENTENCES)]


def save_seq2seq_checkpoint(folder: Path, tokenizer, seed: int = 0, **config) -> Path:
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **config))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


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


def load_script(name: str):
    """A script of scripts/ as a module, to call its `main(argv)` in this process."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def run_two_processes(script: str, argv: list[str], launcher: str = "torchrun", timeout: int = 300) -> str:
    """Run a script on 2 CPU processes; returns stdout + stderr, failing with them if the run fails."""
    scripts = str(REPO / "scripts" / f"{script}.py")
    bin_dir = Path(sys.executable).parent
    if launcher == "torchrun":
        command = [str(bin_dir / "torchrun"), "--nproc_per_node", "2", scripts, *argv, "--use_cpu", "true"]
        env = {**os.environ}
    else:
        command = [str(bin_dir / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", scripts, *argv]
        env = {**os.environ, "ACCELERATE_USE_CPU": "1"}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"{launcher} run failed ({result.returncode}):\n{output[-6000:]}")
    return output
