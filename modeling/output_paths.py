"""Where the commands write: the one discipline every `--output_dir` / `--output_file` of scripts/ follows, so that
no command deletes, replaces or alters a file it did not create.

1. **Checked before anything is loaded.** Each command gives `check_output_dir` or `check_output_file` its output and
   its inputs (option -> path), and every refusal is one line naming the option and the path:

   - an output that is a symbolic link is refused (a command writes at the path it is given, never through a link,
     and never deletes one to write there); so is a special file (a device node such as /dev/null, a FIFO, a
     socket), which a rename would replace, and a folder where a file goes or a file where a folder goes;
   - an output that is an input, lies inside one or holds one is refused, compared as resolved paths and then file
     by file: a file of an input that is a link into the output, or the same file (a hard link), and a file of an
     existing output that is a link into an input, count as the input itself. An input that is not on disk (a Hub
     id, or a file that its own check reports as missing) cannot be overwritten and is not compared;
   - an output file may go into an input folder only as a new file or over a file this project wrote before (an
     earlier results file: `evaluation_results.json`, which `scripts/evaluate_model.py` writes into the checkpoint
     by default); anywhere, an existing file is replaced only if it is of the kind the command writes (`replaces`);
   - an output folder inside what a training run manages (its `checkpoints/`, `best/`, `last/`, `tokenizer/`, or a
     fine-tuning run's `checkpoint-*`: folders of a run folder that holds a run's lock) is refused: the run would
     replace or prune it as its own, or keep it in place of its own checkpoints;
   - an existing output folder is refused unless the command replaces it (`--overwrite_output_dir`), and then only
     if it holds nothing but files this project writes (`PROJECT_FILES`): a file of the user's there is named.

2. **One writer.** A folder is written by one process at a time: train.py and the fine-tuning scripts hold
   `vaswani.runs.ownership`'s lock in the folder (`.run.lock`), a folder published whole holds the same lock on a
   file beside it (`.NAME.lock`, removed when the command ends), taken before any work (`OutputFolder`). A second
   command on the same folder is refused, naming the first.

3. **Published whole.** A folder is written into a temporary folder beside it (`.NAME.partial-*`), flushed to disk,
   and renamed into place (`OutputFolder.publish`); an earlier folder it replaces is renamed aside first and deleted
   last. Whatever fails on the way (a full disk), the folder is as it was, or absent, never partly written: the
   temporary folder is removed and one line names the file that could not be written. A file is written the same
   way (`write_atomically`, `write_text_atomically`): a temporary file beside it, flushed, renamed over it, never over
   anything but a regular file. A reader finds the old content or the new; two writers of one file each publish a
   whole file, the last rename wins.
"""

import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

from safetensors import SafetensorError

from .runs.ownership import LOCK_FILE, release_output_dir, take_output_dir


PathLike = str | os.PathLike
Inputs = Mapping[str, PathLike | Iterable[PathLike] | None]  # option -> its path(s); None where it is unset
RESULTS_KEYS = ("metrics", "conventions")  # what marks a results file (vaswani.evaluation.scoring.write_results)
LARGEST_RESULTS_FILE = 16 * 1024 * 1024  # bytes; a larger file is not read to find out whether it is one
MOST_FILES_COMPARED = 100_000  # files of an input or an existing output compared one by one; beyond, folders only
# The files this project writes into a folder it publishes (models, tokenizers, exports, cards, results, data pairs):
# what --overwrite_output_dir may replace. Anything else in the folder is the user's, and is named instead.
PROJECT_FILES = (
    "*.json", "*.jsonl", "*.safetensors", "*.py", "README.md", "model.bin", "*.onnx", "*.onnx.data", "*.png",
    "*.pdf", "*.svg", "requirements.txt", LOCK_FILE,
)
# What a training run manages inside its folder (replaces or prunes as its own): train.py's and the Trainer's.
RUN_MANAGED = ("checkpoints", "best", "last", "tokenizer", "checkpoint-*")
SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


# --- the checks before anything is loaded ----------------------------------------------------------------------


