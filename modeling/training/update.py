"""One optimizer update of a training run (`run_update`) and the checks on it: each process takes `accumulation`
micro-batches of its own share of the data, the loss of each is weighted by its number of target tokens (so that the
update's gradient is the mean over every target token of all processes, as with one big batch), gradients are
clipped, and Adam steps with the inverse-square-root schedule. A loss, a gradient or new weights that are not finite
stop the run there (`diverged`), before anything of that update is saved; `all_finite` checks weights and optimizer
states before a checkpoint is written."""

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from ..runs.errors import TrainingDiverged
from ..runs.preemption import StopSignals
from .arguments import TrainArguments
from .checkpoints import latest_checkpoint, list_checkpoints
from .run_files import is_own_checkpoint
from .cuda_graphs import UpdateGraphs
from .finite import non_finite_flag
from .state import TrainingProgress


def run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress,
               stop: StopSignals | None = None,
               token_counts: list[tuple[int, int]] | None = None) -> tuple[float, int, float | None]:
    """One optimizer update from this process's micro-batches. Returns the update's mean loss per target token (all
    processes), the source + target tokens it trained on (all processes) and the gradient norm before clipping.

    The host never waits for the device inside the update: the micro-batches go to the device without blocking
    (from pinned memory where the DataLoader pinned them), the token counts that weigh each micro-batch's loss come
    from the host (`token_counts`, each micro-batch's (source, target) tokens before padding; without them, counted
    on the host tensors given), and the loss is summed on the device. Once per update, after the step, one read of
    the device brings back the loss, the gradient norm and whether the new weights are finite together (with
    `stop`, each process's stop-signal flag too: `stop.agreed` then says whether any process received one). A loss
    or gradient that is not finite stops the run there, before anything of this update is saved.

    Under --cuda_graphs --torch_compile (`model` an `UpdateGraphs`), every update after the process's first is
    replayed from CUDA graphs: the micro-batches copied into their shape's buffers, the step, the gradient norm and
    the weights' check in the graphs (vaswani.training.cuda_graphs)."""
    if token_counts is None:
        token_counts = [_host_token_counts(batch) for batch in micro_batches]
    device, processes = accelerator.device, accelerator.num_processes
    local_tokens = [sum(counts) for counts in zip(*token_counts)]  # source, target
    # every process's counts, summed on the device (the weights below divide by them there; read after the step)
    all_tokens = (accelerator.reduce(_device_values(local_tokens, device), reduction="sum") if processes > 1
                  else local_tokens)
    if isinstance(model, UpdateGraphs) and model.graphing:
        # the whole update from CUDA graphs (one process): its loss sum, gradient norm and weights' check with it
        loss_sum, norm, broken = model.update(micro_batches, all_tokens[1], optimizer, schedule, args.max_grad_norm)
        accelerator.step += len(micro_batches)  # Accelerate's count of micro-batches, as `accumulate` keeps it
    else:
        loss_sum, norm = _micro_batch_updates(accelerator, model, optimizer, schedule, micro_batches, args,
                                              token_counts, all_tokens)
        broken = None
        if isinstance(model, UpdateGraphs):
            model.graphing = True  # after one update without graphs
    check = _update_check(accelerator, loss_sum, all_tokens, norm, model.parameters(), stop, broken)
    if not math.isfinite(check.loss):
        raise diverged(f"the loss is {check.loss}", progress, args, accelerator)
    # fp16 overflows are the gradient scaler's business: it skipped that step and lowered its scale
    if check.grad_norm is not None and not math.isfinite(check.grad_norm) and accelerator.mixed_precision != "fp16":
        raise diverged(f"the gradient norm is {check.grad_norm}", progress, args, accelerator)
    if not check.weights_finite:
        raise diverged("the update made weights inf or nan", progress, args, accelerator, applied=True)
    return check.loss, check.tokens, check.grad_norm


def _micro_batch_updates(accelerator, model, optimizer, schedule, micro_batches, args, token_counts, all_tokens):
    """The update's micro-batches through `model`, forward and backward, then the optimizer's step: the sum of their
    losses each times its target tokens, and the gradient norm before clipping (None without clipping)."""
    device, processes = accelerator.device, accelerator.num_processes
    loss_sum = torch.zeros((), device=device)
    norm = None
    for batch, (_, tokens) in zip(micro_batches, token_counts):
        batch = {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}
        with accelerator.accumulate(model):
            loss = model(**batch).loss  # mean over this micro-batch's target tokens
            # Weighted so that the summed gradients are the mean over all target tokens of the update: DDP averages
            # over processes and `backward` divides by the accumulation steps, which the weight undoes.
            accelerator.backward(loss * (tokens * processes * accelerator.gradient_accumulation_steps / all_tokens[1]))
            loss_sum += loss.detach().float() * tokens
            if accelerator.sync_gradients:
                if args.max_grad_norm > 0:
                    norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
    return loss_sum, norm


