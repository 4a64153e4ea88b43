"""--cuda_graphs: each update replayed from CUDA graphs, captured once per batch shape.

On a GPU, the update of a small model waits on the host, which launches its kernels one by one: the Multi30k GPU
recipe's model (d_model 128) launches about 1,000 kernels an update and kept an H200 busy a fifth of the time
(results/benchmark/README.md, "Current tables"); the base model compiled launches about 1,500 and kept an H100 busy
41% of a profiled update. A CUDA graph replays a captured sequence of kernels with one launch. The batches come in a few
shapes (`BatchShapes`, as for --torch_compile), so each shape is captured the first time it is seen (a few warm-up
passes and one capture) and replayed after. Dropout draws new numbers at every replay (PyTorch's CUDA generator is
graph-safe). Evaluation and generation use the model itself, eagerly.

Two ways, by whether the model is compiled:

- `--cuda_graphs` alone (`GraphedUpdates`): `torch.cuda.make_graphed_callables` captures the eager model's forward
  and backward for each shape; the optimizer's step, the gradient clipping and the update's checks stay outside the
  graphs (the fused AdamW of a GPU run is a few kernels). fp32 only (autocast's weight cache cannot live across
  captures) and one micro-batch an update (the graph's backward hands back its own buffers as the gradients, which
  the next replay would overwrite). The GPU suite timed it at 2.3x the tokens/s of the same update eager on the
  recipe's model (on an H100; results/benchmark/README.md, "Current tables").
- `--cuda_graphs --torch_compile` (`UpdateGraphs`): the compiled update, the optimizer's step included. One graph
  per micro-batch shape holds the compiled forward and backward, the loss weighted by the micro-batch's target tokens
  over the update's (counted in the graph, over a scalar the host sets once an update) and added into the gradients,
  which stay allocated from update to update, and the loss added to a sum on the device; one graph for the end of
  every update holds the gradient norm and clipping, fused Adam's step (its learning rate read from a tensor the
  host fills from the schedule), the new weights' non-finite flag, and the zeroing of the gradients and of the sum
  for the next update. Per micro-batch, the host copies its three tensors into the shape's buffers and replays one
  graph; per update, it fills two scalars, replays the end graph, steps the schedule and reads the device once, as
  every update does. bf16 autocast is traced into the compiled graphs (no weight cache), and several micro-batches
  add into the same gradients. The first update of a process runs without graphs (it compiles the model, creates
  the optimizer's state and loads every kernel); the end graph is warmed up at a learning rate of 0 and the
  optimizer's state put back as it was.

Refused, with the reason (`refusal`): a machine without a CUDA GPU, several processes (DDP reduces gradients from
hooks during the backward, which a graph would replay without communicating), FSDP and DeepSpeed, fp16 (its gradient
scaler decides on the host whether to step), and without --torch_compile, mixed precision and updates of several
micro-batches.
"""

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace

import torch
from accelerate.utils import DistributedType
from torch import nn

from .finite import non_finite_flag


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


class _ShapeGraph:
    """One micro-batch shape's buffers, which each micro-batch of that shape is copied into, and its graph."""

    def __init__(self, batch: dict, device: torch.device):
        self.inputs = {name: torch.zeros(batch[name].shape, dtype=batch[name].dtype, device=device)
                       for name in ("input_ids", "attention_mask", "labels")}
        self.replay = None

    def load(self, batch: dict) -> None:
        for name, buffer in self.inputs.items():
            buffer.copy_(batch[name], non_blocking=True)


