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
     earlier results file: `evaluation_results.json`, which `scripts/evaluate_model.py` writes into the model
     folder by default); anywhere, an existing file is replaced only if it is of the kind the command writes (`replaces`);
   - an output folder inside what a training run manages (its `checkpoints/`, `best/`, `last/`, `tokenizer/`, or a
     fine-tuning run's `checkpoint-*`) is refused: the run would replace or prune it as its own, or keep it in place
     of its own checkpoints; and so is an output file inside a run's `checkpoints/` or `checkpoint-*` (pruned with
     the checkpoint). A folder is known as a run's by its lock or by the records it keeps in sight (`run_evidence`:
     `arguments.json`, `trainer_state.json`, a checkpoint's `training_progress.json`), so also when it was copied
     without its dotfiles;
   - an existing output folder is refused unless the command replaces it (`--overwrite_output_dir`), and then only
     if everything in it is proven to be what this project wrote (`check_replaceable`: the folder's manifest, which
     lists each file with its size and SHA-256, or an earlier version's model or tokenizer folder checked by content:
     `vaswani.runs.manifests`): a file of the user's there, or one changed since, is named.

2. **One writer.** A folder is written by one process at a time: train.py and the fine-tuning scripts hold
   `vaswani.runs.ownership`'s lock in the folder (`.run.lock`), a folder published whole holds the same lock on a
   file beside it (`.NAME.lock`, removed when the command ends, unless it records what the next command on the path
   must put right), taken before any work (`OutputFolder`). A second command on the same folder is refused, naming
   the first.

