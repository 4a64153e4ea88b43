"""A training update that keeps a GPU busy, checked on a CPU: batches in a few shapes, one host-device
synchronization per update, the finite check without a kernel per tensor, fused Adam on CUDA, collation in
DataLoader workers giving the same batches, bf16 by default on a GPU, and a compiled update giving eager's losses."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import PAIRS, tiny_config
from training_helpers import reset_accelerate
from vaswani import VaswaniForConditionalGeneration
from vaswani.training import engine, loop
from vaswani.training.arguments import parse_arguments
from vaswani.training.batching import BatchShapes, TokenBudgetBatches, collate, token_counts
from vaswani.training.engine import compiled_for_updates, default_mixed_precision
from vaswani.training.state import TrainingProgress
from vaswani.training.finite import non_finite_flag
from vaswani.training.update import run_update
from vaswani.training.optimization import build_optimizer_and_schedule


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def accelerator():
    yield Accelerator(cpu=True)
    reset_accelerate()


def caption_lengths(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token counts like those of Multi30k's captions (most 10 to 30, a long tail to 100)."""
    rng = np.random.default_rng(seed)
    source = np.clip(rng.gamma(4.0, 4.5, count).astype(int) + 3, 3, 100)
    target = np.clip((source * rng.uniform(0.8, 1.4, count)).astype(int), 3, 100)
    return source, target


def tokenized_rows(tokenizer, pairs) -> dict[str, list]:
    return {"input_ids": [tokenizer(s)["input_ids"] for s, _ in pairs],
            "labels": [tokenizer(text_target=t)["input_ids"] for _, t in pairs]}


# --- 1. batches in a few shapes --------------------------------------------------------------------------------------


def epoch_shapes(source, target, max_tokens: int, shapes: BatchShapes | None) -> set[tuple[int, int, int]]:
    """The (pairs, source length, target length) of every batch of an epoch, as collate pads them."""
    batches = TokenBudgetBatches(source, target, max_tokens, seed=0, shapes=shapes).batches(0)
    seen = set()
    for indices in batches:
        rows = {"input_ids": [[5] * source[i] for i in indices], "labels": [[5] * target[i] for i in indices]}
        tensors = collate(rows, 0, shapes)
        assert tensors["input_ids"].numel() <= max_tokens and tensors["labels"].numel() <= max_tokens
        seen.add((*tensors["input_ids"].shape, tensors["labels"].shape[1]))
    return seen


def test_a_compiled_run_sees_a_handful_of_batch_shapes_in_an_epoch():
    source, target = caption_lengths(6000)
    plain = epoch_shapes(source, target, 2048, None)
    bucketed = epoch_shapes(source, target, 2048, BatchShapes(2048, longest=128))
    assert len(bucketed) <= 24 and len(bucketed) * 3 < len(plain), (len(bucketed), len(plain))
    assert all(length % 8 == 0 for _, *lengths in bucketed for length in lengths)


def test_padding_to_a_bucket_changes_neither_the_loss_nor_the_token_counts(tokenizer):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).train()
    rows = tokenized_rows(tokenizer, PAIRS[:5])
    plain = collate(rows, tokenizer.pad_token_id)
    padded = collate(rows, tokenizer.pad_token_id, BatchShapes(4096, longest=128))
    assert padded["input_ids"].shape[0] == 8 and padded["input_ids"].shape[1] % 8 == 0  # rows and length filled up
    assert padded["labels"].shape[1] > plain["labels"].shape[1]
    assert token_counts(rows) == (int(plain["attention_mask"].sum()), int((plain["labels"] != -100).sum()))
    torch.testing.assert_close(model(**padded).loss, model(**plain).loss, rtol=1e-5, atol=1e-6)


# --- 3. one synchronization per update -------------------------------------------------------------------------------


