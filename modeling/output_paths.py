"""Where the commands write: the one check that keeps every `--output_dir` / `--output_file` of scripts/ apart from
what the command reads, and the atomic writing of the files another process may read at any moment.

No command deletes or overwrites what it reads. Before anything is loaded or written, each command gives
`check_output_dir` or `check_output_file` its output and its inputs (option -> path), compared as resolved paths
(symbolic links followed, so a link cannot hide that two paths are one):

- an output folder that is an input, lies inside one or holds one is refused: `--overwrite_output_dir` would delete
  the input, and writing into it would replace its files (`config.json`, weights, `train.jsonl`);
- an output file that is an input or holds one is refused; inside an input folder it may create a new file or replace
  an earlier results file (`evaluation_results.json`, which `scripts/evaluate_model.py` writes into the checkpoint by
  default), never one of the folder's other files.

The message names both options and both paths. An input that is not on disk (a Hub id, or a file that its own check
reports as missing) cannot be overwritten and is not compared.

A folder that a command deletes before writing it again (`--overwrite_output_dir`) must not be a symbolic link:
deleting through the link would delete the folder it points to, which the user named only indirectly, and deleting
the link alone would quietly move the output elsewhere. `refuse_symbolic_link` says so and names both. (train.py
deletes only its own run files inside its folder; a link among them goes as a link: vaswani.training.preparation.)

`write_text_atomically` writes a file so that a reader finds the old content or the new, never a part: a temporary
file beside it, flushed to disk, renamed over it (a rename within a folder is atomic), as the checkpoints of
`vaswani.training.checkpoints` are written folder by folder. Two writers of one file each publish a whole file; the
last rename wins.

`staging_folder` and `publish_folder` do the same for a folder written in several steps (a Space's folder): it is
written beside its place under a temporary name and renamed into it once complete, so that a reader finds the old
folder or the new one (for the instant between two renames, none), never a part; a failed write leaves the old one.
"""

import json
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from .training.checkpoints import fsync_directory


PathLike = str | os.PathLike
Inputs = Mapping[str, PathLike | Iterable[PathLike] | None]  # option -> its path(s); None where it is unset
RESULTS_KEYS = ("metrics", "conventions")  # what marks a results file (vaswani.evaluation.scoring.write_results)
LARGEST_RESULTS_FILE = 16 * 1024 * 1024  # bytes; a larger file is not read to find out whether it is one


def check_output_dir(output_dir: PathLike, inputs: Inputs, option: str = "--output_dir") -> None:
    """Refuse an output folder that is one of `inputs`, lies inside one or holds one (see the module's docstring)."""
    for input_option, input_path in _input_paths(inputs):
        relation = _overlap(Path(output_dir), input_path)
        if relation:
            raise ValueError(_conflict_message(option, Path(output_dir), relation, input_option, input_path))


def check_output_file(output_file: PathLike, inputs: Inputs, option: str = "--output_file") -> None:
    """Refuse an output file that is one of `inputs` or holds one, or that would replace a file of an input folder
    other than an earlier results file (see the module's docstring)."""
    output_file = Path(output_file)
    for input_option, input_path in _input_paths(inputs):
        relation = _overlap(output_file, input_path)
        if relation == "lies inside" and _replaces_nothing_read(output_file):
            continue
        if relation:
            raise ValueError(_conflict_message(option, output_file, relation, input_option, input_path))


def _input_paths(inputs: Inputs) -> list[tuple[str, Path]]:
    """(option, path) for every input path that is on disk."""
    found = []
    for option, value in inputs.items():
        values = [] if value is None else [value] if isinstance(value, (str, os.PathLike)) else list(value)
        found += [(option, Path(path)) for path in values if path and os.path.lexists(path)]
    return found


def _overlap(output: Path, input_path: Path) -> str | None:
    """How `output` stands to `input_path`, resolved: "is", "lies inside", "holds", or None when they are apart."""
    output, input_path = output.resolve(), input_path.resolve()
    if output == input_path:
        return "is"
    if input_path in output.parents:
        return "lies inside"
    if output in input_path.parents:
        return "holds"
    return None


def _replaces_nothing_read(output_file: Path) -> bool:
    """A file written into an input folder reads nothing of it when it is new, or an earlier results file."""
    if not os.path.lexists(output_file):
        return True
    return output_file.is_file() and not output_file.is_symlink() and is_results_file(output_file)


def is_results_file(path: Path) -> bool:
    """Whether `path` is a results file of scripts/evaluate_model.py or scripts/extractive_baseline.py."""
    if path.stat().st_size > LARGEST_RESULTS_FILE:
        return False
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(content, dict) and all(key in content for key in RESULTS_KEYS)


def _conflict_message(option: str, output: Path, relation: str, input_option: str, input_path: Path) -> str:
    """One line: both options, both paths (and where links make them one, the resolved paths), what to do."""
    through_links = ""
    if any(path.resolve() != Path(os.path.abspath(path)) for path in (output, input_path)):
        through_links = f" (through symbolic links: {output.resolve()} and {input_path.resolve()})"
    return (
        f"{option} {output} {relation} {input_option} {input_path}{through_links}: writing there would delete or "
        f"overwrite what the command reads. Choose an {option} apart from its inputs."
    )


def refuse_symbolic_link(folder: PathLike, option: str = "--output_dir") -> None:
    """Refuse to delete a folder given as a symbolic link (see the module's docstring)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ValueError(
            f"{option} {folder} is a symbolic link to {os.readlink(folder)}: --overwrite_output_dir deletes the "
            f"folder before writing it, and never through a link. Give the folder itself ({folder.resolve()}) or "
            "remove the link."
        )


def write_text_atomically(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` so that a reader never finds it half written (see the module's docstring).
    The temporary file is removed if the write fails; the file at `path` is then as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own for each writer; created by os.open so that the file gets the usual (umask) permissions
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def staging_folder(destination: PathLike) -> Path:
    """A new empty folder beside `destination` (same file system, so that a rename publishes it), under a name of
    its own: where `publish_folder` takes it from."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staged = destination.with_name(f".{destination.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    staged.mkdir()
    return staged


def publish_folder(staged: PathLike, destination: PathLike) -> Path:
    """Put the complete folder `staged` (from `staging_folder`) at `destination`, replacing the folder there, if any,
    by renames (see the module's docstring); the replaced folder is deleted afterwards."""
    staged, destination = Path(staged), Path(destination)
    replaced = None
    if os.path.lexists(destination):
        replaced = destination.with_name(f".{destination.name}.{os.getpid()}-{secrets.token_hex(4)}.replaced")
        os.rename(destination, replaced)
    try:
        os.rename(staged, destination)
    except BaseException:
        if replaced is not None:
            os.rename(replaced, destination)
        raise
    fsync_directory(destination.parent)
    if replaced is not None:
        shutil.rmtree(replaced)
    return destination


__all__ = [
    "Inputs",
    "check_output_dir",
    "check_output_file",
    "is_results_file",
    "publish_folder",
    "refuse_symbolic_link",
    "staging_folder",
    "write_text_atomically",
]
