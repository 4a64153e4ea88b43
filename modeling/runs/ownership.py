"""One writer per output folder, and no worker left behind.

The main process of a run holds an exclusive `flock` on `output_dir/.run.lock` for as long as it lives, and writes
into that file who holds it (process id, host, start time, command). The kernel releases the lock when the holder
dies, however it dies (kill -9 included), so a lock is never stale: a file left by a dead holder is taken over and
named. A second run on the same folder, or a `--resume` beside a run still going, is refused with the holder's
details.

Workers started by a launcher (`accelerate launch`, torchrun) ask the kernel to kill them when the launcher dies
(`PR_SET_PDEATHSIG`), so that killing the launcher's process group does not leave them training as orphans.
"""

import ctypes
import fcntl
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from .errors import TrainingError


LOCK_FILE = ".run.lock"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# the locks this process holds, by lock file: a command called again in the same process (a test, a notebook) after
# one that ended with an error before letting its lock go takes it back, rather than being refused by itself
_HELD: dict[str, int] = {}


def take_output_dir(
    output_dir: Path, lock_file: Path | None = None, option: str = "--output_dir", previous: dict | None = None,
) -> tuple[int, str | None]:
    """Lock `output_dir` for this process; return the lock's file descriptor (keep it open for the whole run) and a
    note about a previous holder that died without releasing it, if any. Raises TrainingError naming the holder when
    another live process holds it. The lock is `output_dir/.run.lock` unless `lock_file` names another file (a
    folder published whole is locked beside it: vaswani.output_paths); `option` is how the message names the
    folder; `previous`, a dict given, receives the record the previous holder left (with what it had under way, where
    it was killed: `record_in_lock`)."""
    path = lock_file or output_dir / LOCK_FILE
    earlier = _HELD.pop(str(Path(path).resolve()), None)
    if earlier is not None:
        os.close(earlier)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read_holder(descriptor))
            os.close(descriptor)
            raise TrainingError(
                f"{option} {output_dir} is in use by another run: {holder} (lock {path}). Two runs in one folder "
                "would overwrite each other's files. Wait for it to end or stop it, or choose another "
                f"{option}."
            ) from None
        if _still_at(path, descriptor):
            break
        os.close(descriptor)  # the holder removed the file as it let go: lock the one there now
    earlier_record = _read_holder(descriptor)
    if previous is not None:
        previous.update(earlier_record)
    note = None
    if earlier_record.get("pid") and not earlier_record.get("released"):
        note = (f"the previous run in {output_dir} ({_describe(earlier_record)}) ended without releasing its lock "
                "(killed?)")
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "command": " ".join(sys.argv)[:500]}
    _write_holder(descriptor, record)
    _HELD[str(Path(path).resolve())] = descriptor
    return descriptor, note


def _still_at(path: Path, descriptor: int) -> bool:
    """Whether the file locked through `descriptor` is still the one at `path` (a lock file removed on release, as
    `release_output_dir(..., remove=path)` does, may be gone, or replaced, by the time the lock is granted)."""
    try:
        here, locked = os.stat(path), os.fstat(descriptor)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (locked.st_dev, locked.st_ino)


def release_output_dir(descriptor: int, remove: Path | None = None) -> None:
    """Mark the lock released (for the next run's message) and let it go; with `remove`, the lock file, which is
    deleted first, while still held (a lock beside a published folder leaves nothing behind)."""
    for path, held in list(_HELD.items()):
        if held == descriptor:
            del _HELD[path]
    try:
        if remove is not None:
            Path(remove).unlink(missing_ok=True)
        else:
            record = _read_holder(descriptor)
            _write_holder(descriptor, {**record, "released": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    finally:
        os.close(descriptor)  # closing the descriptor releases the flock


def record_in_lock(descriptor: int, **fields) -> None:
    """Add `fields` to the holder's record in the lock file (a field given None is dropped): what the holder has under
    way, for the next holder to find should this one be killed (`take_output_dir(..., previous=...)`)."""
    record = _read_holder(descriptor)
    for name, value in fields.items():
        if value is None:
            record.pop(name, None)
        else:
            record[name] = value
    _write_holder(descriptor, record)


def describe_holder(record: dict) -> str:
    """A lock's holder in words: process, host, start, command."""
    return _describe(record)


def _read_holder(descriptor: int) -> dict:
    os.lseek(descriptor, 0, os.SEEK_SET)
    text = os.read(descriptor, 65536).decode("utf-8", errors="replace")
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}


def _write_holder(descriptor: int, record: dict) -> None:
    os.ftruncate(descriptor, 0)
    os.lseek(descriptor, 0, os.SEEK_SET)
    os.write(descriptor, (json.dumps(record) + "\n").encode("utf-8"))
    os.fsync(descriptor)


def _describe(record: dict) -> str:
    if not record.get("pid"):
        return "a process that did not say who it is"
    return (f"process {record['pid']} on {record.get('host', '?')}, started {record.get('started', '?')}"
            f" ({record.get('command', '?')})")


def die_with_the_launcher() -> bool:
    """Under a launcher (torchrun sets TORCHELASTIC_RUN_ID), have the kernel kill this worker when its parent, the
    launcher's agent, dies. Not for a process the user started directly: its parent is a shell, and `nohup` runs
    must outlive it. Returns whether it was set (Linux only)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if os.getppid() == 1:  # the launcher died before the request was in place
        os.kill(os.getpid(), signal.SIGKILL)
    return True


__all__ = [
    "describe_holder",
    "die_with_the_launcher",
    "record_in_lock",
    "release_output_dir",
    "take_output_dir",
]
