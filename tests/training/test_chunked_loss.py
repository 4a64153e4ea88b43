"""--chunked_loss (vaswani.training.chunked_loss): the output layer's loss a chunk of rows at a time, with its
gradients, equal to the model's loss over the full logits (label smoothing, ignored labels, tied weights, fp32 and
bf16), without a tensor of the logits' size, compiled in one graph, and a run that trains as the run without it."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from accelerate.utils import DistributedType
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import tiny_config
from training_helpers import metrics_records, run_in_process, tiny_argv
from vaswani import VaswaniForConditionalGeneration
from vaswani.training.chunked_loss import ChunkedLossUpdates, linear_cross_entropy, loss_chunks, refusal


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def rows_and_projection(rows=300, d_model=64, vocabulary=1000, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d_model, generator=generator).requires_grad_()
    weight = (torch.randn(vocabulary, d_model, generator=generator) * 0.2).requires_grad_()
    labels = torch.randint(0, vocabulary, (rows,), generator=generator)
    labels[::7] = -100  # padding and other ignored positions
    return hidden, weight, labels


def full_logits_loss(hidden, weight, labels, label_smoothing, dtype):
    """The model's loss: the logits in the projection's precision, then float32 cross-entropy."""
    logits = hidden.to(dtype) @ weight.to(dtype).T
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, label_smoothing=label_smoothing)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunks", [1, 7, 303], ids=["one chunk", "7 chunks", "more chunks than rows"])
def test_the_loss_and_its_gradients_are_those_of_the_full_logits(dtype, label_smoothing, chunks):
    hidden, weight, labels = rows_and_projection()
    expected = full_logits_loss(hidden, weight, labels, label_smoothing, dtype)
    # a weight as the loss is weighted in an update (the micro-batch's share of the update's target tokens)
    expected_gradients = torch.autograd.grad(expected * 0.37, (hidden, weight))
    loss = linear_cross_entropy(hidden, weight, labels, label_smoothing, chunks=chunks, compute_dtype=dtype)
    gradients = torch.autograd.grad(loss * 0.37, (hidden, weight))
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for got, want in zip(gradients, expected_gradients):
        assert got.dtype == want.dtype == torch.float32
        # bf16: both round the logits' gradient and the products to bf16, in another order (the projection's
        # gradient is one product over all rows there, a sum of per-chunk products here)
        scale = want.abs().max()
        tolerance = 1e-5 * scale if dtype == torch.float32 else 1e-2 * scale
        torch.testing.assert_close(got, want, rtol=0, atol=tolerance)


def test_under_no_grad_the_loss_alone_is_computed():
    hidden, weight, labels = rows_and_projection()
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, labels, 0.1, chunks=4)
        expected = full_logits_loss(hidden, weight, labels, 0.1, torch.float32)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, expected)
    assert loss_chunks(32000, 512) == 16 and loss_chunks(8000, 128) == 16 and loss_chunks(100, 512) == 1


def model_and_batch(seed=0, vocabulary=400, pairs=3, target_length=9):
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=vocabulary, label_smoothing=0.1)).train()
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocabulary, (pairs, 11), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    labels = torch.randint(4, vocabulary, (pairs, target_length), generator=generator)
    labels[0, 6:] = -100
    return model, {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


@pytest.mark.parametrize("autocast", [None, torch.bfloat16], ids=["fp32", "bf16 autocast"])
def test_the_updates_loss_and_gradients_are_the_models(autocast):
    model, batch = model_and_batch()
    assert model.lm_head.weight is model.model.shared.weight  # tied: the projection's gradient adds to the embedding's
    with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=autocast is not None):
        expected = model(**batch).loss
    expected.backward()
    expected_gradients = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    loss = ChunkedLossUpdates(model, autocast, chunks=5)(**batch).loss
    loss.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5 if autocast is None else 2e-3, atol=1e-6)
    # against the largest gradient of all: a key's bias has a gradient of rounding noise (softmax ignores it)
    largest = max(gradient.abs().max().item() for gradient in expected_gradients.values())
    for name, parameter in model.named_parameters():
        tolerance = (1e-6 if autocast is None else 1e-2) * largest
        torch.testing.assert_close(parameter.grad, expected_gradients[name], rtol=0, atol=tolerance, msg=name)


class LargestTensor(TorchDispatchMode):
    """The most elements any operator's result holds."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for leaf in pytree.tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self.largest = max(self.largest, leaf.numel())
        return result


