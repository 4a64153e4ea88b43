"""The exit status of a run under a launcher (`accelerate launch`, torchrun), as its processes ended: 75 when they
all stopped on a signal with a checkpoint (`preemption.EXIT_RESUMABLE`), so that a job script can requeue on it.

A launcher reports a worker that exited with 75 as a failed child (`ChildFailedError`, exit status 1), or, when it
got the signal itself, with its own `SignalException` (1 as well): the status the job's command ends with cannot say
"resumable". `run_reporting_status` runs the launcher's command with `STATUS_DIR` set in its environment; each
process of a command of this project (`vaswani.cli.run_command`) writes there its process id when it starts and its
exit status when it ends, and the launcher's command is given the status all of them ended with. A stop signal that
reaches this process (a container's first process gets it alone) is passed on to each of them, not to the launcher,
which forwards any signal it gets itself, and whose own handling of a second one would cut the workers' stop short.
"""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .preemption import EXIT_RESUMABLE, STOP_SIGNALS


STATUS_DIR = "VASWANI_STATUS_DIR"  # the environment variable naming the folder the processes report to


def processes_apart(together: int, counted: str, advice: str) -> str | None:
    """Where a launcher started WORLD_SIZE processes of a run but `together` of them form its process group (without
    a GPU, Accelerate forms one only when told to run on the CPU), the processes would each train alone on the same
    folder: the problem in one line, `counted` saying who counts them, `advice` what to do on a machine without
    GPUs. None where they train together."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched <= 1 or together == launched:
        return None
    return (
        f"Launched as {launched} processes (WORLD_SIZE={launched}), but they would each train alone ({counted}): on a "
        f"machine without GPUs {advice} to train on CPU processes together."
    )


def report_start() -> None:
    """In a process of a command run under `run_reporting_status`: its process id, to pass stop signals on to."""
    folder = os.environ.get(STATUS_DIR)
    if folder:
        (Path(folder) / f"{_process_name()}.pid").write_text(str(os.getpid()))


def report_exit(status: int) -> None:
    """In a process of a command run under `run_reporting_status`: the status it exits with."""
    folder = os.environ.get(STATUS_DIR)
    if folder:
        (Path(folder) / f"{_process_name()}.status").write_text(str(status))


def _process_name() -> str:
    return f"rank-{os.environ.get('RANK', '0')}-pid-{os.getpid()}"


def run_reporting_status(command: list[str]) -> int:
    """Run `command` (a launcher's, or a command of this project) and return the status its processes agree on: the
    one every process that started reported, where they all reported the same; else the launcher's own (1 where it
    succeeded while a process did not report)."""
    with tempfile.TemporaryDirectory(prefix="vaswani-status-") as folder:
        process = subprocess.Popen(command, env={**os.environ, STATUS_DIR: folder})
        previous = {number: signal.signal(number, _passing_on(Path(folder))) for number in STOP_SIGNALS}
        try:
            launcher_status = process.wait()
            if launcher_status < 0:  # ended by a signal: the shell's number for it
                launcher_status = 128 - launcher_status
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        return agreed_status(Path(folder), launcher_status)


def _passing_on(folder: Path):
    def pass_on(number: int, frame) -> None:
        for pid_file in folder.glob("*.pid"):
            if not pid_file.with_suffix(".status").exists():
                try:
                    os.kill(int(pid_file.read_text()), number)
                except (ProcessLookupError, ValueError):
                    pass  # ended meanwhile, or its file is being written
    return pass_on


def agreed_status(folder: Path, launcher_status: int) -> int:
    started = {path.stem for path in folder.glob("*.pid")}
    statuses = {path.stem: path.read_text().strip() for path in folder.glob("*.status")}
    if started and set(statuses) >= started and len(set(statuses.values())) == 1:
        status = int(statuses.popitem()[1])
        if status == EXIT_RESUMABLE and launcher_status != EXIT_RESUMABLE:
            print(f"{len(started)} process(es) stopped on a signal after saving a checkpoint: exit status "
                  f"{EXIT_RESUMABLE} (resumable; the launcher's own was {launcher_status}).", file=sys.stderr)
        return status
    return launcher_status if launcher_status != 0 else 1 if started else 0


__all__ = ["STATUS_DIR", "agreed_status", "report_exit", "report_start", "run_reporting_status"]
