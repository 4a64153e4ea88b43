"""--cuda_graphs (vaswani.training.cuda_graphs), checked on a CPU: what it refuses, and that a run captures one
callable per batch shape and replays it, giving the losses of the same run without it. The capture itself
(`torch.cuda.make_graphed_callables`, `torch.cuda.graph`) needs a GPU: here stand-ins, the module as it is, and for
the whole update of --cuda_graphs --torch_compile, `RecordedGraph`, which runs the captured work at every replay and
holds each replay to what a CUDA graph replays: the same operators, the same numbers passed from the host, the same
memory for every tensor that outlives the work, and no read of the device by the host."""

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from safetensors.torch import load_file
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import PAIRS, tiny_config
from training_helpers import metrics_records, reset_accelerate, run_in_process, tiny_argv
from vaswani import VaswaniForConditionalGeneration
from vaswani.training import cuda_graphs, engine
from vaswani.training.arguments import parse_arguments
from vaswani.training.batching import collate, token_counts
from vaswani.runs.errors import TrainingError
from vaswani.training.engine import compiled_for_updates
from vaswani.training.state import TrainingProgress
from vaswani.training.update import run_update
from vaswani.training.optimization import build_optimizer_and_schedule


pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def test_a_machine_without_a_cuda_gpu_is_refused_before_the_folder_is_touched(tmp_path):
    with pytest.raises(TrainingError, match=r"--cuda_graphs replays CUDA graphs and needs a CUDA GPU; this run is on "
                                            r"cpu"):
        run_in_process(tiny_argv(tmp_path / "run", cuda_graphs=True))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("processes, engine, precision, compiled, micro_batches, expected", [
    (2, DistributedType.MULTI_GPU, "no", False, 1, "one process without a distributed engine (here: 2 processes, "
                                                   "MULTI_GPU)"),
    (1, DistributedType.FSDP, "no", False, 1, "(here: 1 process, FSDP)"),
    (1, DistributedType.NO, "bf16", False, 1, "pass --mixed_precision no (this run's is bf16"),
    (1, DistributedType.NO, "fp16", True, 1, "replays fp32 or bf16 updates: pass --mixed_precision no or bf16"),
    (1, DistributedType.NO, "no", False, 2, "takes one micro-batch an update (--tokens_per_update at most "
                                            "--max_tokens_per_batch per process); these options make 2"),
    (1, DistributedType.NO, "no", False, 1, None),
    # compiled, the whole update is graphed: bf16 autocast is traced into the graphs, micro-batches add in place
    (1, DistributedType.NO, "bf16", True, 4, None),
    (1, DistributedType.NO, "no", True, 1, None),
    (2, DistributedType.MULTI_GPU, "no", True, 1, "one process without a distributed engine"),
])
def test_what_a_graph_cannot_replay_is_refused_with_its_reason(processes, engine, precision, compiled, micro_batches,
                                                               expected):
    accelerator = SimpleNamespace(device=torch.device("cuda"), num_processes=processes, distributed_type=engine,
                                  mixed_precision=precision)
    problem = cuda_graphs.refusal(accelerator, compiled, micro_batches)
    assert problem == expected if expected is None else expected in problem


def test_each_batch_shape_is_captured_once_and_replayed_giving_the_losses_without_graphs(tmp_path, monkeypatch):
    captured, replays, modules = [], [], []

    def capture(module, sample_args):  # the stand-in for make_graphed_callables: the module as it is
        shapes = tuple(tuple(argument.shape) for argument in sample_args)
        modules.append(module)
        captured.append(shapes)

        def replay(*arguments):
            assert tuple(tuple(argument.shape) for argument in arguments) == shapes
            replays.append(shapes)
            return module(*arguments)

        return replay

    # one micro-batch an update, as --cuda_graphs takes
    options = dict(dropout=0.0, max_steps=6, eval_steps=6, save_steps=6, tokens_per_update=256, cuda_graphs=True)
    monkeypatch.setattr(engine, "cuda_graphs_refusal", lambda accelerator, torch_compile, micro_batches: None)
    monkeypatch.setattr(cuda_graphs.GraphedUpdates, "_capture_on_cuda", lambda self, module, sample_args:
                        capture(module, sample_args))
    outcome = run_in_process(tiny_argv(tmp_path / "graphs", **options))
    assert outcome.summary["steps"] == 6
    assert len(captured) == len(set(captured)) >= 2, captured  # once per shape, and the run saw several
    assert len({id(module) for module in modules}) == len(modules)  # each capture takes a module of its own
    # in the few shapes --torch_compile pads to: every length a multiple of 8
    assert all(source[1] % 8 == 0 and target[1] % 8 == 0 for source, _, target in captured), captured
    assert len(replays) > len(captured)  # shapes seen again were replayed, not captured again
    # the same run with the updates calling the model itself: the same padded batches, the same losses
    monkeypatch.setattr(engine, "GraphedUpdates", lambda model: model)
    run_in_process(tiny_argv(tmp_path / "eager", **options))
    graphed, eager = ([r["loss"] for r in metrics_records(tmp_path / name) if "loss" in r]
                      for name in ("graphs", "eager"))
    assert len(graphed) >= 2 and graphed == pytest.approx(eager, rel=1e-5)


