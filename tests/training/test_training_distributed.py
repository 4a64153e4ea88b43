"""Training in two processes on a CPU, launched the way users launch it on GPUs:

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 ...

(`accelerate launch --cpu --num_processes 2` would quietly run one process.) The launched program trains with
`vaswani.training` and records, in each process, which batches it trained on, its final weights, and its share of a
distributed generation; the test then checks what DDP promises.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from helpers import REPO, launch
from training_helpers import metrics_records, process_alive, processes_writing_to, tiny_argv
from vaswani.training.checkpoints import latest_checkpoint


TRAIN_SCRIPT = REPO / "scripts" / "train.py"


WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import torch

    from vaswani.training import batching
    from vaswani.training.arguments import parse_arguments
    from vaswani.training.validation import generate_predictions
    from vaswani.training.loop import train
    from vaswani.training.seq2seq_data import load_raw_splits, prepare_data
    from transformers import AutoTokenizer

    # record every batch this process trains on
    seen = []
    original_stream = batching.TokenBudgetBatches.stream
    def recording_stream(self, *args, **kwargs):
        for item in original_stream(self, *args, **kwargs):
            seen.append(item[2])
            yield item
    batching.TokenBudgetBatches.stream = recording_stream

    data, model_args, args = parse_arguments(sys.argv[1:])
    outcome = train(data, model_args, args)
    accelerator, model = outcome.accelerator, outcome.model
    rank = accelerator.process_index

    # generation split across the processes, gathered on the main one; and the same pairs one by one, here
    output_dir = Path(args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir / "tokenizer")
    validation = prepare_data(*load_raw_splits(data, output_dir, args.seed), tokenizer, data).validation
    settings = dict(num_beams=1, max_new_tokens=10)
    distributed = generate_predictions(accelerator, model, tokenizer, validation, 2, **settings)
    one_by_one = [
        tokenizer.decode(model.generate(input_ids=torch.tensor([ids]), **settings)[0], skip_special_tokens=True)
        for ids in validation["input_ids"]
    ]
    torch.save(torch.cat([p.detach().flatten() for p in model.parameters()]), output_dir / f"weights-{rank}.pt")
    (output_dir / f"rank-{rank}.json").write_text(json.dumps(
        {"batches": seen, "distributed": distributed, "one_by_one": one_by_one}
    ))
    """
)