def check_output_dir(output_dir: PathLike, inputs: Inputs, option: str = "--output_dir") -> None:
    """Refuse an output folder that is a link, a special file or a file, that is one of `inputs`, lies inside one
    or holds one (files compared one by one, links resolved), or that lies inside what a training run manages (see
    the module's docstring). Whether an existing folder may be replaced is `check_replaceable`'s."""
    output_dir = Path(output_dir)
    for input_option, input_path in _input_paths(inputs):
        relation = _overlap(output_dir, input_path)
        if relation:
            raise ValueError(_conflict_message(option, output_dir, relation, input_option, input_path))
        _refuse_shared_files(output_dir, option, input_option, input_path)
    _refuse_link_or_special(output_dir, option)
    if output_dir.exists() and not output_dir.is_dir():
        raise NotADirectoryError(f"{option} {output_dir} is a file, not a folder. Give a folder (new or empty).")
    _refuse_inside_a_run(output_dir, option)


def check_output_file(
    output_file: PathLike, inputs: Inputs, option: str = "--output_file",
    replaces: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse an output file that is a link, a special file or a folder, that is one of `inputs` or holds one, that
    would replace a file of an input folder other than an earlier results file, or that would replace an existing
    file not of the kind the command writes (`replaces`, by default `is_results_file`). See the module's docstring."""
    output_file = Path(output_file)
    replaces = replaces or is_results_file
    for input_option, input_path in _input_paths(inputs):
        relation = _overlap(output_file, input_path)
        if relation == "lies inside" and not (output_file.is_file() and not replaces(output_file)):
            continue  # a new file in an input folder, or over a file of the kind the command writes
        if relation:
            raise ValueError(_conflict_message(option, output_file, relation, input_option, input_path))
        _refuse_shared_files(output_file, option, input_option, input_path)
    _refuse_link_or_special(output_file, option)
    if output_file.is_dir():
        raise IsADirectoryError(f"{option} {output_file} is a folder; give the name of a file to write.")
    if output_file.exists() and not replaces(output_file):
        raise FileExistsError(
            f"{option} {output_file} exists and is not a file this command writes: it is not replaced. Choose "
            "another name, or move that file away."
        )


def check_replaceable(output_dir: PathLike, option: str = "--output_dir", overwrite: bool = False,
                      folders: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> None:
    """An existing output folder that is not empty is refused, unless `overwrite` (the command's
    `--overwrite_output_dir`), and then only if everything in it is a regular file this project writes
    (`PROJECT_FILES`), or one of the subfolders the command writes (`folders`: a Space's `model/` and `vaswani/`),
    holding such files only, in folders of their own or Python's `__pycache__`; `files`: more name patterns the
    command writes (the GPU suite's wheels): a link, a special file or any other file or folder is the user's, and
    named."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir() or output_dir.is_symlink():
        return
    entries = sorted(path for path in output_dir.iterdir() if path.name != LOCK_FILE)
    if entries and not overwrite:
        raise FileExistsError(
            f"{option} {output_dir} exists and is not empty ({_some(entries)}). Choose a new or empty folder, or "
            "replace what this project wrote there with --overwrite_output_dir."
        )
    for path in entries:
        foreign = _not_written_here(path, False, files) if path.name not in folders else next(
            (inner for inner in sorted(path.rglob("*")) if _not_written_here(inner, True, files)), None)
        if foreign:
            foreign = path if foreign is True else foreign
            raise FileExistsError(
                f"{option} {output_dir} holds {foreign.relative_to(output_dir)} ({path_kind(foreign)}), which is not "
                "a file this project writes: --overwrite_output_dir replaces only those. Move it away, or choose "
                "another folder."
            )


def _not_written_here(path: Path, in_subfolder: bool, files: tuple[str, ...] = ()) -> bool:
    """Whether `path` is not what this project writes into a folder it publishes (see `check_replaceable`)."""
    kind = path_kind(path)
    if kind == "a folder":
        return not in_subfolder
    if kind != "a file":
        return True
    patterns = (*PROJECT_FILES, *files, *(("*.pyc",) if in_subfolder else ()))
    return not any(fnmatch(path.name, pattern) for pattern in patterns)


def _some(paths: list[Path]) -> str:
    names = [path.name for path in paths[:3]]
    return ", ".join(names) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def path_kind(path: Path) -> str:
    """`a file`, `a folder`, `a symbolic link to X`, `a character device`, ...: what is at `path` (not followed)."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    if stat.S_ISDIR(mode):
        return "a folder"
    for test, name in SPECIAL_KINDS:
        if test(mode):
            return name
    return "a file"


def _refuse_link_or_special(path: Path, option: str) -> None:
    """A command writes at the path it is given: not through a link, never over a device node, a FIFO or a socket
    (a rename would replace the system's /dev/null, or the pipe a reader waits on)."""
    if not os.path.lexists(path):
        return
    kind = path_kind(path)
    if kind.startswith("a symbolic link"):
        raise ValueError(
            f"{option} {path} is {kind}: a command writes its outputs at the path given, never through a link, and "
            f"never deletes or replaces one. Give the path itself ({path.resolve()}) or remove the link."
        )
    if kind not in ("a file", "a folder"):
        raise ValueError(
            f"{option} {path} is {kind}, not a regular file or folder: nothing is written there. Give the path of "
            "a file or folder."
        )


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


def _files(root: Path) -> Iterator[Path]:
    """`root` if it is a file, else the files under it (links followed to their files, not into folders), at most
    MOST_FILES_COMPARED."""
    if not root.is_dir():
        if root.exists():
            yield root
        return
    count = 0
    for folder, _, names in os.walk(root.resolve()):
        for name in names:
            yield Path(folder) / name
            count += 1
            if count >= MOST_FILES_COMPARED:
                return


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:  # a dangling link, a file removed meanwhile
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def _refuse_shared_files(output: Path, option: str, input_option: str, input_path: Path) -> None:
    """Output and input apart as paths, but one file in both: a file of the input that is a link into the output
    (or the same file under two names), or a file of the output that is a link into the input. Writing the output
    would replace or alter it, or deleting the output would leave the input's link dangling."""
    output_root = output.resolve()
    inputs = {}
    for path in _files(input_path):
        identity = _identity(path)
        if identity is not None:
            inputs.setdefault(identity, path)
        resolved = path.resolve()
        if resolved == output_root or output_root in resolved.parents:
            raise ValueError(_shared_message(option, output, input_option, input_path, path, resolved))
    for path in _files(output):
        identity = _identity(path)
        if identity in inputs:
            raise ValueError(_shared_message(option, output, input_option, input_path, inputs[identity], path))


def _shared_message(option, output, input_option, input_path, input_file, output_file) -> str:
    return (
        f"{option} {output} and {input_option} {input_path} share a file: {input_file} is {output_file} (through a "
        "symbolic or hard link): writing the output would delete or overwrite what the command reads. Choose an "
        f"{option} apart from its inputs, or copy the file instead of linking it."
    )


def _refuse_inside_a_run(output: Path, option: str) -> None:
    """An output inside what a training run manages: the run replaces `best/` and `last/`, prunes
    `checkpoints/step-*` (or the Trainer's `checkpoint-*`) keeping the newest by name, and reads `tokenizer/`."""
    resolved = output.resolve()
    for managed in (resolved, *resolved.parents):
        run_folder = managed.parent
        if managed == run_folder or not (run_folder / LOCK_FILE).is_file():
            continue
        if any(fnmatch(managed.name, pattern) for pattern in RUN_MANAGED):
            raise ValueError(
                f"{option} {output} lies inside {managed.name}/ of the training run in {run_folder} (it holds the "
                f"run's lock, {LOCK_FILE}): the run replaces and prunes what is there as its own. Choose a folder "
                "outside it (beside it in the run folder is fine, e.g. RUN/averaged)."
            )


def is_results_file(path: Path) -> bool:
    """Whether `path` is a results file of scripts/evaluate_model.py or scripts/extractive_baseline.py."""
    content = read_json_object(path)
    return content is not None and all(key in content for key in RESULTS_KEYS)


def read_json_object(path: Path) -> dict | None:
    """The JSON object a regular file of at most LARGEST_RESULTS_FILE bytes holds; None for anything else."""
    if not path.is_file() or path.is_symlink() or path.stat().st_size > LARGEST_RESULTS_FILE:
        return None
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return content if isinstance(content, dict) else None


def _conflict_message(option: str, output: Path, relation: str, input_option: str, input_path: Path) -> str:
    """One line: both options, both paths (and where links make them one, the resolved paths), what to do."""
    through_links = ""
    if any(path.resolve() != Path(os.path.abspath(path)) for path in (output, input_path)):
        through_links = f" (through symbolic links: {output.resolve()} and {input_path.resolve()})"
    return (
        f"{option} {output} {relation} {input_option} {input_path}{through_links}: writing there would delete or "
        f"overwrite what the command reads. Choose an {option} apart from its inputs."
    )


# --- one writer, and folders published whole -------------------------------------------------------------------


class OutputFolder:
    """A folder a command writes whole (an export, a Hub folder, an averaged model, a tokenizer, data pairs).

        with OutputFolder(args.output_dir, inputs, overwrite=args.overwrite_output_dir) as output:
            ...  # the work: loading, converting
            with output.publish() as folder:
                model.save_pretrained(folder)

    Entering checks the folder (`check_output_dir`, `check_replaceable`) and takes its lock (a file beside it, so
    that it holds while the folder is swapped); `publish` gives a temporary folder beside it, and when the block
    ends without an error, flushes it and renames it into place (an earlier folder, which `overwrite` allows to be
    replaced, is renamed aside first and deleted last). A failure leaves the folder as it was and removes the
    temporary one; a write that fails (a full disk) is one line naming the file."""

    def __init__(self, path: PathLike, inputs: Inputs, option: str = "--output_dir", overwrite: bool = False,
                 folders: tuple[str, ...] = (), files: tuple[str, ...] = ()):
        self.path, self.inputs, self.option, self.overwrite = Path(path), inputs, option, overwrite
        self.folders, self.files = folders, files  # the subfolders and files the command writes (`check_replaceable`)
        self.lock: int | None = None

    @property
    def lock_file(self) -> Path:
        return self.path.parent / f".{self.path.name}.lock"

    def __enter__(self) -> "OutputFolder":
        check_output_dir(self.path, self.inputs, self.option)
        check_replaceable(self.path, self.option, self.overwrite, self.folders, self.files)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock, _ = take_output_dir(self.path, lock_file=self.lock_file, option=self.option)
        try:  # again, now that no other command of this project can change it
            check_replaceable(self.path, self.option, self.overwrite, self.folders, self.files)
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._release()

    def _release(self) -> None:
        if self.lock is not None:
            release_output_dir(self.lock, remove=self.lock_file)
            self.lock = None

    @contextmanager
    def publish(self) -> Iterator[Path]:
        """The temporary folder to write into; published when the block ends (see the class's docstring)."""
        staging = self._aside("partial")
        staging.mkdir()
        try:
            try:
                yield staging
                fsync_tree(staging)
            except Exception as error:
                if not is_write_failure(error):
                    raise
                raise OSError(self._write_failure(error, staging)) from None
            self._swap_in(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _aside(self, purpose: str) -> Path:
        return self.path.with_name(f".{self.path.name}.{purpose}-{os.getpid()}-{secrets.token_hex(4)}")

    def _swap_in(self, staging: Path) -> None:
        retired = None
        if os.path.lexists(self.path):
            _refuse_link_or_special(self.path, self.option)
            check_replaceable(self.path, self.option, self.overwrite, self.folders, self.files)
            if any(self.path.iterdir()):
                retired = self._aside("replaced")
                self.path.rename(retired)
            else:
                self.path.rmdir()
        try:
            staging.rename(self.path)
        except BaseException:
            if retired is not None and not os.path.lexists(self.path):
                retired.rename(self.path)
            raise
        fsync_directory(self.path.parent)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)

    def _write_failure(self, error: BaseException, staging: Path) -> str:
        file = _file_written(error, staging)
        before = "is as it was" if os.path.lexists(self.path) else "was not created"
        return (
            f"{self.option} {self.path}: could not write {file.name if file else 'its files'}: "
            f"{_reason(error, staging)}. Nothing was published: {self.path} {before}, and the partial "
            "folder is removed. Free disk space (or make the folder writable), then run the command again."
        )


def _file_written(error: BaseException, folder: Path) -> Path | None:
    """The file a failed write was writing: the one the error names, else the file of `folder` changed last (a
    write cut by a full disk names no file)."""
    named = getattr(error, "filename", None)
    if named:
        return Path(named)
    files = [path for path in folder.rglob("*") if path.is_file()]
    return max(files, key=lambda path: path.stat().st_mtime_ns) if files else None


def _reason(error: BaseException, folder: Path) -> str:
    """Why a write failed, without the temporary path an OSError names."""
    if isinstance(error, OSError) and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return describe_write_error(error, folder)


def write_atomically(path: PathLike, write: Callable[[Path], None], option: str | None = None) -> Path:
    """Write the file at `path` so that a reader never finds it half written (see the module's docstring): `write`
    writes the content to the temporary file it is given, which is then flushed and renamed over `path`. Refused
    where `path` is a link or anything but a regular file; a write that fails (a full disk) leaves `path` as it was,
    removes the temporary file, and is one line naming the file (and `option`, where given)."""
    path = Path(path)
    _refuse_link_or_special(path, option or "the output file")
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own for each writer; created by os.open so that the file gets the usual (umask) permissions
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(temporary)
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        _refuse_link_or_special(path, option or "the output file")  # again: it may have changed meanwhile
        os.replace(temporary, path)
    except Exception as error:
        temporary.unlink(missing_ok=True)
        if not is_write_failure(error) or isinstance(error, (ValueError, IsADirectoryError)):
            raise
        named = f"{option} {path}" if option else str(path)
        raise OSError(
            f"could not write {named}: {_reason(error, path.parent)}. The file is as it was (the "
            "partial file is removed). Free disk space (or make the folder writable), then run the command again."
        ) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def write_text_atomically(path: PathLike, text: str, option: str | None = None) -> Path:
    """`write_atomically` of `text` (UTF-8)."""
    return write_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"), option)


def fsync_tree(folder: Path) -> None:
    """Push the folder's files to the disk before the rename that publishes them (a kill alone would not lose
    them, a power cut could)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_directory(folder)


def fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# How torch.save reports a failed write: a RuntimeError from its zip writer (PytorchStreamWriter), whose message
# names no cause ("[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 534" on a full disk, raised while
# handling "basic_ios::clear: iostream error"; "PytorchStreamWriter failed writing file data/0: file write failed" in
# other versions)
TORCH_WRITE_FAILURES = ("PytorchStreamWriter", "inline_container.cc", "iostream error", "file write failed")


def is_write_failure(error: BaseException) -> bool:
    """Whether `error` says that a file could not be written (rather than a bug to show with its traceback)."""
    if isinstance(error, (OSError, SafetensorError)):
        return True
    return isinstance(error, RuntimeError) and any(
        marker in str(cause) for cause in (error, error.__context__) for marker in TORCH_WRITE_FAILURES
    )


def describe_write_error(error: BaseException, folder: Path) -> str:
    """One line for a failed write into `folder`; torch's own message names no cause, so the space left on that disk
    (before the temporary files go) is added."""
    if isinstance(error, (OSError, SafetensorError)):
        return str(error)
    lines = str(error).strip().splitlines()
    try:
        free = f"{shutil.disk_usage(folder if folder.exists() else folder.parent).free:,} bytes left on that disk"
    except OSError:
        free = "free space unknown"
    return f"torch could not write a file ({lines[0] if lines else type(error).__name__}; {free})"


__all__ = [
    "Inputs",
    "OutputFolder",
    "PROJECT_FILES",
    "check_output_dir",
    "check_output_file",
    "check_replaceable",
    "describe_write_error",
    "fsync_directory",
    "fsync_tree",
    "is_results_file",
    "is_write_failure",
    "path_kind",
    "read_json_object",
    "write_atomically",
    "write_text_atomically",
]
