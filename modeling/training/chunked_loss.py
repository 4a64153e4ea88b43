"""--chunked_loss: the output layer's loss without the logits of the whole batch in memory.

The model's forward computes the logits of every target position, (tokens x vocabulary), and the cross-entropy over
them: at 25,000 target tokens and a vocabulary of 32,000, 1.6 GB in bf16, then a float32 copy for the loss, its
softmax and the gradient of each, several times the memory of every other activation of the base model, and kernels
bound by memory rather than arithmetic. `linear_cross_entropy` computes the same loss from the decoder's last hidden
state and the output projection a chunk of rows at a time (`loss_chunks`), and the gradients with it (follows
liger-kernel's fused linear cross-entropy, written here with torch): each chunk's logits, their log-sum-exp, the loss
of its rows and the gradient of that loss with respect to its logits (softmax minus the smoothed target), which two
matrix products turn into the gradients of the hidden states and of the projection; then the chunk's logits are
dropped. The backward only scales the gradients kept by the gradient of the loss. The matrix products are those of
the model's forward and backward (three of tokens x d_model x vocabulary), so the arithmetic is the same; what is
kept is one chunk's logits, the gradient of the hidden states and a float32 gradient of the projection: on a CPU, at
4,096 tokens of a 32,000 vocabulary, a peak of 185 MiB against 1,513 in fp32, 265 against 1,547 in bf16
(scripts/tools/loss_memory.py).

The loss is that of `VaswaniForConditionalGeneration.forward`: the logits in the precision the projection computes in
(bf16 under bf16 autocast), then float32 cross-entropy with `config.label_smoothing`, the mean over the target tokens
whose label is not -100. `ChunkedLossUpdates` is what the updates call under --chunked_loss (the model's encoder and
decoder, then this loss); evaluation and generation use the model itself, logits and all.
"""

import math

import torch
from accelerate.utils import DistributedType
from torch import nn
from transformers.modeling_outputs import Seq2SeqLMOutput

IGNORE_INDEX = -100


def loss_chunks(vocab_size: int, d_model: int) -> int:
    """How many chunks the rows are cut into: the vocabulary over 4 x d_model, so that one chunk's logits hold about
    four times as many numbers as the hidden states. liger-kernel's fused linear cross-entropy takes the vocabulary
    over d_model (chunks of logits as large as the hidden states); each chunk adds a product the size of the
    projection into its gradient, and on a CPU, at 4,096 tokens of a 32,000 vocabulary and d_model 512, 63 chunks
    took 5.1 s in bf16 against 2.7 s for 16 (2.4 s for the full logits), for a peak of tens of MiB more. It depends
    on the model only, not on the batch, so that a compiled update traces one loop for every batch shape."""
    return max(1, math.ceil(vocab_size / (4 * d_model)))


def _chunked(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, label_smoothing: float, chunks: int,
             compute_dtype: torch.dtype, grad_hidden: bool, grad_weight: bool):
    """The mean loss, and the gradients of that loss with respect to `hidden` and `weight` where asked (else None).
    hidden (rows, d_model), weight (vocabulary, d_model), labels (rows,)."""
    rows, vocabulary = hidden.shape[0], weight.shape[0]
    # `chunks` chunks of equal size, the last rows padded with ignored labels: one loop, unrolled by a compiler, for
    # every number of rows (tensor_split's pieces differ by the rows' remainder, which a compiler guards on)
    size = (rows + chunks - 1) // chunks
    padding = size * chunks - rows
    labels = torch.cat([labels, labels.new_full((padding,), IGNORE_INDEX)]).view(chunks, size)
    padded = torch.cat([hidden, hidden.new_zeros(padding, hidden.shape[1])]).view(chunks, size, hidden.shape[1])
    valid = labels != IGNORE_INDEX
    # float32 like the loss; 0 target tokens give nan, as F.cross_entropy's mean does
    count = valid.sum().float()
    projection = weight.to(compute_dtype)
    loss = hidden.new_zeros((), dtype=torch.float32)
    hidden_gradients, weight_gradient = [], None
    if grad_weight:
        weight_gradient = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    for chunk in range(chunks):
        chunk_rows, chunk_labels, chunk_valid = padded[chunk].to(compute_dtype), labels[chunk], valid[chunk]
        logits = (chunk_rows @ projection.T).float()  # (size, vocabulary), as lm_head then .float() in the model
        targets = chunk_labels.clamp(min=0).unsqueeze(1)  # ignored rows read class 0; their loss is masked out
        log_normalizer = torch.logsumexp(logits, dim=-1, keepdim=True)
        target_logits = logits.gather(1, targets)
        # -log p(target), and -(1/V) sum_j log p(j) = log_normalizer - mean(logits): label smoothing's term
        row_losses = (1 - label_smoothing) * (log_normalizer - target_logits).squeeze(1) + label_smoothing * (
            log_normalizer.squeeze(1) - logits.mean(dim=-1))
        loss = loss + torch.where(chunk_valid, row_losses, 0.0).sum()
        if not (grad_hidden or grad_weight):
            continue
        # d(loss)/d(logits) = (softmax - (1 - eps) one_hot(target) - eps / V) / count, 0 on ignored rows; in place
        # of the logits, which are not needed any more
        gradient = logits.sub_(log_normalizer).exp_().sub_(label_smoothing / vocabulary)
        gradient.scatter_add_(1, targets, torch.full_like(target_logits, label_smoothing - 1))
        gradient.mul_((chunk_valid.float() / count).unsqueeze(1))
        gradient = gradient.to(compute_dtype)
        if grad_hidden:
            hidden_gradients.append((gradient @ projection).to(hidden.dtype))
        if grad_weight and compute_dtype == torch.float32:
            weight_gradient.addmm_(gradient.T, chunk_rows)  # in place: no temporary of the projection's size
        elif grad_weight:
            weight_gradient.add_(gradient.T @ chunk_rows)  # the product's bf16 added into float32, no float32 copy
    hidden_gradient = torch.cat(hidden_gradients)[:rows] if grad_hidden else None
    return loss / count, hidden_gradient, weight_gradient