def test_a_batch_with_more_than_the_replayed_tensors_is_refused():
    updates = cuda_graphs.GraphedUpdates(torch.nn.Linear(2, 2), capture=lambda module, sample_args: None)
    ids = torch.ones(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"replays input_ids, attention_mask and labels; the batch also has "
                                         r"\['decoder_input_ids'\]"):
        updates(input_ids=ids, attention_mask=ids, labels=ids, decoder_input_ids=ids)


# --- --cuda_graphs --torch_compile: the whole update from graphs --------------------------------------------------------

HOST_READS = {"aten::_local_scalar_dense", "aten::equal", "aten::is_nonzero", "aten::item", "aten::nonzero"}


class RecordedOperators(TorchDispatchMode):
    """The operators a piece of work calls, as a CUDA graph would hold them: each operator's name with every argument
    that is not a tensor (a number the host passes is captured as it was) and, for each tensor, the memory it lives
    in when it was there before the work (a graph replays on the same addresses), or "made" for memory the work
    itself allocated (a number from Python made a tensor, as `tensor[:, 0] = 2` does, by its value). A read of the
    device by the host is an error: a graph cannot hold one."""

    @classmethod
    def ignore_compile_internals(cls):
        return True  # so that a compiled model runs under it (its operators recorded) rather than refusing it

    def __init__(self):
        super().__init__()
        self.calls = []
        self.made = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name.startswith("profiler::"):  # torch.profiler's marks around Adam's step: no work on the device
            return func(*args, **kwargs)
        if name in HOST_READS:
            raise AssertionError(f"{name} inside a graph's work: a CUDA graph cannot hand a value to the host")
        arguments = []
        for leaf in pytree.tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.Tensor) and name == "aten::lift_fresh":
                arguments.append(repr(leaf.tolist()))  # a number from Python made a tensor: captured as its value
            elif isinstance(leaf, torch.Tensor):
                address = leaf.untyped_storage().data_ptr()
                arguments.append("made" if address in self.made or address == 0 else address)
            else:
                arguments.append(repr(leaf))
        result = func(*args, **kwargs)
        for leaf in pytree.tree_leaves(result):
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage().data_ptr() not in arguments:
                self.made.add(leaf.untyped_storage().data_ptr())
        self.calls.append((name, tuple(arguments)))
        return result


class RecordedGraph:
    """The stand-in for `torch.cuda.graph`: capturing returns a replay that runs the work, and every replay after the
    first must call what the first called (`RecordedOperators`), as a CUDA graph replays what it captured."""

    captures: list[str] = []  # the name of each captured work, in order
    replaying = False  # true while a replay runs: what the host does outside the graphs is what runs otherwise

    def __init__(self, work):
        self.work, self.calls, self.replays = work, None, 0
        RecordedGraph.captures.append(work.__name__)

    def __call__(self):
        RecordedGraph.replaying = True
        try:
            with RecordedOperators() as record:
                self.work()
        finally:
            RecordedGraph.replaying = False
        if self.calls is None:
            self.calls = record.calls
        elif record.calls != self.calls:
            at = next((i for i, (a, b) in enumerate(zip(self.calls, record.calls)) if a != b),
                      min(len(self.calls), len(record.calls)))
            captured, replayed = (calls[at] if at < len(calls) else ("(none)", ()) for calls in (self.calls,
                                                                                                  record.calls))
            changed = [(a, b) for a, b in zip(captured[1], replayed[1]) if a != b][:3]
            raise AssertionError(f"replay {self.replays} of {self.work.__name__} differs from its capture at operator "
                                 f"{at}: {captured[0]} -> {replayed[0]}, arguments {changed}")
        self.replays += 1


@pytest.fixture
def recorded_graphs(monkeypatch):
    """--cuda_graphs --torch_compile on a CPU: no refusal, captures by `RecordedGraph`, the `eager` compiler backend
    for speed (dynamo traces the update with fullgraph; inductor's code generation is the GPU's)."""
    RecordedGraph.captures = []
    monkeypatch.setattr(engine, "cuda_graphs_refusal", lambda accelerator, torch_compile, micro_batches: None)
    monkeypatch.setattr(cuda_graphs.UpdateGraphs, "_capture_on_cuda", lambda self, work: RecordedGraph(work))
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield RecordedGraph.captures
    torch._dynamo.reset()


class NeverGraphing(cuda_graphs.UpdateGraphs):
    """The same model and optimizer, every update without graphs."""

    graphing = property(lambda self: False, lambda self, value: None)


