"""Validation while training: the loss on the whole validation set, and the task's scores of beam-search outputs
(`sacrebleu` and `tokenized_bleu` for translation, `rouge1`/`rouge2`/`rougeL`/`rougeLsum` for summarization, computed
by vaswani.evaluation.metrics.compute_scores as every other caller computes them).

Each process works on its own share of the validation set. For the scores, every process gets as many sentences
and batches as the others; the generated token ids are padded to a common length across processes before they are
gathered (tensors of different shapes cannot be gathered: a process would wait forever), and the main process
decodes and scores them. The scores are then sent to every process, so that all take the same decisions (best model,
early stopping).
"""

import torch
from accelerate.utils import DistributedType, broadcast_object_list
from torch.nn import functional as F

from ..evaluation.diagnostics import input_independence_warning, output_diversity
from ..evaluation.metrics import compute_scores, score_values
from .batching import collate, evaluation_batches, generation_shards


def _to_device(batch: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in batch.items()}


@torch.no_grad()
def _validation_loss(accelerator, model, validation, max_tokens: int, pad_token_id: int, label_smoothing: float):
    """Token-level mean loss with label smoothing (comparable to the training loss), and the plain negative log-
    likelihood with its perplexity, over all validation pairs."""
    model.eval()
    pairs = validation.select_columns(["input_ids", "labels"])
    batches = evaluation_batches(
        validation["source_length"], validation["target_length"], max_tokens,
        accelerator.num_processes, accelerator.process_index,
    )
    totals = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # smoothed loss, nll, tokens
    for indices, counted in batches:
        batch = _to_device(collate(pairs[indices], pad_token_id), accelerator.device)
        with accelerator.autocast():
            logits = model(**batch).logits
        if not counted:
            continue
        logits, labels = logits.float().flatten(0, 1), batch["labels"].flatten()
        totals[0] += F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=label_smoothing, reduction="sum")
        totals[1] += F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        totals[2] += (labels != -100).sum()
    totals = accelerator.reduce(totals, reduction="sum")
    tokens = totals[2].clamp(min=1)
    nll = (totals[1] / tokens).item()
    return {"val_loss": (totals[0] / tokens).item(), "val_nll": nll, "val_ppl": float(torch.tensor(nll).exp())}


@torch.no_grad()
def generate_predictions(accelerator, model, tokenizer, validation, batch_size: int, **generate_kwargs) -> list[str]:
    """Beam-search outputs for the validation sources, decoded, in dataset order (on the main process; the other
    processes get an empty list)."""
    model.eval()
    sources = validation.select_columns(["input_ids"])
    outputs: dict[int, list[int]] = {}
    for indices in generation_shards(
        validation["source_length"], batch_size, accelerator.num_processes, accelerator.process_index
    ):
        batch = _to_device(collate(sources[indices], tokenizer.pad_token_id), accelerator.device)
        with accelerator.autocast():
            generated = model.generate(**batch, **generate_kwargs)
        generated = accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)
        generated = accelerator.gather(generated)
        positions = accelerator.gather(torch.tensor(indices, device=accelerator.device))
        for position, ids in zip(positions.tolist(), generated.tolist()):
            outputs[position] = ids  # a repeated pair (padding the shares) is written twice, identically
    if not accelerator.is_main_process:
        return []
    ordered = [outputs[position] for position in range(len(validation))]
    return tokenizer.batch_decode(ordered, skip_special_tokens=True)


def _score(task: str, predictions: list[str], references: list[str], target_lang: str) -> dict:
    """The task's scores by name, unrounded, with the signature of each that has one (`sacrebleu_signature`, ...)."""
    scores = compute_scores(task, predictions, references, target_lang=target_lang)
    signatures = {f"{score.type}_signature": score.signature for score in scores if score.signature is not None}
    return {**score_values(scores), **signatures}


def evaluate(
    accelerator,
    model,
    tokenizer,
    validation,
    task: str,
    max_tokens: int,
    label_smoothing: float,
    max_eval_samples: int | None,
    batch_size: int,
    **generate_kwargs,
) -> dict:
    """Everything the run logs at an evaluation, identical on every process, with a few (source, output, reference)
    samples. The loss covers the whole validation set; the score, its first `max_eval_samples` pairs (all if None), and
    so does the count of distinct outputs for distinct sources (`distinct_outputs`, `distinct_inputs`), with a
    `warning` when the outputs do not depend on the sources."""
    unwrapped = accelerator.unwrap_model(model)
    results = _validation_loss(accelerator, model, validation, max_tokens, tokenizer.pad_token_id, label_smoothing)
    scored = validation
    if max_eval_samples is not None:
        scored = validation.select(range(min(max_eval_samples, len(validation))))
    # a sharded model needs every process in every decoding step, also after its own sentences are finished
    sharded = accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)
    predictions = generate_predictions(
        accelerator, unwrapped, tokenizer, scored, batch_size, synced_gpus=sharded, **generate_kwargs
    )
    scores = [None]
    if accelerator.is_main_process:
        examples = zip(scored["source_text"][:3], predictions[:3], scored["target_text"][:3])
        diversity = output_diversity(scored["source_text"], predictions)
        scores = [{
            **_score(task, predictions, scored["target_text"], getattr(unwrapped.config, "target_lang", None) or "en"),
            "distinct_outputs": diversity["distinct_outputs"],
            "distinct_inputs": diversity["distinct_inputs"],
            "samples": list(examples),
        }]
        warning = input_independence_warning(diversity)
        if warning:
            scores[0]["warning"] = warning
    broadcast_object_list(scores)
    return {**results, **scores[0]}


__all__ = [
    "evaluate",
    "generate_predictions",
]