def test_no_tensor_holds_the_logits_of_the_batch_and_lm_head_is_never_called():
    vocabulary = 4000
    model, batch = model_and_batch(vocabulary=vocabulary, pairs=8, target_length=40)
    logits_size = batch["labels"].numel() * vocabulary
    calls = []
    model.lm_head.register_forward_hook(lambda module, inputs, output: calls.append(output.shape))
    with LargestTensor() as full:
        model(**batch).loss.backward()
    assert full.largest >= logits_size and len(calls) == 1  # the model's own loss: the logits, their gradient
    with LargestTensor() as chunked:
        ChunkedLossUpdates(model)(**batch).loss.backward()
    # one chunk's logits (32 chunks of the 320 rows), the projection and its gradient: an eighth of the logits
    assert chunked.largest <= max(vocabulary * model.config.d_model, logits_size // 8) < logits_size, chunked.largest
    assert len(calls) == 1  # lm_head not called again


def test_the_compiled_update_traces_one_graph_for_every_shape_giving_the_eager_loss():
    from torch._dynamo.utils import counters

    model, batch = model_and_batch()
    updates = ChunkedLossUpdates(model)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(updates, fullgraph=True, dynamic=True, backend="aot_eager")
    try:
        for length in (9, 5):  # another batch shape: the same graph
            shaped = {**batch, "labels": batch["labels"][:, :length].clone()}
            model.zero_grad(set_to_none=True)
            expected = updates(**shaped).loss
            expected.backward()
            expected_gradients = [parameter.grad.clone() for parameter in model.parameters()]
            model.zero_grad(set_to_none=True)
            loss = compiled(**shaped).loss
            loss.backward()
            torch.testing.assert_close(loss, expected)
            for got, want in zip((parameter.grad for parameter in model.parameters()), expected_gradients):
                torch.testing.assert_close(got, want)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    finally:
        torch._dynamo.reset()


def test_a_run_with_the_chunked_loss_trains_as_the_run_without(tmp_path):
    options = dict(dropout=0.0, max_steps=4, eval_steps=4, save_steps=4)
    run_in_process(tiny_argv(tmp_path / "full", **options))
    outcome = run_in_process(tiny_argv(tmp_path / "chunked", chunked_loss=True, **options))
    assert outcome.summary["steps"] == 4
    full, chunked = ([record["loss"] for record in metrics_records(tmp_path / name) if "loss" in record]
                     for name in ("full", "chunked"))
    assert len(chunked) == 4 and chunked == pytest.approx(full, rel=1e-5)
    evaluated = [record for record in metrics_records(tmp_path / "chunked") if "val_loss" in record]
    assert evaluated and evaluated[-1]["val_loss"] > 0  # evaluation: the model's own output layer


@pytest.mark.parametrize("processes, engine", [(2, DistributedType.MULTI_CPU), (1, DistributedType.FSDP)])
def test_several_processes_or_an_engine_are_refused_with_the_reason(processes, engine):
    accelerator = SimpleNamespace(num_processes=processes, distributed_type=engine)
    assert "--chunked_loss computes the loss outside the model's forward" in refusal(accelerator)
    assert refusal(SimpleNamespace(num_processes=1, distributed_type=DistributedType.NO)) is None


def test_a_batch_with_more_than_the_loss_needs_is_refused():
    model, batch = model_and_batch()
    with pytest.raises(ValueError, match=r"--chunked_loss computes the loss from input_ids, attention_mask and "
                                         r"labels; the batch also has \['decoder_input_ids'\]"):
        ChunkedLossUpdates(model)(**batch, decoder_input_ids=batch["labels"])
