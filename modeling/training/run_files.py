"""What a train.py run wrote in its folder, and the proof of it, so that a run deletes, replaces or prunes nothing
else (vaswani.runs.manifests):

- the folders a run publishes carry a manifest, marked with their kind: `checkpoints/step-*` ("checkpoint": every
  file's path and size), `best/`, `last/` ("model") and `tokenizer/` ("tokenizer": path, size and SHA-256). A
  temporary folder carries one from its first instant, `"complete": false`;
- a checkpoint of an earlier version (no manifest) is known by its progress record, `training_progress.json`;
  a model or tokenizer folder of an earlier version by its files' content (`manifests.legacy_problem`);
- the files at the top of the run folder by their content: `arguments.json` and `summary.json` as the JSON a run
  writes, `metrics.jsonl` line by line, `training_curves.png` as a picture matplotlib drew, `tensorboard/` as
  TensorBoard's event files.

`--overwrite_output_dir` deletes an earlier run's files only when each is proven so (`run_files_problem`); a
checkpoint that is not a run's (a folder another command or tool put in `checkpoints/`) is refused before any work,
since the run would prune it or save over it (`foreign_checkpoint`); and the clean-up of what a killed save left
removes only folders holding the mark (`remove_leftovers`), restoring a published model cut between two renames.
"""

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ..runs.manifests import (
    MANIFEST_FILE,
    foreign_entry,
    is_plain_folder,
    path_kind,
    read_json_object,
    read_manifest,
    start_manifest,
    write_manifest,
)
from ..runs.records import ARGUMENTS_FILE


CHECKPOINT, MODEL, TOKENIZER = "checkpoint", "model", "tokenizer"  # the kinds of folder a run publishes
KINDS = (CHECKPOINT, MODEL, TOKENIZER)
WRITER = "train.py"  # what a run's manifests say wrote them
PUBLISHED = re.compile(r"^(best|last|tokenizer|step-\d+)$")  # the names of what a run publishes
PROGRESS_FILE = "training_progress.json"  # (vaswani.training.checkpoints': where the run is)
TEMPORARY_PREFIX = ".tmp-"
RETIRED_PREFIX = ".old-"
CHECKPOINT_FOLDER = re.compile(r"^(diverged-)?step-\d+$")
# what earlier versions named their temporary and set-aside folders (without a mark): named, never touched
UNMARKED_LEFTOVER = re.compile(r"^\.(tmp|old)-(best|last|tokenizer|step-\d{8})$")
LARGEST_METRICS_FILE = 1 << 30  # bytes; a larger metrics.jsonl is not read to prove it a run's
TENSORBOARD_MARK = b"brain.Event:"  # the file_version of the first record of every TensorBoard event file


def mark(folder: Path, kind: str) -> None:
    """Make a temporary folder of a run, marked as its own from its first instant."""
    folder.mkdir(parents=True)
    start_manifest(folder, written_by=WRITER, kind=kind)


def seal(folder: Path, kind: str) -> None:
    """List what the run wrote into `folder` in its manifest, before the rename that publishes it; a checkpoint's
    files by size only (it is large, and written anew at every save)."""
    write_manifest(folder, written_by=WRITER, hashes=kind != CHECKPOINT, kind=kind)


def kind_of(folder: Path) -> str | None:
    """The kind a run's manifest gives `folder` (None without one)."""
    record = read_manifest(folder) if is_plain_folder(folder) else None
    return record.get("kind") if record and record.get("written_by") == WRITER else None


def is_own_checkpoint(folder: Path) -> bool:
    """A checkpoint a run of this project wrote (its manifest says so, or, of an earlier version, it holds a run's
    progress record): a run may prune it or save over it, whatever it holds now (damaged or not)."""
    if not is_plain_folder(folder):
        return False
    if read_manifest(folder) is not None:
        return kind_of(folder) == CHECKPOINT
    record = read_json_object(folder / PROGRESS_FILE)
    return record is not None and "progress" in record and "num_processes" in record