def _host_token_counts(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """A micro-batch's (source, target) tokens, counted on its host tensors (before they go to the device): the
    attended source positions and the labels that are not -100."""
    if batch["labels"].device.type != "cpu":
        raise ValueError("run_update counts tokens on the host: give it the micro-batches as collated there, or "
                         "their token_counts.")
    return int(batch["attention_mask"].sum()), int((batch["labels"] != -100).sum())


def _device_values(values, device, dtype=None) -> torch.Tensor:
    """A small tensor of host numbers on `device`, copied without making the host wait (torch.tensor(values,
    device=...) waits for the copy)."""
    host = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


@dataclass
class UpdateCheck:
    """What the host learns of an update at its one synchronization."""

    loss: float  # mean loss per target token, all processes
    tokens: int  # source + target tokens, all processes
    grad_norm: float | None  # before clipping; None without clipping (or under DeepSpeed, which clips itself)
    weights_finite: bool  # on every process


def _update_check(accelerator, loss_sum: torch.Tensor, all_tokens, norm, parameters,
                 stop: StopSignals | None, broken: torch.Tensor | None = None) -> UpdateCheck:
    """Sum the update's loss, its new weights' non-finite flag (`broken`, where the update computed it; else
    checked here) and the stop flags over the processes in one reduction, and read them with the token counts and
    the gradient norm in one transfer to the host."""
    device = accelerator.device
    broken = non_finite_flag(parameters, device) if broken is None else broken
    summed = torch.stack([loss_sum.float(), broken, _stop_flag(stop, device)])
    summed = accelerator.reduce(summed, reduction="sum")
    read = [summed.double() if device.type != "mps" else summed]
    if torch.is_tensor(all_tokens):
        read.append(all_tokens.to(read[0].dtype))
    if torch.is_tensor(norm):
        read.append(_plain_tensor(norm).detach().reshape(1).to(read[0].dtype))
    values = torch.cat(read).tolist()  # the one synchronization of the update
    loss_total, broken, stopping = values[:3]
    source_tokens, target_tokens = values[3:5] if torch.is_tensor(all_tokens) else all_tokens
    grad_norm = values[-1] if torch.is_tensor(norm) else (None if norm is None else float(norm))
    if stop is not None:
        stop.agree(stopping > 0)
    return UpdateCheck(loss=loss_total / target_tokens, tokens=int(source_tokens + target_tokens),
                       grad_norm=grad_norm, weights_finite=broken == 0)


def _plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2's sharded parameters and the norms computed from them) as the whole tensor; others as they
    are."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _stop_flag(stop: StopSignals | None, device) -> torch.Tensor:
    """This process's stop-signal flag as a device scalar, made on the device (a fill, no copy from the host)."""
    return torch.full((), stop.flag() if stop is not None else 0.0, device=device)


def all_finite(accelerator, tensors, stop: StopSignals | None = None) -> bool:
    """Whether every process's `tensors` are finite (its shard, under FSDP): one check, one reduction, one sync.
    With `stop`, the same reduction carries each process's stop-signal flag, and `stop.agreed` says whether any
    process had received one."""
    device = accelerator.device
    totals = accelerator.reduce(torch.stack([non_finite_flag(tensors, device), _stop_flag(stop, device)]),
                                reduction="sum")
    broken_total, stop_total = totals.tolist()
    if stop is not None:
        stop.agree(stop_total > 0)
    return broken_total == 0


def diverged(what: str, progress: TrainingProgress, args: TrainArguments, accelerator,
             applied: bool = False, update: int | None = None) -> TrainingDiverged:
    """The error for a run that stopped being finite at update `progress.step + 1`. When the loss or the gradient of
    that update is not finite, a checkpoint of the update just before holds the weights that gave it: it is set
    aside (renamed, so that --resume does not pick it) rather than called good. When the update itself made the
    weights non-finite (`applied`), the weights before it gave a finite loss and gradient: their checkpoint is good."""
    update = update or progress.step + 1
    root = Path(args.output_dir) / "checkpoints"
    checkpoints = dict(list_checkpoints(root))
    suspect = None if applied else checkpoints.get(progress.step)
    set_aside = ""
    if suspect is not None:
        quarantine = suspect.with_name(f"diverged-{suspect.name}")
        while os.path.lexists(quarantine) and not is_own_checkpoint(quarantine):  # not the run's: kept, a name apart
            quarantine = quarantine.with_name(f"{quarantine.name}-again")
        if accelerator.is_main_process:
            if os.path.lexists(quarantine):
                shutil.rmtree(quarantine)  # an earlier divergence's, at the same update
            suspect.rename(quarantine)
        accelerator.wait_for_everyone()
        set_aside = (f" The checkpoint of update {progress.step} holds the weights that gave it, so it was set "
                     f"aside as {quarantine}.")
    latest = latest_checkpoint(root)
    stopped = "Stopped before saving the broken weights" if applied else "Stopped before saving anything of it"
    return TrainingDiverged(
        f"Training diverged at update {update}: {what}. {stopped}; no checkpoint holds non-finite weights.{set_aside} "
        f"The last good checkpoint is {latest or '(none saved yet)'}. Try a lower --learning_rate, more "
        "--warmup_steps, --max_grad_norm 1.0, or bf16 instead of fp16, and continue with --resume (these options "
        "may change on resume)."
    )


__all__ = ["all_finite", "diverged", "run_update"]
