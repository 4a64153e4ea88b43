"""--cuda_graphs (vaswani.training.cuda_graphs), checked on a CPU: what it refuses, and that a run captures one
callable per batch shape and replays it, giving the losses of the same run without it. The capture itself
(`torch.cuda.make_graphed_callables`) needs a GPU: here a stand-in that runs the module as it is."""

from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType

from training_helpers import metrics_records, run_in_process, tiny_argv
from vaswani.training import cuda_graphs
from vaswani.training import loop as loop_module
from vaswani.training.errors import TrainingError


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
    (1, DistributedType.NO, "no", True, 1, "--cuda_graphs and --torch_compile are two ways to run the update"),
    (1, DistributedType.NO, "no", False, 2, "takes one micro-batch an update (--tokens_per_update at most "
                                            "--max_tokens_per_batch per process); these options make 2"),
    (1, DistributedType.NO, "no", False, 1, None),
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
    monkeypatch.setattr(loop_module, "cuda_graphs_refusal", lambda accelerator, torch_compile, micro_batches: None)
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
    monkeypatch.setattr(loop_module, "GraphedUpdates", lambda model: model)
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