3. **Published whole.** A folder is written into a temporary folder beside it (`.NAME.partial-*`, marked as this
   project's from its first instant), listed in its manifest (`.vaswani-manifest.json`), flushed to disk, and
   swapped into place in one step (`OutputFolder.publish`: renameat2's exchange; where the system lacks it, two
   renames, recorded first in the lock file). At every instant the path holds the earlier folder or the new one;
   the earlier one is deleted last. Whatever fails on the way (a full disk), the folder is as it was, or absent,
   never partly written: the temporary folder is removed and one line names the file that could not be written. A
   command killed on the way leaves its record in the lock file: the next command on the path removes the folder it
   was writing, or completes (or rolls back) the swap it had begun, in one line. A file is written the same way
   (`write_atomically`, `write_text_atomically`): a temporary file beside it, flushed, renamed over it with the
   permissions of the file it replaces, never over anything but a regular file; the temporary file of a write that
   was killed is removed by the next write of that file, in one line. A reader finds the old content or the new;
   two writers of one file each publish a whole file, the last rename wins.
"""

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

from safetensors import SafetensorError

from .runs import manifests
from .runs.manifests import (  # noqa: F401  (is_results_file, read_json_object, path_kind: this module's, as before)
    LARGEST_RESULTS_FILE,
    MANIFEST_FILE,
    RESULTS_KEYS,
    SPECIAL_KINDS,
    is_plain_folder,
    is_results_file,
    path_kind,
    read_json_object,
)
from .runs.ownership import LOCK_FILE, describe_holder, record_in_lock, release_output_dir, take_output_dir


PathLike = str | os.PathLike
Inputs = Mapping[str, PathLike | Iterable[PathLike] | None]  # option -> its path(s); None where it is unset
MOST_FILES_COMPARED = 100_000  # files of an input or an existing output compared one by one; beyond, folders only
# What a training run manages inside its folder (replaces or prunes as its own): train.py's and the Trainer's; and
# where it keeps its checkpoints, into which no other command writes, not even a file.
RUN_MANAGED = ("checkpoints", "best", "last", "tokenizer", "checkpoint-*")
RUN_CHECKPOINTS = ("checkpoints", "checkpoint-*")
# The records by which a folder is known as a training run's, lock or not (a run folder copied without its dotfiles
# is still one): train.py's and the fine-tuning scripts' options, the Trainer's progress, a checkpoint's progress.
RUN_RECORDS = ("arguments.json", "trainer_state.json", "checkpoints/step-*/training_progress.json",
               "checkpoint-*/trainer_state.json")


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
    _refuse_inside_a_run(output_file, option, RUN_CHECKPOINTS)  # a checkpoint pruned would take the file with it
    if output_file.exists() and not replaces(output_file):
        raise FileExistsError(
            f"{option} {output_file} exists and is not a file this command writes: it is not replaced. Choose "
            "another name, or move that file away."
        )


def check_replaceable(output_dir: PathLike, option: str = "--output_dir", overwrite: bool = False) -> None:
    """An existing output folder that is not empty is refused, unless `overwrite` (the command's
    `--overwrite_output_dir`), and then only if everything in it is proven to be what this project wrote there
    (`vaswani.runs.manifests.foreign_entry`: its manifest, or an earlier version's model or tokenizer folder checked
    by content); anything else (a file of the user's, one changed since, a link, a subfolder) is named."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir() or output_dir.is_symlink():
        return
    entries = sorted(path for path in output_dir.iterdir() if path.name != LOCK_FILE)
    if entries and not overwrite:
        raise FileExistsError(
            f"{option} {output_dir} exists and is not empty ({_some(entries)}). Choose a new or empty folder, or "
            "replace what this project wrote there with --overwrite_output_dir."
        )
    foreign = manifests.foreign_entry(output_dir, ignore=(LOCK_FILE,)) if entries else None
    if foreign is not None:
        raise FileExistsError(
            f"{option} {output_dir} holds {foreign.path.relative_to(output_dir)} ({foreign.kind()}), which "
            f"{foreign.why}: --overwrite_output_dir replaces only what this project wrote. Move it away, or choose "
            "another folder."
        )


def _some(paths: list[Path]) -> str:
    names = [path.name for path in paths[:3]]
    return ", ".join(names) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


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


def _refuse_inside_a_run(output: Path, option: str, managed_names: tuple[str, ...] = RUN_MANAGED) -> None:
    """An output inside what a training run manages (`managed_names`): the run replaces `best/` and `last/`, prunes
    `checkpoints/step-*` (or the Trainer's `checkpoint-*`) keeping the newest by name, and reads `tokenizer/`. A
    folder is known as a run's by its lock or by its visible records (`run_evidence`)."""
    resolved = output.resolve()
    for managed in (resolved, *resolved.parents):
        run_folder = managed.parent
        if managed == run_folder or not any(fnmatch(managed.name, pattern) for pattern in managed_names):
            continue
        evidence = run_evidence(run_folder)
        if evidence is not None:
            raise ValueError(
                f"{option} {output} lies inside {managed.name}/ of the training run in {run_folder} (it holds "
                f"{evidence}): the run replaces and prunes what is there as its own. Choose a place outside it "
                "(beside it in the run folder is fine, e.g. RUN/averaged)."
            )


def run_evidence(folder: Path) -> str | None:
    """What shows `folder` to be a training run's (train.py's or a fine-tuning script's), in words: its lock, or one
    of the records a run leaves in sight (`RUN_RECORDS`), so that a run folder copied without its dotfiles is still
    known as one; None for any other folder."""
    if (folder / LOCK_FILE).is_file():
        return f"the run's lock, {LOCK_FILE}"
    for pattern in RUN_RECORDS:
        found = next((path for path in sorted(folder.glob(pattern)) if path.is_file()), None)
        if found is not None:
            return f"the run's record {found.relative_to(folder)}"
    return None


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

    Entering checks the folder (`check_output_dir`, `check_replaceable`), takes its lock (a file beside it, so that
    it holds while the folder is swapped) and puts right what a command killed on this path left (`_recover`);
    `publish` gives a temporary folder beside it, marked as this project's from its first instant (a manifest that
    lists nothing yet), and when the block ends without an error, lists what was written in the folder's manifest,
    flushes it and swaps it into place (`_swap_in`). A failure leaves the folder as it was and removes the temporary
    one; a write that fails (a full disk) is one line naming the file.

    What is under way is recorded in the lock file (the temporary folder, the phase, the folder set aside), so that
    the next command on the path, finding the lock of a holder that died, completes or rolls back what it left, and
    says so in one line (`_recover`)."""

    def __init__(self, path: PathLike, inputs: Inputs, option: str = "--output_dir", overwrite: bool = False,
                 say: Callable[[str], None] | None = None):
        self.path, self.inputs, self.option, self.overwrite = Path(path), inputs, option, overwrite
        self.say = say or _say
        self.lock: int | None = None
        self.pending = False  # whether the lock file records something under way (kept when the lock is let go)

    @property
    def lock_file(self) -> Path:
        return self.path.parent / f".{self.path.name}.lock"

    def __enter__(self) -> "OutputFolder":
        check_output_dir(self.path, self.inputs, self.option)
        if not os.path.lexists(self.lock_file):  # (else, first what a command killed here left is put right)
            check_replaceable(self.path, self.option, self.overwrite)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        previous: dict = {}
        self.lock, _ = take_output_dir(self.path, lock_file=self.lock_file, option=self.option, previous=previous)
        try:  # what a killed command left; then the checks again, now that no other command can change the folder
            self._recover(previous)
            self._mention_unrecorded_leftovers()
            check_replaceable(self.path, self.option, self.overwrite)
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._release()

    def _release(self) -> None:
        if self.lock is not None:  # the lock file goes, unless it records what the next command must put right
            release_output_dir(self.lock, remove=None if self.pending else self.lock_file)
            self.lock = None

    def _record(self, pending: dict | None) -> None:
        if self.lock is not None:
            record_in_lock(self.lock, pending=pending)
            self.pending = pending is not None

    @contextmanager
    def publish(self) -> Iterator[Path]:
        """The temporary folder to write into; published when the block ends (see the class's docstring)."""
        staging, token = self._aside("partial"), secrets.token_hex(8)
        pending = {"staging": staging.name, "token": token, "phase": "writing"}
        self._record(pending)
        retired = None
        try:
            try:
                staging.mkdir()
                manifests.start_manifest(staging, token=token)
                yield staging
                manifests.write_manifest(staging, token=token)  # last: what the folder holds, as published
                fsync_tree(staging)
            except Exception as error:
                if not is_write_failure(error):
                    raise
                raise OSError(self._write_failure(error, staging)) from None
            retired = self._swap_in(staging, pending)
        finally:
            if is_plain_folder(staging):  # the unpublished folder, or after a swap the earlier one
                shutil.rmtree(staging, ignore_errors=True)
            left = [path for path in (staging, retired) if path is not None and os.path.lexists(path)]
            if left:  # recorded still: the next command on this path removes it
                self.say(f"Note: {self.option} {self.path}: {', '.join(path.name for path in left)} beside it could "
                         "not be removed; the next command on this path removes it, or remove it yourself.")
            else:
                self._record(None)

    def _aside(self, purpose: str) -> Path:
        return self.path.with_name(f".{self.path.name}.{purpose}-{os.getpid()}-{secrets.token_hex(4)}")

    def _swap_in(self, staging: Path, pending: dict) -> Path | None:
        """Put the staged folder in place of the earlier one, if any, so that the path holds one or the other at
        every instant: one exchange (the earlier folder then lies at `staging`, which `publish` removes), or where
        the system has no exchange, two renames recorded first (`_recover` completes them after a kill); returns
        the earlier folder's place in that case."""
        if not os.path.lexists(self.path):
            self._record({**pending, "phase": "swapping"})
            staging.rename(self.path)
            fsync_directory(self.path.parent)
            return None
        _refuse_link_or_special(self.path, self.option)
        check_replaceable(self.path, self.option, self.overwrite)
        self._record({**pending, "phase": "swapping"})
        if manifests.exchange(staging, self.path):
            fsync_directory(self.path.parent)
            return None
        retired = self._aside("replaced")
        self._record({**pending, "phase": "swapping", "retired": retired.name})
        self.path.rename(retired)
        try:
            staging.rename(self.path)
        except BaseException:
            if not os.path.lexists(self.path):
                retired.rename(self.path)
            raise
        fsync_directory(self.path.parent)
        shutil.rmtree(retired, ignore_errors=True)
        return retired

    def _recover(self, previous: dict) -> None:
        """Complete or roll back what a command killed on this path left (its lock file's record, `previous`), and
        say so in one line: a folder it was writing is removed; a swap it had begun is completed where the new folder
        is whole, else rolled back. Only the paths the record names, beside this folder, with the token it names
        inside, are touched."""
        pending = previous.get("pending")
        if not isinstance(pending, dict) or not isinstance(pending.get("token"), str):
            return
        staging = self._named(pending.get("staging"), "partial")
        retired = self._named(pending.get("retired"), "replaced")
        token = pending["token"]
        if staging is None:
            return
        self._record(pending)  # carried over: should this command be killed too, the next one finds it
        who = describe_holder(previous)
        said = f"Note: {self.option} {self.path}: a command killed while it was writing there ({who})"
        if pending.get("phase") != "swapping":
            if manifests.token_of(staging) == token:
                shutil.rmtree(staging)
                self.say(f"{said} left its unfinished folder {staging.name}: removed; {self.path} is as it was.")
            elif is_plain_folder(staging) and not any(staging.iterdir()):
                staging.rmdir()  # killed between its mkdir and its mark: empty
        elif manifests.token_of(self.path) == token:
            gone = [path for path in (staging, retired) if path is not None and is_plain_folder(path)]
            for path in gone:
                shutil.rmtree(path)
            if gone:
                self.say(f"{said} had put its new folder in place: the earlier one it set aside "
                         f"({', '.join(path.name for path in gone)}) is removed.")
        elif os.path.lexists(self.path):
            if manifests.token_of(staging) == token:
                shutil.rmtree(staging)
                self.say(f"{said} was cut before it swapped its new folder in: {self.path} is as it was, and the "
                         f"new folder ({staging.name}) is removed.")
        elif manifests.token_of(staging) == token and manifests.foreign_entry(staging) is None:
            staging.rename(self.path)
            fsync_directory(self.path.parent)
            if retired is not None and is_plain_folder(retired):
                shutil.rmtree(retired)
            self.say(f"{said} was cut between the two renames of its replace: completed; {self.path} holds the "
                     "folder it wrote" + (f", and the earlier one ({retired.name}) is removed." if retired else "."))
        elif retired is not None and is_plain_folder(retired):
            retired.rename(self.path)
            fsync_directory(self.path.parent)
            if is_plain_folder(staging):
                shutil.rmtree(staging)
            self.say(f"{said} was cut between the two renames of its replace, its new folder incomplete: rolled "
                     f"back; {self.path} holds the earlier folder again.")
        self._record(None)

    def _named(self, name, purpose: str) -> Path | None:
        """The path beside this folder that a lock's record names, if it is one this class makes for `purpose`."""
        if not isinstance(name, str) or not re.fullmatch(rf"\.{re.escape(self.path.name)}\.{purpose}-\d+-[0-9a-f]{{8}}",
                                                          name):
            return None
        return self.path.with_name(name)

    def _mention_unrecorded_leftovers(self) -> None:
        """Folders beside this one named as this class names its temporary and set-aside folders, that no record
        accounts for (an earlier version's, which kept none): named in one line, not touched, since nothing proves
        them this project's; with no folder in place, the set-aside one may be the earlier folder to move back."""
        pattern = re.compile(rf"\.{re.escape(self.path.name)}\.(partial|replaced)-\d+-[0-9a-f]{{8}}")
        found = sorted(path.name for path in self.path.parent.iterdir() if pattern.fullmatch(path.name))
        if not found:
            return
        back = next((name for name in found if ".replaced-" in name), None)
        advice = (f"{back} may be the earlier {self.path.name} (mv {self.path.parent / back} {self.path}); "
                  if back and not os.path.lexists(self.path) else "")
        self.say(f"Note: {self.option} {self.path}: beside it lie {', '.join(found)}, left by a command that was "
                 f"killed (an earlier version's, which kept no record of them): not touched. {advice}Remove them once "
                 "you no longer need them.")

    def _write_failure(self, error: BaseException, staging: Path) -> str:
        file = _file_written(error, staging)
        before = "is as it was" if os.path.lexists(self.path) else "was not created"
        return (
            f"{self.option} {self.path}: could not write {file.name if file else 'its files'}: "
            f"{_reason(error, staging)}. Nothing was published: {self.path} {before}, and the partial "
            "folder is removed. Free disk space (or make the folder writable), then run the command again."
        )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    writes the content to the temporary file it is given, which is then flushed and renamed over `path`, with the
    permissions of the file it replaces (a new file gets the usual ones, the umask's). Refused where `path` is a link
    or anything but a regular file; a write that fails (a full disk) leaves `path` as it was, removes the temporary
    file, and is one line naming the file (and `option`, where given). The temporary file of an earlier write of
    `path` that was killed is removed first, in one line (`_remove_killed_writes`)."""
    path = Path(path)
    _refuse_link_or_special(path, option or "the output file")
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_killed_writes(path)
    replaced = os.lstat(path) if os.path.lexists(path) else None
    # a name of its own for each writer, that proves it this project's; created by os.open so that a new file gets
    # the usual (umask) permissions; locked while it exists, so that no other writer takes it for a killed one's
    temporary = path.with_name(_temporary_name(path.name, f"{os.getpid()}-{secrets.token_hex(4)}"))
    held = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        write(temporary)
        if replaced is not None and stat.S_ISREG(replaced.st_mode):
            os.chmod(temporary, stat.S_IMODE(replaced.st_mode))  # a private results file stays private
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
    finally:
        os.close(held)
    fsync_directory(path.parent)
    return path


def _temporary_name(name: str, unique: str) -> str:
    """`.NAME.PID-RANDOM-CHECK.partial`: CHECK, a hash of the rest, marks the name as made here (no file of the
    user's is taken for a leftover because of its name alone)."""
    return f".{name}.{unique}-{_name_check(name, unique)}.partial"


def _name_check(name: str, unique: str) -> str:
    text = f"vaswani write_atomically {name} {unique}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(text).hexdigest()[:8]


def _remove_killed_writes(path: Path) -> None:
    """Remove the temporary files that writes of `path` killed before their rename left beside it (complete-looking
    copies that would stay forever), one line each: a regular file named by `_temporary_name` for this file, with its
    check, that no live writer holds locked."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.((\d+)-[0-9a-f]{{8}})-([0-9a-f]{{8}})\.partial")
    try:
        names = [entry.name for entry in os.scandir(path.parent) if entry.name.startswith(f".{path.name}.")]
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or match.group(3) != _name_check(path.name, match.group(1)):
            continue
        leftover = path.with_name(name)
        try:
            descriptor = os.open(leftover, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                continue
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a write under way
            leftover.unlink()
        except OSError:
            continue
        finally:
            os.close(descriptor)
        _say(f"Note: {path}: removed {name}, the unfinished copy a write of it left when it was killed (process "
             f"{match.group(2)}).")


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
    "MANIFEST_FILE",
    "OutputFolder",
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
    "run_evidence",
    "write_atomically",
    "write_text_atomically",
]
