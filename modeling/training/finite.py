"""Whether tensors hold inf or nan, checked on the accelerator without a kernel per tensor: what an update checks of
its new weights (vaswani.training.update) and what the graph of a CUDA-graphed update computes
(vaswani.training.cuda_graphs), one module below both."""

import math

import torch
from torch.distributed.tensor import DTensor


def non_finite_flag(tensors, device) -> torch.Tensor:
    """1.0 on `device` if any of this process's `tensors` (its shard, under FSDP) holds inf or nan, else 0.0,
    without a kernel per tensor: the largest magnitude of each tensor by `torch._foreach_norm` (a few fused
    kernels on a GPU for all of them; inf or nan whenever the tensor holds one, and unlike a sum of squares never
    overflowing for finite values), checked at once. A DTensor (FSDP2's parameters and their optimizer state) is
    checked through its local shard, and tensors kept off the accelerator (Adam's `step` count stays on the CPU) are
    checked where they are, their flag then moved to `device`."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for tensor in tensors:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        if local.is_floating_point() and local.numel():
            groups.setdefault((local.device, local.dtype), []).append(local.detach())
    flag = torch.zeros((), device=device)
    for group in groups.values():
        largest = torch.stack(torch._foreach_norm(group, math.inf))
        flag = torch.maximum(flag, (~torch.isfinite(largest).all()).float().to(device))
    return flag


__all__ = ["non_finite_flag"]