@pytest.mark.parametrize("chunked_loss", [False, True], ids=["model's loss", "chunked loss"])
def test_compiled_updates_from_graphs_give_the_losses_and_weights_of_eager_updates(tmp_path, monkeypatch,
                                                                                   recorded_graphs, chunked_loss):
    # two micro-batches an update (added into the same gradients), in the padded shapes of --torch_compile
    options = dict(dropout=0.0, max_steps=6, eval_steps=6, save_steps=6, tokens_per_update=512, torch_compile=True,
                   cuda_graphs=True)
    outcome = run_in_process(tiny_argv(tmp_path / "graphs", chunked_loss=chunked_loss, **options))
    assert outcome.summary["steps"] == 6
    # the first update without graphs; then each shape captured once (before its first replay), the update's end
    # once, and every later update replayed (RecordedGraph held each replay to its capture)
    assert recorded_graphs.count("finish") == 1 and recorded_graphs.count("accumulate") >= 2, recorded_graphs
    # the reference: eager updates of the model's own loss
    monkeypatch.setattr(engine, "UpdateGraphs", NeverGraphing)
    monkeypatch.setattr(engine, "compiled_for_updates", lambda accelerator, model: model)
    run_in_process(tiny_argv(tmp_path / "eager", **options))
    graphed, eager = ([r["loss"] for r in metrics_records(tmp_path / name) if "loss" in r]
                      for name in ("graphs", "eager"))
    assert len(graphed) == 6 and graphed == pytest.approx(eager, rel=1e-5)
    graphed, eager = (load_file(tmp_path / name / "last" / "model.safetensors") for name in ("graphs", "eager"))
    assert graphed.keys() == eager.keys()
    for name in graphed:
        # a key's bias shifts every score of a query alike, which softmax ignores: its gradient is rounding noise,
        # which Adam scales up to steps of the learning rate, in directions that differ with the order of the sums
        if not name.endswith("k_proj.bias"):
            torch.testing.assert_close(graphed[name], eager[name], rtol=1e-4, atol=1e-6, msg=name)


def host_operators(monkeypatch):
    """A mode that records the operators the host calls outside graph replays, their list, and the list of its
    Python reads of tensors outside replays (.tolist() calls no operator), from now on."""
    operators, reads = [], []

    class Outside(TorchDispatchMode):
        @classmethod
        def ignore_compile_internals(cls):
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not RecordedGraph.replaying:
                operators.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    for name in ("tolist", "item", "__bool__", "__int__", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if not RecordedGraph.replaying:
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return Outside, operators, reads


def test_a_graphed_update_leaves_the_host_three_copies_a_micro_batch(tokenizer, monkeypatch, recorded_graphs):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    try:
        model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
        optimizer, schedule = build_optimizer_and_schedule(model, 1e-3, 10, fused=True)
        model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
        updates = cuda_graphs.UpdateGraphs(compiled_for_updates(accelerator, model))
        parts = [PAIRS[0:3], PAIRS[3:6]]
        rows = [{"input_ids": [tokenizer(s)["input_ids"] for s, _ in pairs],
                 "labels": [tokenizer(text_target=t)["input_ids"] for _, t in pairs]} for pairs in parts]
        batches = [collate(part, tokenizer.pad_token_id) for part in rows]
        counts = {id(batch): token_counts(part) for batch, part in zip(batches, rows)}  # as the loop gives them
        args = parse_arguments(["--max_grad_norm", "1.0", "--output_dir", "unused"])[2]

        def update(micro_batches):
            return run_update(accelerator, updates, optimizer, schedule, micro_batches, args, TrainingProgress(),
                              token_counts=[counts[id(batch)] for batch in micro_batches])

        update(batches)  # without graphs: compiles the model, creates Adam's state
        update(batches)  # captures both shapes and the update's end, then replays them
        assert recorded_graphs == ["accumulate", "accumulate", "finish"]
        Outside, operators, reads = host_operators(monkeypatch)
        done = []
        for micro_batches in (batches[:1], batches):
            operators.clear(), reads.clear()
            with Outside():
                loss, tokens, norm = update(micro_batches)
            done.append((Counter(operators), list(reads)))
            assert torch.isfinite(torch.tensor(loss)) and norm > 0
        (one, one_reads), (two, two_reads) = done
        # a second micro-batch costs the host its three copies into the shape's buffers, and nothing else
        assert two - one == Counter({"aten::copy_": 3}) and not one - two, (one, two)
        # per update: the scalars filled, the check stacked and read once; none of the model's or the step's work
        assert not {"aten::mm", "aten::addmm", "aten::bmm", "aten::embedding", "aten::_fused_adam_",
                    "aten::_foreach_norm", "aten::native_layer_norm"} & set(two), two
        assert one_reads == two_reads == ["tolist"]
        assert recorded_graphs == ["accumulate", "accumulate", "finish"]  # nothing captured again
    finally:
        reset_accelerate()