# With BPE-dropout the main process draws each epoch's segmentation and sends it to the other: were each to draw its
# own, their batch lists would differ, and the batches they train on would overlap (or their counts would, and the
# run would hang).
@pytest.mark.parametrize("bpe_dropout", [0.0, 0.1], ids=["usual segmentation", "BPE-dropout"])
def test_two_processes_train_one_model_on_different_batches(tmp_path, bpe_dropout):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    output_dir = tmp_path / "run"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    argv = tiny_argv(output_dir, max_steps=6, eval_steps=3, save_steps=3, synthetic_validation_size=7,
                     bpe_dropout=bpe_dropout)
    result = subprocess.run(launch(worker, argv), capture_output=True, text=True, timeout=400, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "2 process(es) x 1 micro-batch(es)" in result.stdout

    ranks = [json.loads((output_dir / f"rank-{r}.json").read_text()) for r in range(2)]
    # each process trained on its own batches, never one of the other's
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == 6
    pairs = [{i for batch in rank["batches"] for i in batch} for rank in ranks]
    assert pairs[0] and pairs[1] and not pairs[0] & pairs[1]
    # ... and yet both hold the same model, bit for bit
    assert torch.equal(torch.load(output_dir / "weights-0.pt"), torch.load(output_dir / "weights-1.pt"))
    # the loss fell
    losses = [r["loss"] for r in metrics_records(output_dir) if "loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0]
    # distributed generation, padded across processes and gathered, gives every pair once, in order
    assert ranks[0]["distributed"] == ranks[0]["one_by_one"] and len(ranks[0]["distributed"]) == 7
    assert ranks[1]["distributed"] == []
    # the main process alone reports (each evaluation printed once)
    assert result.stdout.count("update 3: val_loss") == 1
    assert (output_dir / "last" / "model.safetensors").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their launcher on Linux")
def test_killing_the_launchers_group_stops_its_workers_and_a_resume_continues_alone(tmp_path):
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    output_dir = tmp_path / "run"
    launcher = subprocess.Popen(
        launch(TRAIN_SCRIPT, tiny_argv(output_dir, max_steps=100_000, save_steps=2, eval_steps=100_000)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while latest_checkpoint(output_dir / "checkpoints") is None:  # bounded wait for the first checkpoint
            assert launcher.poll() is None and time.monotonic() < deadline, "the run ended before a checkpoint"
            time.sleep(0.2)
        holder = json.loads((output_dir / ".run.lock").read_text())["pid"]  # the main worker
        os.killpg(launcher.pid, signal.SIGKILL)  # the launcher's group; the workers have sessions of their own
        launcher.wait()
        deadline = time.monotonic() + 30
        while process_alive(holder):
            assert time.monotonic() < deadline, f"worker {holder} kept running after its launcher was killed"
            time.sleep(0.1)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for pid in processes_writing_to(output_dir):  # should the workers outlive the test, they stop here
            os.kill(pid, signal.SIGKILL)
    step = int(latest_checkpoint(output_dir / "checkpoints").name.split("-")[1])
    resumed = subprocess.run(
        launch(TRAIN_SCRIPT, tiny_argv(output_dir, max_steps=step + 2, save_steps=2, eval_steps=100_000, resume=True)),
        capture_output=True, text=True, timeout=400, env=env, cwd=REPO,
    )
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    assert "ended without releasing its lock (killed?); taking the folder over" in resumed.stdout
    assert f"Resumed from {output_dir / 'checkpoints'}" in resumed.stdout
    steps = [r["step"] for r in metrics_records(output_dir) if "loss" in r]
    assert steps == list(range(1, step + 3)), "one writer: each update logged once, in order"


PREPARING_WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from vaswani.training import engine, preparation
    from vaswani.training.arguments import parse_arguments
    from vaswani.training.loop import train

    # what this process did with the data: learned a tokenizer or not, tokenized each split or read it back
    learned, reports = [], []
    original_learn, original_prepare = preparation.VaswaniTokenizer.train_from_texts, engine.prepare_data
    def learn(*args, **kwargs):
        learned.append(True)
        return original_learn(*args, **kwargs)
    def prepare(*args, **kwargs):
        prepared = original_prepare(*args, **kwargs)
        reports.extend({"name": report.name, "reused": report.reused} for report in prepared.reports)
        return prepared
    preparation.VaswaniTokenizer.train_from_texts = learn
    engine.prepare_data = prepare

    data, model_args, args = parse_arguments(sys.argv[1:])
    outcome = train(data, model_args, args)
    rank = outcome.accelerator.process_index
    (Path(args.output_dir) / f"prepared-{rank}.json").write_text(json.dumps({"learned": len(learned),
                                                                             "reports": reports}))
    """
)


def test_two_processes_prepare_the_data_once_and_make_exact_updates(tmp_path):
    """The first process learns the tokenizer and tokenizes; the second waits for it and reads both back. With
    --exact_tokens_per_update, 600 tokens an update are 2 processes x 2 micro-batches of 150, and a resume on one
    process, which would cut other micro-batches (3 x 200), is refused before anything is loaded."""
    from training_helpers import run_in_process
    from vaswani.runs.errors import CheckpointError

    worker = tmp_path / "worker.py"
    worker.write_text(PREPARING_WORKER)
    output_dir = tmp_path / "run"
    # a cache of their own: no tokenizer or tokenization of another test to read back
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf")}
    argv = tiny_argv(output_dir, max_steps=2, eval_steps=2, save_steps=2, tokens_per_update=600,
                     max_tokens_per_batch=256, exact_tokens_per_update=True)
    result = subprocess.run(launch(worker, argv), capture_output=True, text=True, timeout=400, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "2 process(es) x 2 micro-batch(es) of <= 150 tokens per update = 600 tokens a side" in result.stdout
    first, second = (json.loads((output_dir / f"prepared-{rank}.json").read_text()) for rank in range(2))
    assert first == {"learned": 1, "reports": [{"name": "train", "reused": False},
                                               {"name": "validation", "reused": False}]}
    assert second == {"learned": 0, "reports": [{"name": "train", "reused": True},
                                                {"name": "validation", "reused": True}]}
    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\) and this run has 1: "
                                              r"--exact_tokens_per_update cuts micro-batches of 150 tokens on 2 and "
                                              r"of 200 on 1.*allowed: resume on 2 process\(es\)"):
        run_in_process(tiny_argv(output_dir, max_steps=4, eval_steps=2, save_steps=2, tokens_per_update=600,
                                 max_tokens_per_batch=256, exact_tokens_per_update=True, resume=True))