def foreign_checkpoint(root: Path) -> Path | None:
    """The first folder in `root` (a run's checkpoints/) named as a checkpoint that is not a run's: the run would
    prune it or save over it."""
    if not is_plain_folder(root):
        return None
    for path in sorted(root.iterdir()):
        if CHECKPOINT_FOLDER.match(path.name) and not is_own_checkpoint(path):
            return path
    return None


def remove_own(folder: Path, kind: str) -> bool:
    """Delete `folder` if it is a run's of `kind` (a temporary one included); False, nothing done, otherwise."""
    if not is_plain_folder(folder) or kind_of(folder) != kind:
        return False
    shutil.rmtree(folder)
    return True


# --- what --overwrite_output_dir may delete -----------------------------------------------------------------------


def run_files_problem(output_dir: Path, names: tuple[str, ...]) -> str | None:
    """Why one of the run files `names` in `output_dir` is not proven an earlier run's, in words naming the path
    (None when each is): what --overwrite_output_dir would delete."""
    for name in names:
        path = output_dir / name
        if not os.path.lexists(path):
            continue
        problem = _run_file_problem(path, name)
        if problem is not None:
            return problem
    return None


def _run_file_problem(path: Path, name: str) -> str | None:
    kind = path_kind(path)
    if kind.startswith("a symbolic link"):
        return None  # removed as a link, never followed: what it points to is left as it is
    if name == "checkpoints":
        return _checkpoints_problem(path) if kind == "a folder" else _named(path, "is not a run's checkpoints folder")
    if name in ("best", "last", "tokenizer"):
        if kind != "a folder":
            return _named(path, f"is not a run's {name} folder")
        if not any(path.iterdir()):
            return None
        foreign = foreign_entry(path)
        return None if foreign is None else _named(foreign.path, foreign.why, foreign.kind())
    if name == "tensorboard":
        return _tensorboard_problem(path) if kind == "a folder" else _named(path, "is not TensorBoard's folder")
    if kind != "a file":
        return _named(path, f"is not the {name} a run writes")
    check = RUN_FILE_CHECKS.get(name)
    if check is not None and not check(path):
        return _named(path, f"is not the {name} a run writes (checked by its content)")
    return None


def _checkpoints_problem(root: Path) -> str | None:
    for path in sorted(root.iterdir()):
        if is_own_checkpoint(path):  # and every file in it listed (an earlier version's, without a list, as it is)
            foreign = foreign_entry(path, hashes=False, sizes=False) if read_manifest(path) else None
            if foreign is not None:
                return _named(foreign.path, foreign.why, foreign.kind())
        elif not (is_plain_folder(path) and path.name.startswith((TEMPORARY_PREFIX, RETIRED_PREFIX))
                  and kind_of(path) == CHECKPOINT):
            return _named(path, "is not a checkpoint of this project's runs")
    return None


def _tensorboard_problem(root: Path) -> str | None:
    for folder, folders, names in os.walk(root):
        for name in sorted(folders + names):
            path = Path(folder) / name
            kind = path_kind(path)
            if kind == "a folder":
                continue
            if kind != "a file" or not name.startswith("events.out.tfevents."):
                return _named(path, "is not a TensorBoard event file")
            with open(path, "rb") as handle:
                if TENSORBOARD_MARK not in handle.read(128):
                    return _named(path, "is not a TensorBoard event file (checked by its content)")
    return None


def _named(path: Path, why: str, kind: str | None = None) -> str:
    return f"{path} ({kind or path_kind(path)}), which {why}"


def _is_arguments(path: Path) -> bool:
    record = read_json_object(path)
    return record is not None and {"output_dir", "preset"} <= set(record)


def _is_summary(path: Path) -> bool:
    record = read_json_object(path)
    return record is not None and {"stopped_because", "steps"} <= set(record)


def _is_metrics(path: Path) -> bool:
    if path.stat().st_size > LARGEST_METRICS_FILE:
        return False
    try:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    record = json.loads(line)
                    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                        return False
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return True


