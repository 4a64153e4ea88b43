"""Stopping a run cleanly when its job is preempted, so that nothing it learned is lost: the update under way is
finished, a complete checkpoint is written, and the command exits with EXIT_RESUMABLE, for the job to be requeued
and to continue with `--resume` (train.py) or `--resume_from_checkpoint last` (the fine-tuning scripts).

The stop signals are SIGTERM, what a preempted job receives (SLURM, Kubernetes, spot instances; SIGKILL follows
after a grace period, 30 s by default in SLURM's KillWait and Kubernetes' terminationGracePeriodSeconds), and
SIGUSR1, which SLURM sends ahead of a job's time limit when asked (`#SBATCH --signal=USR1@120`). While training,
their handler only records the signal; the training loop asks between updates, where stopping leaves nothing half
done. SIGINT (Ctrl-C) and SIGKILL keep their usual effect.

Under a launcher (`accelerate launch`, torchrun) the signal may reach one process, some or all, at different times;
every process must stop after the same update (a checkpoint is written by all of them together), so they agree
through a reduction: train.py folds this process's flag into the reduction that already checks each update's new
weights, the fine-tuning callback adds one small reduction per update.
"""

import signal
import threading

import torch


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
EXIT_RESUMABLE = 75  # EX_TEMPFAIL in sysexits.h: a temporary failure, the same command can be run again
RESUMABLE = f"exit status {EXIT_RESUMABLE}: stopped by a signal, resumable"


class StoppedBySignal(Exception):
    """The run stopped on a stop signal after saving a checkpoint it can continue from. Not an error: the command
    prints the message as one line and exits with EXIT_RESUMABLE (`vaswani.cli.run_command`)."""

    exit_status = EXIT_RESUMABLE


class StopSignals:
    """The stop signals this process receives while the context is entered; the handlers in place before are put
    back on leaving, except when it is left by StoppedBySignal: the process is then on its way out, and ignores
    further stop signals until it exits (under a launcher, the first process to exit makes the launcher send SIGTERM
    to the others, which must not cut their own exit short; SIG_IGN, unlike a Python handler, holds until the very
    end of the interpreter's shutdown). Signals can only be handled in the main thread: elsewhere none is recorded,
    and they keep their usual effect."""

    def __init__(self, at_once: str | None = None):
        self.received: signal.Signals | None = None  # the first stop signal this process received
        self.agreed = False  # whether any process had received one at the last check of all of them
        self.previous = {}
        # where nothing would be lost by stopping (a run's set-up, before its first update): a stop signal raises
        # StoppedBySignal at once, with this message after the signal's name, instead of waiting for an update's end
        self.at_once = at_once

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self.previous = {number: signal.signal(number, self.record) for number in STOP_SIGNALS}
        return self

    def __exit__(self, kind, error, traceback) -> None:
        stopping = kind is not None and issubclass(kind, StoppedBySignal)
        for number, handler in self.previous.items():
            signal.signal(number, signal.SIG_IGN if stopping else handler)
        self.previous = {}

    def record(self, number: int, frame) -> None:
        """The handler: it only notes the signal (anything more could run in the middle of an update), or with
        `at_once`, stops the process there."""
        self.received = self.received or signal.Signals(number)
        if self.at_once is not None:
            raise StoppedBySignal(f"stopped by {self.received.name} {self.at_once} ({RESUMABLE}).")

    def agree(self, any_process_received: bool) -> bool:
        """Note what every process learned from one reduction of the flags (`flag()`), and return it."""
        self.agreed = any_process_received
        return self.agreed

    def flag(self) -> float:
        """This process's part of the reduction: 1.0 once it received a stop signal."""
        return float(self.received is not None)

    def received_by_any_process(self, accelerator) -> bool:
        """Whether any process has received a stop signal, the same answer on every process: one small reduction
        (none in a single process). Every process must call it at the same point."""
        if accelerator.num_processes == 1:
            return self.agree(self.received is not None)
        flag = torch.tensor([self.flag()], device=accelerator.device)
        return self.agree(accelerator.reduce(flag, reduction="sum").item() > 0)

    def describe(self) -> str:
        """The signal, in words, for the message: another process's when this one received none."""
        return self.received.name if self.received else "a stop signal to another process of the run"


__all__ = [
    "EXIT_RESUMABLE",
    "RESUMABLE",
    "STOP_SIGNALS",
    "StopSignals",
    "StoppedBySignal",
]
