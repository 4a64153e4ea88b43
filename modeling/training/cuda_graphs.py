"""--cuda_graphs: each update's forward and backward replayed from CUDA graphs, one pair per batch shape.

On a GPU, the update of a small model waits on the host, which launches its kernels one by one: the Multi30k GPU
recipe's model (d_model 128) launches about 1,000 kernels an update and kept an H200 busy a fifth of the time
(results/benchmark/README.md, "One H200"). A CUDA graph replays a captured sequence of kernels with one launch.
`torch.cuda.make_graphed_callables` captures a module's forward and backward for the shapes of its sample inputs;
the batches come in a few shapes (`BatchShapes`, as for --torch_compile), so each shape is captured the first time it
is seen (a few warm-up passes and one capture) and replayed after. The optimizer's step, the gradient clipping and
the update's checks stay outside the graphs (the fused AdamW of a GPU run is a few kernels). Dropout draws new
numbers at every replay (PyTorch's CUDA generator is graph-safe). Evaluation and generation use the model itself,
eagerly.

Refused, with the reason: a machine without a CUDA GPU, several processes (DDP reduces gradients from hooks during
the backward, which a graph would replay without communicating), FSDP and DeepSpeed, mixed precision (autocast's
weight cache cannot live across captures), --torch_compile (one or the other) and updates of several micro-batches
(the graph's backward hands back its own buffers as the gradients, which the next replay would overwrite). The GPU
suite's training part times it on the recipe's model (a row of its own): on an H100 (2026-11-27), 2.3x the tokens/s
of the same update eager (results/benchmark/README.md, "One H100, 2026-11-27").
"""

from types import SimpleNamespace

import torch
from accelerate.utils import DistributedType
from torch import nn


class _Loss(nn.Module):
    """The model as `make_graphed_callables` takes it: tensors in, the loss out, and no hooks of its own."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


class GraphedUpdates(nn.Module):
    """What the updates call under --cuda_graphs: `model(input_ids=, attention_mask=, labels=)`, its `.loss` from the
    graphs captured for those shapes (on first sight, by `capture(module, sample_args)`)."""

    def __init__(self, model: nn.Module, capture=None):
        super().__init__()
        self.model = model
        self.capture = capture or self._capture_on_cuda
        self.graphed = {}  # (source shape, target shape) -> the captured callable
        self.pool = None  # the memory pool every shape's graphs share

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, **unused):
        if unused:
            raise ValueError(f"--cuda_graphs replays input_ids, attention_mask and labels; the batch also has "
                             f"{sorted(unused)}.")
        shapes = (tuple(input_ids.shape), tuple(labels.shape))
        graphed = self.graphed.get(shapes)
        if graphed is None:
            # a module of its own for each shape: make_graphed_callables replaces the forward of the module it takes
            graphed = self.graphed[shapes] = self.capture(_Loss(self.model), (input_ids, attention_mask, labels))
        return SimpleNamespace(loss=graphed(input_ids, attention_mask, labels))

    def _capture_on_cuda(self, module: nn.Module, sample_args: tuple):
        """The graphs of one shape, in the memory pool of all: an update replays one shape's forward, then its
        backward, before any other's, so no two shapes' intermediate tensors are ever needed at once (each keeps
        only its outputs and gradient buffers, which stay allocated); a pool per shape would hold a whole update's
        activations for each shape (the Multi30k GPU recipe's data gives 14 in 80 epochs)."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        # allow_unused_input: a parameter that takes no part in the loss is not an error (none in this model)
        return torch.cuda.make_graphed_callables(module, sample_args, num_warmup_iters=3, allow_unused_input=True,
                                                 pool=self.pool)


def refusal(accelerator, torch_compile: bool, micro_batches: int) -> str | None:
    """Why --cuda_graphs cannot be used here, or None. `micro_batches`: per update and process."""
    if accelerator.device.type != "cuda":
        return f"--cuda_graphs replays CUDA graphs and needs a CUDA GPU; this run is on {accelerator.device}."
    if accelerator.num_processes > 1 or accelerator.distributed_type != DistributedType.NO:
        processes = f"{accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''}"
        return (f"--cuda_graphs runs in one process without a distributed engine (here: {processes}, "
                f"{accelerator.distributed_type.value}): DDP, FSDP and "
                "DeepSpeed communicate from hooks during the backward, which a graph would replay without them.")
    if accelerator.mixed_precision != "no":
        return (f"--cuda_graphs captures fp32 updates: pass --mixed_precision no (this run's is "
                f"{accelerator.mixed_precision}; autocast's weight cache cannot live across captures).")
    if torch_compile:
        return "--cuda_graphs and --torch_compile are two ways to run the update: choose one."
    if micro_batches > 1:
        # the graph's backward hands back its own gradient buffers, which `.grad` then holds: the next micro-batch's
        # replay would overwrite them before they were summed
        return (f"--cuda_graphs takes one micro-batch an update (--tokens_per_update at most --max_tokens_per_batch "
                f"per process); these options make {micro_batches}.")
    return None


__all__ = ["GraphedUpdates", "refusal"]
