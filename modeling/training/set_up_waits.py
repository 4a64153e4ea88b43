"""The waits of a run's set-up under several processes: while the first process loads the data, learns the tokenizer
and tokenizes the pairs (the others then read what it wrote), the others wait for it at barriers of a gloo process
group of their own, which waits up to `SET_UP_TIMEOUT`. The training's own process group gives up far sooner on a
barrier (NCCL: after 10 minutes, torch's default), and on WMT14's 4.5M pairs the first process alone learns a
tokenizer and tokenizes for longer than that (results/wmt14_en_de/notes.md); the updates keep that group and its
timeout, which is how a hung collective is noticed."""

from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist


# How long the other processes wait for the first one's data preparation (4.5M pairs on a 2-core CPU: under an hour)
SET_UP_TIMEOUT = timedelta(hours=6)


class SetUpWaits:
    """Barriers of a gloo group with a long timeout, for the processes of one run (no group: one process)."""

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.group = None
        if accelerator.num_processes > 1 and dist.is_available() and dist.is_initialized():
            self.group = dist.new_group(backend="gloo", timeout=SET_UP_TIMEOUT)

    def wait_for_everyone(self) -> None:
        if self.group is not None:
            dist.barrier(group=self.group)

    @contextmanager
    def local_main_process_first(self):
        """The first process of each machine runs the block, then the others (which then read its caches)."""
        first = self.accelerator.is_local_main_process
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()


__all__ = ["SET_UP_TIMEOUT", "SetUpWaits"]
