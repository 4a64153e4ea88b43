"""Where an unfinished run keeps what it has done, so that nothing is lost and nothing is half written: a folder
beside the output, `.NAME.predict/`, that only this command writes.

    .NAME.predict/run.json          the settings that decide the output's bytes (model, input, task, decoding,
                                    windows), and once the output is published, the published file's inode
    .NAME.predict/000000012.out     window 12's output lines, written whole (a temporary file renamed into place)
    .NAME.predict/000000012.json    its record (lines, truncated inputs, ...), written after the lines: a window is
                                    done when its record is there

Every process of a launch writes the windows it decodes; when all are done, the first process writes the output
into the folder (`merged.partial`: the windows' lines in order), flushes it, records its inode in run.json, renames it
over NAME and removes the folder. So NAME appears only complete, and a run killed at any instant (kill -9 included)
is continued by the same command: the windows done are kept (a temporary file of a window cut short is removed), the
others are decoded, and the output is byte for byte what one uninterrupted run writes. A run killed after the rename
but before the folder was removed is recognised by the inode (the output is complete; the folder goes).

The same command with other settings is refused while such a folder is there (or with --overwrite_output_file, the
folder is removed and the run starts over): windows decoded with other settings would mix two outputs in one file. A
folder of that name without run.json was not written by this command, and is never touched.
"""

import json
import os
import shutil
import stat
from pathlib import Path

from ..output_paths import fsync_directory, path_kind, write_text_atomically


RECORD = "run.json"
MERGED = "merged.partial"


class WorkFolder:
    def __init__(self, output: Path, settings: dict):
        self.output, self.settings = output, settings
        self.path = output.with_name(f".{output.name}.predict")

    # --- starting ------------------------------------------------------------------------------------------------

    @staticmethod
    def published_here(output: Path) -> bool:
        """Whether `output` is the file an earlier run of this command published (and was killed before its folder
        was removed): its inode is the one that run recorded."""
        work = WorkFolder(output, {})
        try:
            record = json.loads((work.path / RECORD).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return False
        return isinstance(record, dict) and work._published(record)

    def open(self, overwrite: bool) -> str:
        """Create the folder, or take up the run it holds; returns "new", "resumed" or "published" (the output was
        completed by an earlier run with these settings: nothing is left to do). Refuses a folder this command did not
        write, and one of other settings unless `overwrite`."""
        if os.path.lexists(self.path):
            record = self._record()
            if self._published(record):  # the earlier run finished: its folder is what is left of it
                shutil.rmtree(self.path)
                if record.get("settings") == self.settings:
                    return "published"
                if not overwrite:
                    raise FileExistsError(
                        f"--output_file {self.output} exists: an earlier run of this command with other settings "
                        "wrote it. Pass --overwrite_output_file to replace it, or choose another name."
                    )
            elif record.get("settings") != self.settings:
                if not overwrite:
                    raise ValueError(
                        f"--output_file {self.output}: an unfinished run with other settings is kept in {self.path} "
                        f"({_differences(record.get('settings') or {}, self.settings)}). Run that command again to "
                        "finish it, or pass --overwrite_output_file to discard it and start over."
                    )
                shutil.rmtree(self.path)
            else:
                self._remove_temporary_files()
                return "resumed"
        self.path.mkdir()
        write_text_atomically(self.path / RECORD, json.dumps({"settings": self.settings}, indent=1) + "\n")
        fsync_directory(self.path.parent)
        return "new"

    def _record(self) -> dict:
        kind = path_kind(self.path)
        record_file = self.path / RECORD
        if kind != "a folder" or not record_file.is_file() or record_file.is_symlink():
            raise ValueError(
                f"--output_file {self.output}: {self.path} is {kind} that this command did not write (it has no "
                f"{RECORD}); it is left alone. Move it away, or choose another --output_file."
            )
        try:
            record = json.loads(record_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            record = {}
        return record if isinstance(record, dict) else {}

    def _published(self, record: dict) -> bool:
        inode = record.get("published_inode")
        try:
            return inode is not None and os.stat(self.output).st_ino == inode
        except FileNotFoundError:
            return False

    def _remove_temporary_files(self) -> None:
        for path in self.path.iterdir():
            if path.name.endswith(".tmp") or path.name == MERGED:
                path.unlink()

    # --- windows ---------------------------------------------------------------------------------------------------

    def done(self) -> set[int]:
        return {int(path.stem) for path in self.path.glob("*.json") if path.stem.isdigit()}

    def write_window(self, index: int, lines: list[str], record: dict) -> None:
        text = "".join(line + "\n" for line in lines)
        self._write(self.path / f"{index:09d}.out", text)
        self._write(self.path / f"{index:09d}.json", json.dumps(record) + "\n")

    def window_record(self, index: int) -> dict:
        return json.loads((self.path / f"{index:09d}.json").read_text(encoding="utf-8"))

    def _write(self, path: Path, text: str) -> None:
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    # --- publishing ----------------------------------------------------------------------------------------------

    def publish(self, windows: int) -> None:
        """Write the output from windows 0 .. `windows` - 1, in order, and rename it into place (see the module's
        docstring)."""
        merged = self.path / MERGED
        with open(merged, "wb") as output:
            for index in range(windows):
                with open(self.path / f"{index:09d}.out", "rb") as window:
                    shutil.copyfileobj(window, output, 1 << 20)
            output.flush()
            os.fsync(output.fileno())
        if self.output.is_file():  # replaced (--overwrite_output_file): the new file keeps the old one's permissions
            os.chmod(merged, stat.S_IMODE(os.stat(self.output).st_mode))
        record = {"settings": self.settings, "published_inode": os.stat(merged).st_ino}
        write_text_atomically(self.path / RECORD, json.dumps(record, indent=1) + "\n")
        os.replace(merged, self.output)
        fsync_directory(self.output.parent)
        shutil.rmtree(self.path)


def _differences(before: dict, now: dict) -> str:
    changed = [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in sorted({*before, *now})
               if before.get(key) != now.get(key)]
    shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
    return shown or "its record cannot be read"


__all__ = ["WorkFolder"]