class _LinearCrossEntropy(torch.autograd.Function):
    """The loss, its gradients computed with it (see the module's docstring), scaled by the backward."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, label_smoothing, chunks, compute_dtype, grad_hidden, grad_weight):
        loss, hidden_gradient, weight_gradient = _chunked(hidden, weight, labels, label_smoothing, chunks,
                                                          compute_dtype, grad_hidden, grad_weight)
        ctx.grad_hidden, ctx.grad_weight = grad_hidden, grad_weight
        ctx.save_for_backward(*[gradient for gradient in (hidden_gradient, weight_gradient) if gradient is not None])
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        saved = iter(ctx.saved_tensors)
        # (a bf16 gradient times the float32 scalar stays bf16, multiplied in float32)
        hidden_gradient = next(saved) * grad_output if ctx.grad_hidden else None
        weight_gradient = next(saved) * grad_output if ctx.grad_weight else None
        return hidden_gradient, weight_gradient, None, None, None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                         label_smoothing: float = 0.0, chunks: int | None = None,
                         compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """`F.cross_entropy((hidden @ weight.T).to(compute_dtype).float(), labels, ignore_index=-100,
    label_smoothing=label_smoothing)` and its gradients with respect to `hidden` and `weight`, without the logits of
    every row at once. hidden: (rows, d_model), or (batch, length, d_model) with labels (batch, length); weight:
    (vocabulary, d_model), the output projection; compute_dtype: the precision of the projection's matrix products
    (unset: the weight's; bf16 where the model runs under bf16 autocast); chunks: unset, `loss_chunks`. Under
    torch.no_grad (or when neither input requires a gradient) only the loss is computed."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0 and 1, got {label_smoothing}.")
    hidden = hidden.reshape(-1, hidden.shape[-1])
    labels = labels.reshape(-1)
    if labels.shape[0] != hidden.shape[0]:
        raise ValueError(f"labels give {labels.shape[0]} targets for {hidden.shape[0]} rows of hidden states.")
    chunks = loss_chunks(*weight.shape) if chunks is None else chunks
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}.")
    compute_dtype = compute_dtype or weight.dtype
    grad_hidden = torch.is_grad_enabled() and hidden.requires_grad
    grad_weight = torch.is_grad_enabled() and weight.requires_grad
    if not (grad_hidden or grad_weight):
        return _chunked(hidden, weight, labels, label_smoothing, chunks, compute_dtype, False, False)[0]
    return _LinearCrossEntropy.apply(hidden, weight, labels, float(label_smoothing), chunks, compute_dtype,
                                     grad_hidden, grad_weight)


def autocast_dtype(accelerator) -> torch.dtype | None:
    """The precision Accelerate's autocast runs the model's matrix products in (None: no autocast)."""
    if not getattr(accelerator, "native_amp", False):
        return None
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(accelerator.mixed_precision)


class ChunkedLossUpdates(nn.Module):
    """What the updates call under --chunked_loss: `(input_ids=, attention_mask=, labels=)` and its `.loss`, that of
    `model` (a VaswaniForConditionalGeneration in one process, as Accelerate prepared it) from its decoder's last
    hidden state and `lm_head` by `linear_cross_entropy`, without calling `lm_head` on the batch. The encoder and
    decoder run under the autocast Accelerate gives the model's forward (`autocast` a dtype, or None)."""

    def __init__(self, model: nn.Module, autocast: torch.dtype | None = None, chunks: int | None = None):
        super().__init__()
        self.model = model
        self.autocast = autocast
        self.chunks = chunks or loss_chunks(model.config.vocab_size, model.config.d_model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, **unused):
        if unused:
            raise ValueError(f"--chunked_loss computes the loss from input_ids, attention_mask and labels; the batch "
                             f"also has {sorted(unused)}.")
        model = self.model
        device_type = input_ids.device.type
        with torch.autocast(device_type, dtype=self.autocast or torch.float32, enabled=self.autocast is not None):
            outputs = model.model(input_ids, attention_mask=attention_mask,
                                  decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels),
                                  use_cache=False)
        weight = model.lm_head.weight
        loss = linear_cross_entropy(outputs.last_hidden_state, weight, labels, model.config.label_smoothing,
                                    self.chunks, self.autocast or weight.dtype)
        return Seq2SeqLMOutput(loss=loss)


def refusal(accelerator) -> str | None:
    """Why --chunked_loss cannot be used here, or None."""
    if accelerator.num_processes > 1 or accelerator.distributed_type != DistributedType.NO:
        return (f"--chunked_loss computes the loss outside the model's forward, which DDP, FSDP and DeepSpeed must "
                f"see: it trains in one process (here: {accelerator.num_processes}, "
                f"{accelerator.distributed_type.value}). Leave it out to train on several.")
    return None


__all__ = ["ChunkedLossUpdates", "autocast_dtype", "linear_cross_entropy", "loss_chunks", "refusal"]