class HostReads(TorchDispatchMode):
    """Counts the operators that hand a tensor's value to the host (on a GPU, each waits for the device)."""

    READS = {"aten::_local_scalar_dense", "aten::equal", "aten::is_nonzero", "aten::nonzero", "aten::item"}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in self.READS:
            self.reads.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def counting_host_reads(monkeypatch) -> list[str]:
    """Count, besides the operators, the Python conversions that read a tensor (.tolist() reads it without an
    operator)."""
    reads = []
    for name in ("tolist", "item", "__bool__", "__int__", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_an_update_of_several_micro_batches_reads_the_device_once(tokenizer, accelerator, monkeypatch):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    # fused, as on a GPU (unfused Adam reads its step count with .item(): a count kept on the host, no wait there)
    optimizer, schedule = build_optimizer_and_schedule(model, 1e-3, 10, fused=True)
    accelerator.gradient_accumulation_steps = 3
    model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    parts = [tokenized_rows(tokenizer, PAIRS[start:start + 3]) for start in (0, 3, 6)]
    batches = [collate(rows, tokenizer.pad_token_id) for rows in parts]
    args = parse_arguments(["--max_grad_norm", "1.0", "--output_dir", "unused"])[2]
    python_reads = counting_host_reads(monkeypatch)
    with HostReads() as operators:
        loss, tokens, norm = run_update(accelerator, model, optimizer, schedule, batches, args, TrainingProgress(),
                                        token_counts=[token_counts(rows) for rows in parts])
    assert python_reads == ["tolist"] and operators.reads == [], (python_reads, operators.reads)
    assert math.isfinite(loss) and norm > 0 and tokens == sum(map(sum, map(token_counts, parts)))


def test_the_finite_check_launches_no_kernel_per_tensor_and_finds_inf_and_nan():
    tensors = [torch.ones(3, 4) for _ in range(20)] + [torch.tensor(3.0), torch.ones(2, dtype=torch.float64)]
    with torch.profiler.profile() as profile:
        assert non_finite_flag(tensors, torch.device("cpu")).item() == 0.0
    kernels = [event.name for event in profile.events() if event.name.startswith("aten::")]
    assert kernels.count("aten::isfinite") <= 2 and "aten::all" in kernels  # one per (device, dtype) group
    assert sum(name in ("aten::linalg_vector_norm", "aten::_foreach_norm") for name in kernels) <= 24
    for bad in (math.inf, -math.inf, math.nan):
        broken = [tensor.clone() for tensor in tensors]
        broken[7][1, 2] = bad
        assert non_finite_flag(broken, torch.device("cpu")).item() == 1.0


# --- 4. fused Adam on CUDA; 6. bf16 by default on a GPU --------------------------------------------------------------


def test_adam_is_fused_where_the_weights_train_on_cuda_only(monkeypatch):
    model = torch.nn.Linear(3, 2)
    optimizer, _ = build_optimizer_and_schedule(model, 1e-3, 10)
    assert not optimizer.defaults["fused"]
    from vaswani.training import optimization

    monkeypatch.setattr(optimization, "trains_on_cuda", lambda parameters: True)
    fused, _ = build_optimizer_and_schedule(model, 1e-3, 10)  # fused Adam also exists on a CPU: built here
    assert fused.defaults["fused"] is True
    plain, _ = build_optimizer_and_schedule(model, 1e-3, 10, fused=False)
    assert not plain.defaults["fused"]


@pytest.mark.parametrize("option, environment, gpu, expected", [
    (None, {}, True, "bf16"),  # a bf16 GPU, nothing said: bf16
    (None, {}, False, None),  # a CPU (or an older GPU): Accelerate's fp32
    ("no", {}, True, "no"),  # the option wins
    ("fp16", {}, True, "fp16"),
    (None, {"ACCELERATE_MIXED_PRECISION": "no"}, True, None),  # accelerate launch's config wins: Accelerate reads it
])
def test_mixed_precision_defaults_to_bf16_on_a_gpu_that_computes_in_it(option, environment, gpu, expected):
    assert default_mixed_precision(option, environment, lambda: gpu) == expected


# --- 5. collation in DataLoader workers ------------------------------------------------------------------------------


def fake_run(tokenizer, workers: int, epoch: int = 0, position: int = 0):
    """What `training_batches` reads of a run: the training pairs, their batches and where the run is."""
    from datasets import Dataset

    pairs = (PAIRS * 4)[:30]
    rows = tokenized_rows(tokenizer, pairs)
    train = Dataset.from_dict(rows)
    lengths = [len(ids) for ids in rows["input_ids"]], [len(ids) for ids in rows["labels"]]
    return SimpleNamespace(
        args=SimpleNamespace(dataloader_num_workers=workers), accelerator=SimpleNamespace(device=torch.device("cpu")),
        prepared=SimpleNamespace(train=train), tokenizer=tokenizer, resegmented=None,
        batches=TokenBudgetBatches(*lengths, 160, seed=3, shapes=BatchShapes(160, longest=128)),
        progress=TrainingProgress(epoch=epoch, position=position),
    )


def test_batches_collated_in_workers_are_those_of_the_training_process_and_resume_alike(tokenizer):
    def first(workers, count, epoch=0, position=0):
        stream = loop.training_batches(fake_run(tokenizer, workers, epoch, position))
        return [next(stream) for _ in range(count)]

    alone, in_workers = first(0, 12), first(2, 12)
    assert alone[-1].epoch >= 1, "the test needs batches from two epochs"
    for mine, theirs in zip(alone, in_workers):
        assert (mine.epoch, mine.position, mine.following, mine.tokens) == \
            (theirs.epoch, theirs.position, theirs.following, theirs.tokens)
        assert mine.tensors.keys() == theirs.tensors.keys()
        assert all(torch.equal(mine.tensors[name], theirs.tensors[name]) for name in mine.tensors)
    resumed = first(2, 4, *alone[5].following)  # a run resumed where the sixth batch left it
    assert all(torch.equal(a.tensors["labels"], b.tensors["labels"]) for a, b in zip(resumed, alone[6:]))


# --- 2. a compiled update --------------------------------------------------------------------------------------------


def test_compiled_updates_take_every_shape_in_one_graph_giving_eagers_losses(tokenizer, monkeypatch):
    """compiled_for_updates with the `eager` backend: dynamo captures the whole forward (a graph break or a
    recompile is an error, as under inductor), without inductor's code generation, which takes minutes on two shared
    CPU cores; inductor is what a GPU run gets. One graph for every shape: each recompilation cost a GPU 40-80 s."""
    shapes = BatchShapes(4096, longest=128)
    updates = [tokenized_rows(tokenizer, PAIRS[start:end]) for start, end in ((0, 3), (3, 9), (0, 9), (2, 5))]
    batches = [collate(rows, tokenizer.pad_token_id, shapes) for rows in updates]
    assert len({tuple(batch["labels"].shape) for batch in batches}) >= 3, "the test needs several shapes"
    args = parse_arguments(["--max_grad_norm", "1.0", "--output_dir", "unused"])[2]

    def losses(compile_it: bool) -> list[float]:
        torch.manual_seed(0)
        model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), dropout=0.0))
        accelerator = Accelerator(cpu=True)
        try:
            optimizer, schedule = build_optimizer_and_schedule(model, 1e-3, 2)
            model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
            update_model = compiled_for_updates(accelerator, model) if compile_it else model
            return [run_update(accelerator, update_model, optimizer, schedule, [batch], args, TrainingProgress(),
                               token_counts=[token_counts(rows)])[0] for batch, rows in zip(batches, updates)]
        finally:
            reset_accelerate()

    monkeypatch.setattr(engine, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        compiled = losses(compile_it=True)
    # torch's default made the pairs, then the lengths dynamic as they changed: three graphs for these four updates
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    assert compiled == pytest.approx(losses(compile_it=False), rel=1e-5)