def _is_curves(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    return head.startswith(b"\x89PNG\r\n\x1a\n") and b"Matplotlib" in head


RUN_FILE_CHECKS: dict[str, Callable[[Path], bool]] = {
    ARGUMENTS_FILE: _is_arguments,
    "summary.json": _is_summary,
    "metrics.jsonl": _is_metrics,
    "training_curves.png": _is_curves,
}


def remove_run_file(path: Path) -> None:
    """Delete what an earlier run wrote (proven by `run_files_problem`). A symbolic link there (`best` -> a published
    copy) is removed itself, never followed: what it points to was never this run's to delete."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# --- what a killed save left ----------------------------------------------------------------------------------------


def remove_leftovers(folder: Path, say: Callable[[str], None] = print) -> list[str]:
    """Put right what saves killed on the way left in `folder` (the run folder, or its checkpoints/), one line each:
    a temporary folder (`.tmp-NAME`) or one set aside (`.old-NAME`) holding a run's mark is removed; where NAME
    itself is missing and its set-aside folder is there (a swap cut between its two renames), the new folder is put
    in place where it is complete, else the earlier one is put back. A folder named so without the mark is the
    user's, or an earlier version's: never touched; those with the very names a run saves under are returned
    (`unmarked_in_the_way`)."""
    if not is_plain_folder(folder):
        return []
    names, unmarked = set(), []
    for path in sorted(folder.iterdir()):
        for prefix in (TEMPORARY_PREFIX, RETIRED_PREFIX):
            if path.name.startswith(prefix):
                if PUBLISHED.match(path.name[len(prefix):]) and _marked(path):
                    names.add(path.name[len(prefix):])
                elif UNMARKED_LEFTOVER.match(path.name):
                    unmarked.append(path.name)
    for name in sorted(names):
        original = folder / name
        temporary, retired = folder / f"{TEMPORARY_PREFIX}{name}", folder / f"{RETIRED_PREFIX}{name}"
        if not os.path.lexists(original) and _marked(retired):
            chosen = temporary if _marked(temporary, complete=True) else retired
            chosen.rename(original)
            say(f"Note: {original} was missing, a save killed between the two renames of its swap: put in place "
                f"from {chosen.name} ({'the new folder, complete' if chosen == temporary else 'the earlier one'}).")
        for path in (temporary, retired):
            if _marked(path):
                shutil.rmtree(path)
                say(f"Note: removed {path}, left by a save that was killed (it holds the run's mark).")
    return unmarked


def unmarked_in_the_way(output_dir: Path, unmarked: list[str]) -> str:
    """The refusal for folders without a run's mark at the names a run saves under (`remove_leftovers`)."""
    restore = next((name for name in unmarked if name.startswith(RETIRED_PREFIX)
                    and not os.path.lexists(output_dir / name[len(RETIRED_PREFIX):])), None)
    advice = (f" ({restore} with no {restore[len(RETIRED_PREFIX):]} beside it is an earlier version's, cut while it "
              f"swapped that folder: rename it back)" if restore else "")
    return (f"--output_dir {output_dir} holds {', '.join(unmarked)}, under the name(s) the run saves under, without "
            "the mark a run leaves in what it writes (an earlier version's leftover of a killed save, or a folder of "
            f"yours): not touched. Move it away{advice}, then run again.")


def _marked(path: Path, complete: bool = False) -> bool:
    """A folder holding a run's mark (a manifest train.py wrote, of a kind it publishes), and with `complete`, one
    whose manifest is whole."""
    record = read_manifest(path) if is_plain_folder(path) else None
    return (record is not None and record.get("written_by") == WRITER and record.get("kind") in KINDS
            and (record.get("complete") is True or not complete))


__all__ = [
    "CHECKPOINT",
    "MODEL",
    "TOKENIZER",
    "foreign_checkpoint",
    "is_own_checkpoint",
    "kind_of",
    "mark",
    "remove_leftovers",
    "remove_own",
    "remove_run_file",
    "run_files_problem",
    "seal",
]
