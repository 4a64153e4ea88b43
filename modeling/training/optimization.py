"""The optimizer and learning-rate schedule of the paper (section 5.3):

    Adam, beta1 = 0.9, beta2 = 0.98, eps = 1e-9
    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

The schedule rises linearly for `warmup_steps` updates, then decays with the inverse square root of the update
number. Its peak, at step = warmup_steps, is d_model^-0.5 * warmup_steps^-0.5 (7.0e-4 for the base model); a
`learning_rate` given by the user replaces that peak and keeps the shape.

Not in the paper, and off unless asked for: a cooldown. With `cooldown_steps = C` and `max_steps = T`, the last C
updates scale the schedule down linearly, to zero after update T. A short run ends at a learning rate of zero
instead of wherever the inverse square root happens to be; the updates before T - C are unchanged, so a run can
still be stopped early and resumed with a longer --max_steps as long as it has not reached its cooldown.

On a GPU, Adam runs fused (`fused=True`: one kernel updates every tensor, instead of several per tensor or group of
tensors): the same algorithm with the same hyper-parameters; only the order of floating-point operations differs.
"""

import torch
from accelerate.state import AcceleratorState, is_initialized
from torch.optim.lr_scheduler import LambdaLR


def paper_peak_learning_rate(d_model: int, warmup_steps: int) -> float:
    return d_model**-0.5 * warmup_steps**-0.5


def _inverse_square_root_factor(step: int, warmup_steps: int) -> float:
    """The schedule divided by its peak, for update number `step` (counted from 1): step / warmup while warming
    up, then sqrt(warmup / step)."""
    return min(step / warmup_steps, (warmup_steps / step) ** 0.5)


def _cooldown_factor(step: int, max_steps: int, cooldown_steps: int) -> float:
    """1 until the last `cooldown_steps` updates, then linearly down: (max_steps - step + 1) / (cooldown_steps + 1),
    so the last update (step == max_steps) still moves the weights and the next one would have a rate of zero."""
    if cooldown_steps <= 0:
        return 1.0
    remaining = max_steps - step + 1
    return max(0.0, min(1.0, remaining / (cooldown_steps + 1)))


def trains_on_cuda(parameters: list[torch.nn.Parameter]) -> bool:
    """Whether the weights train on CUDA: the device an Accelerator set up (it moves them there when it prepares
    the model, after the optimizer is built), else the device they are on."""
    if is_initialized():
        return AcceleratorState().device.type == "cuda"
    return bool(parameters) and all(parameter.device.type == "cuda" for parameter in parameters)


def build_optimizer_and_schedule(
    model: torch.nn.Module,
    peak_learning_rate: float,
    warmup_steps: int,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    max_steps: int | None = None,
    cooldown_steps: int = 0,
    fused: bool | None = None,
) -> tuple[torch.optim.Optimizer, LambdaLR]:
    """Adam (AdamW with weight decay) and the schedule. `fused`: Adam's fused implementation; unset, where the
    weights train on CUDA (`trains_on_cuda`)."""
    parameters = list(model.parameters())
    optimizer_class = torch.optim.AdamW if weight_decay else torch.optim.Adam
    fused = trains_on_cuda(parameters) if fused is None else fused
    optimizer = optimizer_class(
        parameters, lr=peak_learning_rate, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None
    )
    # LambdaLR counts the updates already made (0 before the first), so update number k is count + 1
    if cooldown_steps and max_steps is None:
        raise ValueError("A cooldown needs max_steps: it ends the schedule at update max_steps.")

    def factor(count: int) -> float:
        step = count + 1
        return _inverse_square_root_factor(step, warmup_steps) * _cooldown_factor(step, max_steps, cooldown_steps)

    schedule = LambdaLR(optimizer, factor)
    return optimizer, schedule


__all__ = [
    "build_optimizer_and_schedule",
    "paper_peak_learning_rate",
    "trains_on_cuda",
]
