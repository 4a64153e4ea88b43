"""Batches decoded side by side on a CPU, as CTranslate2's `inter_threads`: `count` processes forked from this one
once the model is loaded (its weights shared with them, copy-on-write), each decoding one batch at a time with its
share of the cores (`threads`, one by default). Several small decoders, each on a core of its own, keep every core
busy for the whole of each step, where one decoder splitting each product over the cores leaves them waiting on each
other at the many small operations of a step (measured: results/benchmark/README.md, the corpus rows).

With one worker, batches run in this process. Forked workers ignore SIGINT and SIGTERM (this process decides when to
stop, at a window's end) and die with this process, however it dies.
"""

import concurrent.futures
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence

import torch


PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PREDICT: Callable | None = None  # what a forked worker runs: set in this process before the fork, inherited


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a scheduler or `taskset` may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Workers:
    """`submit(texts)` -> a future of `predict(texts)`, computed by one of `count` workers of `threads` threads."""

    def __init__(self, predict: Callable[[Sequence[str]], list[str]], count: int, threads: int = 1):
        global _PREDICT
        self.count = count
        self.pool = None
        if count == 1:
            torch.set_num_threads(threads)
            self.predict = predict
            return
        _PREDICT = predict
        torch.set_num_threads(1)  # this process only reads, sorts and writes: no thread pool to fork
        self.pool = concurrent.futures.ProcessPoolExecutor(
            count, mp_context=multiprocessing.get_context("fork"), initializer=_start_worker, initargs=(threads,)
        )

    def submit(self, texts: Sequence[str]) -> concurrent.futures.Future:
        if self.pool is not None:
            return self.pool.submit(_predict, list(texts))
        future = concurrent.futures.Future()
        future.set_result(self.predict(texts))
        return future

    def close(self, cancel: bool = False) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=cancel)
            self.pool = None

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close(cancel=kind is not None)


def _start_worker(threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before the request was in place
            os._exit(1)
    torch.set_num_threads(threads)


def _predict(texts: list[str]) -> list[str]:
    return _PREDICT(texts)


__all__ = ["Workers", "usable_cores"]
