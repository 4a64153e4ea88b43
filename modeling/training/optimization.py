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
"""

import torch
from torch.optim.lr_scheduler import LambdaLR


def paper_peak_learning_rate(d_model: int, warmup_steps: int) -> float:
    return d_model**-0.5 * warmup_steps**-0.5


def inverse_square_root_factor(step: int, warmup_steps: int) -> float:
    """The schedule divided by its peak, for update number `step` (counted from 1): step / warmup while warming
    up, then sqrt(warmup / step)."""
    return min(step / warmup_steps, (warmup_steps / step) ** 0.5)


def cooldown_factor(step: int, max_steps: int, cooldown_steps: int) -> float:
    """1 until the last `cooldown_steps` updates, then linearly down: (max_steps - step + 1) / (cooldown_steps + 1),
    so the last update (step == max_steps) still moves the weights and the next one would have a rate of zero."""
    if cooldown_steps <= 0:
        return 1.0
    remaining = max_steps - step + 1
    return max(0.0, min(1.0, remaining / (cooldown_steps + 1)))


def build_optimizer_and_schedule(
    model: torch.nn.Module,
    peak_learning_rate: float,
    warmup_steps: int,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    max_steps: int | None = None,
    cooldown_steps: int = 0,
) -> tuple[torch.optim.Optimizer, LambdaLR]:
    optimizer_class = torch.optim.AdamW if weight_decay else torch.optim.Adam
    optimizer = optimizer_class(
        model.parameters(), lr=peak_learning_rate, betas=betas, eps=eps, weight_decay=weight_decay
    )
    # LambdaLR counts the updates already made (0 before the first), so update number k is count + 1
    if cooldown_steps and max_steps is None:
        raise ValueError("A cooldown needs max_steps: it ends the schedule at update max_steps.")

    def factor(count: int) -> float:
        step = count + 1
        return inverse_square_root_factor(step, warmup_steps) * cooldown_factor(step, max_steps, cooldown_steps)

    schedule = LambdaLR(optimizer, factor)
    return optimizer, schedule
