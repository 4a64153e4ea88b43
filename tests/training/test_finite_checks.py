"""The finiteness check that guards every update and every checkpoint, on the tensors each engine hands it: FSDP2
gives DTensors (a shard on each process), and Adam keeps its `step` count on the CPU while the weights are on the
GPU. A lent H100 found both breaking it (tests/.. cannot reach a GPU; the DTensor case runs on CPU with gloo)."""
import socket

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from vaswani.training.update import all_finite


class OneProcess:
    """What all_finite needs of an Accelerator, for one process of a real process group."""
    device = torch.device("cpu")

    def reduce(self, tensor, reduction):
        assert reduction == "sum"
        dist.all_reduce(tensor)
        return tensor


@pytest.fixture
def process_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,))
    dist.destroy_process_group()


def test_sharded_weights_are_checked_through_their_local_shard(process_group):
    weights = distribute_tensor(torch.ones(4, 3), process_group, [Shard(0)])
    assert all_finite(OneProcess(), [weights, torch.tensor(3.0)])
    broken = distribute_tensor(torch.tensor([[1.0, float("nan")], [0.0, 0.0]]), process_group, [Shard(0)])
    assert not all_finite(OneProcess(), [weights, broken])


def test_integer_and_empty_tensors_are_not_checked(process_group):
    assert all_finite(OneProcess(), [torch.arange(3), torch.empty(0), torch.ones(2)])
    assert not all_finite(OneProcess(), [torch.arange(3), torch.tensor([float("inf")])])