class UpdateGraphs(nn.Module):
    """What the updates call under --cuda_graphs --torch_compile: `model` (compiled) as it is for the first update of
    the process (`graphing` False: called like the model, `(input_ids=, attention_mask=, labels=)` and its `.loss`),
    then whole updates from CUDA graphs by `update` (see the module's docstring). `capture(work)` returns the replay
    of a graph of `work()`, a function of no arguments that reads and writes tensors that stay allocated; by default
    `torch.cuda.graph` in the memory pool all the graphs share (each frees what it allocates before it ends, so that
    none keeps memory another needs)."""

    def __init__(self, model: nn.Module, capture: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
                 warmups: int = 3):
        super().__init__()
        self.model = model
        self.capture = capture or self._capture_on_cuda
        self.warmups = warmups
        self.graphing = False  # set once an update has run without graphs
        self.shapes: dict[tuple, _ShapeGraph] = {}  # (source shape, target shape) -> its buffers and graph
        self.finish = None  # the replay of the end of an update
        self.pool = self.stream = None
        self.scalars = None  # the tensors the host fills, and the graphs' results (`_start`)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, **unused):
        if unused:
            raise ValueError(f"--cuda_graphs replays input_ids, attention_mask and labels; the batch also has "
                             f"{sorted(unused)}.")
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def update(self, micro_batches: list[dict], target_tokens: int, optimizer, schedule,
               max_grad_norm: float) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """One update from graphs: the micro-batches (host tensors), the update's target tokens (all of them), the
        optimizer and schedule (Accelerate's wrappers or torch's), the clipping norm (0: none). Returns, on the
        device, the sum of the micro-batches' losses each times its target tokens, the gradient norm before clipping
        (None without clipping) and 1.0 if a new weight is inf or nan, else 0.0: views of a buffer the next update's
        graphs overwrite, to read before it."""
        optimizer = getattr(optimizer, "optimizer", optimizer)  # torch's, under Accelerate's wrapper
        if self.scalars is None:
            self._start(optimizer, max_grad_norm)
        new = {}
        for batch in micro_batches:
            key = (tuple(batch["input_ids"].shape), tuple(batch["labels"].shape))
            if key not in self.shapes and key not in new:
                new[key] = batch
        # captured before any replay of this update: their warm-up passes add into the gradients, zeroed after
        for key, batch in new.items():
            self.shapes[key] = self._capture_shape(batch)
        if self.finish is None:
            self.finish = self._capture_finish(optimizer)
        scalars = self.scalars
        scalars["target_tokens"].fill_(target_tokens)
        for rate, group in zip(scalars["learning_rates"], optimizer.param_groups):
            rate.fill_(group["lr"])
        for batch in micro_batches:
            graph = self.shapes[(tuple(batch["input_ids"].shape), tuple(batch["labels"].shape))]
            graph.load(batch)
            graph.replay()
        self.finish()
        schedule.step()
        result = scalars["result"]
        return result[0], (result[2] if self.max_grad_norm > 0 else None), result[1]

    # --- set-up and captures ---------------------------------------------------------------------------------------

    def _start(self, optimizer, max_grad_norm: float) -> None:
        if not all(group.get("fused") for group in optimizer.param_groups):
            raise ValueError("--cuda_graphs with --torch_compile steps Adam's fused implementation in its graph; "
                             "this optimizer is not fused.")
        self.device = next(self.model.parameters()).device
        self.max_grad_norm = max_grad_norm
        self.trained = [parameter for parameter in self.model.parameters() if parameter.requires_grad]

        def scalar():
            return torch.zeros((), dtype=torch.float32, device=self.device)

        self.scalars = {"target_tokens": scalar(), "loss_sum": scalar(),
                        "learning_rates": [scalar() for _ in optimizer.param_groups],
                        "result": torch.zeros(3, dtype=torch.float32, device=self.device)}

    def _capture_shape(self, batch: dict) -> _ShapeGraph:
        """The graph of one micro-batch of `batch`'s shape: warmed up on it (forward and backward; their gradients
        and loss zeroed after), then captured."""
        graph = _ShapeGraph(batch, self.device)
        graph.load(batch)
        scalars = self.scalars
        scalars["target_tokens"].fill_(1.0)
        inputs = graph.inputs

        def accumulate():
            loss = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                              labels=inputs["labels"]).loss
            tokens = (inputs["labels"] != -100).sum().float()
            (loss * (tokens / scalars["target_tokens"])).backward()
            scalars["loss_sum"].add_(loss.detach().float() * tokens)

        with self._warming_up():
            for _ in range(self.warmups):
                accumulate()
        self._zero_gradients()
        graph.replay = self.capture(accumulate)
        return graph

    def _zero_gradients(self) -> None:
        """Zero the gradients and the loss sum in place (the graphs hold the addresses); a weight that the
        warm-up gave no gradient (none in this model) keeps none."""
        self.gradients = [parameter.grad for parameter in self.trained if parameter.grad is not None]
        torch._foreach_zero_(self.gradients)
        self.scalars["loss_sum"].zero_()

    def _capture_finish(self, optimizer) -> Callable[[], None]:
        """The graph of the end of an update, warmed up once at a learning rate of 0 (on zero gradients), the
        optimizer's state then put back as it was: the warm-up changes no weight and no state."""
        scalars, parameters = self.scalars, self.trained
        result = scalars["result"]

        def finish():
            if self.max_grad_norm > 0:
                norm = torch.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm)
            else:
                norm = torch.zeros((), device=self.device)
            with self._learning_rates_on_device(optimizer):
                optimizer.step()
            flag = non_finite_flag(parameters, self.device)
            result.copy_(torch.stack([scalars["loss_sum"], flag, norm.float()]))
            scalars["loss_sum"].zero_()
            torch._foreach_zero_(self.gradients)

        state = [value for values in optimizer.state.values() for value in values.values() if torch.is_tensor(value)]
        kept = [value.clone() for value in state]
        for rate in scalars["learning_rates"]:
            rate.zero_()
        with self._warming_up():
            finish()
        for value, before in zip(state, kept):
            value.copy_(before)
        del kept
        return self.capture(finish)

    @contextmanager
    def _learning_rates_on_device(self, optimizer):
        """Adam reads each group's learning rate from a tensor on the device while the step is captured (a number
        would be captured as it is); the groups hold the schedule's numbers again after."""
        groups = optimizer.param_groups
        before = [(group["lr"], group.get("capturable", False)) for group in groups]
        capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        for group, rate in zip(groups, self.scalars["learning_rates"]):
            group["lr"], group["capturable"] = rate, capturing
        try:
            yield
        finally:
            for group, (rate, capturable) in zip(groups, before):
                group["lr"], group["capturable"] = rate, capturable

    def _warming_up(self):
        """Where warm-up passes run: on a GPU the side stream the captures use, as torch.cuda.make_graphed_callables
        warms up."""
        if self.device.type != "cuda":
            return nullcontext()
        return self._on_side_stream()

    @contextmanager
    def _on_side_stream(self):
        stream = self._side_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            yield
        torch.cuda.current_stream().wait_stream(stream)

    def _side_stream(self):
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
        return self.stream

    def _capture_on_cuda(self, work: Callable[[], None]) -> Callable[[], None]:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the DataLoader's pin-memory thread may allocate pinned memory meanwhile
        with torch.cuda.graph(graph, pool=self.pool, stream=self._side_stream(), capture_error_mode="thread_local"):
            work()
        return graph.replay


def refusal(accelerator, torch_compile: bool, micro_batches: int) -> str | None:
    """Why --cuda_graphs cannot be used here, or None. `micro_batches`: per update and process."""
    if accelerator.device.type != "cuda":
        return f"--cuda_graphs replays CUDA graphs and needs a CUDA GPU; this run is on {accelerator.device}."
    if accelerator.num_processes > 1 or accelerator.distributed_type != DistributedType.NO:
        processes = f"{accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''}"
        return (f"--cuda_graphs runs in one process without a distributed engine (here: {processes}, "
                f"{accelerator.distributed_type.value}): DDP, FSDP and "
                "DeepSpeed communicate from hooks during the backward, which a graph would replay without them.")
    if accelerator.mixed_precision == "fp16":
        return ("--cuda_graphs replays fp32 or bf16 updates: pass --mixed_precision no or bf16 (fp16's gradient "
                "scaler decides on the host whether to step).")
    if torch_compile:
        return None
    if accelerator.mixed_precision != "no":
        return (f"--cuda_graphs captures fp32 updates: pass --mixed_precision no (this run's is "
                f"{accelerator.mixed_precision}; autocast's weight cache cannot live across captures), or add "
                "--torch_compile, whose graphs hold bf16 autocast.")
    if micro_batches > 1:
        # the graph's backward hands back its own gradient buffers, which `.grad` then holds: the next micro-batch's
        # replay would overwrite them before they were summed
        return (f"--cuda_graphs takes one micro-batch an update (--tokens_per_update at most --max_tokens_per_batch "
                f"per process); these options make {micro_batches}. With --torch_compile its graphs add several "
                "into the same gradients.")
    return None


__all__ = ["GraphedUpdates", "UpdateGraphs", "refusal"]
