"""What a command wrote, and the proof of it: the manifest a folder it writes carries, what a folder must hold before
anything in it is replaced or deleted, and a swap of two folders in one step.

**The manifest.** Every folder a command publishes whole (`vaswani.output_paths.OutputFolder`: the exports, Hub
folders, averaged models, tokenizers, data pairs) and every folder train.py writes (`best/`, `last/`, `tokenizer/`,
`checkpoints/step-*`) carries `.vaswani-manifest.json`: the command that wrote it, a random token, and each file's
path, size and (but in a checkpoint) SHA-256. It is there from the folder's first instant (`start_manifest`:
`"complete": false`, the mark by which a later command knows an unfinished folder for its own leftover) and written
whole last, before the rename that publishes the folder (`write_manifest`).

**What may be replaced** (`foreign_entry`). A folder is this project's to replace or delete only when every entry in
it is proven to be:

- a file its manifest lists, with the size and SHA-256 listed: a file edited since is the user's;
- or a file this project writes, recognised by its content wherever it came from (`own_by_content`): a code file
  byte for byte one of the installed package's (the copies a model folder carries), a results file of
  scripts/evaluate_model.py, Python's compiled `__pycache__/*.pyc`;
- in a folder of an earlier version, which has no manifest, only what a model or tokenizer folder of this project
  holds, checked by content (`legacy_problem`): config.json of model_type "vaswani" or a VaswaniTokenizer's
  tokenizer_config.json, and nothing but the files save_pretrained, a model card and an evaluation write there
  (JSON objects, safetensors headers, a card of this project, code files identical to the package's).

Anything else (a file not listed, a link, a special file, a folder in which no listed file lies) is named
(`Foreign`), and nothing is replaced.

**The swap** (`exchange`). Linux's renameat2(RENAME_EXCHANGE) swaps two paths in one step, so that a path holds the
old folder or the new one at every instant; where the C library or the file system lacks it, the callers fall back
to two renames, recorded first so that the next command on the path completes or rolls back a swap cut between them.
"""

import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path


MANIFEST_FILE = ".vaswani-manifest.json"
MANIFEST_FORMAT = "vaswani-manifest/1"
LARGEST_MANIFEST = 64 * 1024 * 1024  # bytes; a larger file is not read as a manifest
LARGEST_RESULTS_FILE = 16 * 1024 * 1024  # bytes; a larger file is not read to find out whether it is a results file
RESULTS_KEYS = ("metrics", "conventions")  # what marks a results file (vaswani.evaluation.scoring.write_results)
SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)
# What save_pretrained (model and tokenizer), a model card and an evaluation write into a model or tokenizer folder:
# what a folder of an earlier version, without a manifest, may hold (each file checked by its content)
LEGACY_JSON_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "model.safetensors.index.json", "checkpoint_averaging.json",
)
LEGACY_WEIGHTS = re.compile(r"^model(-\d{5}-of-\d{5})?\.safetensors$")
CARD_MARKERS = ("library_name: transformers", "- vaswani")  # in the front matter of every card this project writes
OWN_MODEL_TYPE, OWN_TOKENIZER_CLASS = "vaswani", "VaswaniTokenizer"


# --- what a path is -------------------------------------------------------------------------------------------


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


def is_plain_folder(path: Path) -> bool:
    """A folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def read_json_object(path: Path, largest: int = LARGEST_RESULTS_FILE) -> dict | None:
    """The JSON object a regular file of at most `largest` bytes holds; None for anything else."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode) or found.st_size > largest:
        return None
    try:
        content = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return content if isinstance(content, dict) else None


def is_results_file(path: Path) -> bool:
    """Whether `path` is a results file of scripts/evaluate_model.py or scripts/extractive_baseline.py."""
    content = read_json_object(path)
    return content is not None and all(key in content for key in RESULTS_KEYS)


# --- the manifest -------------------------------------------------------------------------------------------------


def command_line() -> str:
    return " ".join(sys.argv)[:500]


def writer_name() -> str:
    """The command writing, as a manifest names it: its script's name (`export_onnx.py`), or where the code runs
    otherwise (a test, a notebook) "a command of this project"."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.endswith(".py") and not name.startswith("__") else "a command of this project"


def start_manifest(folder: Path, written_by: str | None = None, token: str | None = None,
                   kind: str | None = None) -> str:
    """Mark a folder being written as this project's from its first instant: a manifest listing nothing yet,
    `"complete": false` (`kind`: what the folder is, for the command that reads it). Returns its token."""
    token = token or secrets.token_hex(8)
    _write_record(folder, {"format": MANIFEST_FORMAT, "written_by": written_by or writer_name(),
                           "command": command_line(), "token": token, "complete": False, "files": {},
                           **({"kind": kind} if kind else {})})
    return token


def write_manifest(folder: Path, written_by: str | None = None, token: str | None = None, hashes: bool = True,
                   kind: str | None = None) -> dict:
    """List every file under `folder` (its path, size and, with `hashes`, SHA-256) in its manifest, written last,
    before the folder is published. Returns the record."""
    folder = Path(folder)
    files = {}
    for path in _files_under(folder):
        relative = path.relative_to(folder).as_posix()
        if relative == MANIFEST_FILE:
            continue
        entry = {"size": path.stat().st_size}
        if hashes:
            entry["sha256"] = sha256_of(path)
        files[relative] = entry
    record = {"format": MANIFEST_FORMAT, "written_by": written_by or writer_name(), "command": command_line(),
              "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "token": token or secrets.token_hex(8),
              "complete": True, "files": files, **({"kind": kind} if kind else {})}
    _write_record(folder, record)
    return record


def _write_record(folder: Path, record: dict) -> None:
    path = Path(folder) / MANIFEST_FILE
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=1) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_manifest(folder: Path) -> dict | None:
    """The manifest of `folder` as written here, checked field by field; None where there is none (or not one of
    this project's)."""
    record = read_json_object(Path(folder) / MANIFEST_FILE, largest=LARGEST_MANIFEST)
    if record is None or record.get("format") != MANIFEST_FORMAT or not isinstance(record.get("token"), str):
        return None
    files = record.get("files")
    if not isinstance(files, dict):
        return None
    for name, entry in files.items():
        if (not isinstance(entry, dict) or not isinstance(entry.get("size"), int)
                or not isinstance(entry.get("sha256", ""), str) or name.startswith("/") or ".." in name.split("/")):
            return None
    return record


def token_of(folder: Path) -> str | None:
    """The token of the manifest `folder` carries (complete or not), None without one."""
    record = read_manifest(folder) if is_plain_folder(folder) else None
    return record["token"] if record else None


_DIGESTS: dict[tuple, str] = {}  # (device, inode, size, mtime, ctime) -> SHA-256: a folder checked twice is read once


def sha256_of(path: Path) -> str:
    found = os.stat(path)
    key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _files_under(folder: Path) -> list[Path]:
    """The regular files under `folder`, links not followed."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append(path)
    return sorted(found)


# --- what may be replaced -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Foreign:
    """Something in a folder that this project cannot prove it wrote: its path and why, in words that follow
    "`path` (its kind), which ..."."""

    path: Path
    why: str

    def kind(self) -> str:
        try:
            return path_kind(self.path)
        except OSError:
            return "gone"


def foreign_entry(
    folder: Path, hashes: bool = True, ignore: tuple[str, ...] = (), sizes: bool = True,
) -> Foreign | None:
    """The first entry under `folder` that this project cannot prove it wrote (see the module's docstring), None
    when every one is proven. `hashes`, `sizes`: compare the SHA-256 and the size the manifest lists (a checkpoint's
    files are compared by name only: one damaged is still the run's); `ignore`: names at the top that are not
    counted (a run's lock)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        return legacy_problem(folder, ignore)
    listed, writer = manifest["files"], manifest.get("written_by") or "the command"
    listed_folders = {parent for name in listed for parent in _parents(name)}
    where = f"the folder's {MANIFEST_FILE}, the record of what {writer} wrote there"
    for root, folders, names in os.walk(folder):
        root = Path(root)
        for name in sorted(folders):
            path = root / name
            relative = path.relative_to(folder).as_posix()
            if root == folder and name in ignore:
                folders.remove(name)
                continue
            if not is_plain_folder(path):
                return Foreign(path, "is not a file this project writes")
            if relative not in listed_folders and name != "__pycache__":
                return Foreign(path, f"is not a file this project writes (nothing in it is in {where})")
        for name in sorted(names):
            path = root / name
            relative = path.relative_to(folder).as_posix()
            if relative == MANIFEST_FILE or (root == folder and name in ignore):
                continue
            if path_kind(path) != "a file":
                return Foreign(path, "is not a file this project writes")
            entry = listed.get(relative)
            if entry is not None:
                same = ((not sizes or path.stat().st_size == entry["size"])
                        and (not hashes or "sha256" not in entry or sha256_of(path) == entry["sha256"]))
                if same or own_by_content(path):
                    continue
                return Foreign(path, f"was changed after {writer} wrote it (its size or SHA-256 is not the one {where} "
                                     "lists)")
            if not own_by_content(path):
                return Foreign(path, f"is not a file this project writes (it is not in {where})")
    return None


def _parents(relative: str) -> list[str]:
    parts = relative.split("/")[:-1]
    return ["/".join(parts[: index + 1]) for index in range(len(parts))]


def own_by_content(path: Path) -> bool:
    """Whether the regular file at `path` is, by its content, one this project writes into a folder whatever wrote
    it: a code file identical to the installed package's of that name, a results file, a compiled module in
    `__pycache__`."""
    if path.parent.name == "__pycache__":
        return path.suffix == ".pyc"
    if path.suffix == ".py":
        shipped = package_code_files().get(path.name)
        return shipped is not None and _same_bytes(path, shipped)
    if path.suffix == ".json":
        return is_results_file(path)
    return False


def package_code_files() -> dict[str, Path]:
    """The code files a model folder of this project carries (`save_pretrained` copies them), by name:
    `modeling_vaswani.code_files_to_ship()`, the package's `remote_code/` folder."""
    from ..remote_code.modeling_vaswani import code_files_to_ship  # the files a saved model carries sit below every room

    return {path.name: path for path in code_files_to_ship()}


def _same_bytes(first: Path, second: Path) -> bool:
    try:
        if first.stat().st_size != second.stat().st_size:
            return False
        return first.read_bytes() == second.read_bytes()
    except OSError:
        return False


def legacy_problem(folder: Path, ignore: tuple[str, ...] = ()) -> Foreign | None:
    """A folder without a manifest (an earlier version's, or not this project's at all): the first entry that is not
    what a model or tokenizer folder of this project holds, checked by content; None when every one is."""
    folder = Path(folder)
    entries = sorted(path for path in folder.iterdir() if path.name not in ignore)
    config = read_json_object(folder / "config.json")
    tokenizer_config = read_json_object(folder / "tokenizer_config.json")
    ours = ((config or {}).get("model_type") == OWN_MODEL_TYPE
            or (tokenizer_config or {}).get("tokenizer_class") == OWN_TOKENIZER_CLASS)
    if not ours:
        for path in entries:
            if not (path_kind(path) == "a file" and own_by_content(path)):
                return Foreign(path, f"is not a file this project writes (the folder holds no {MANIFEST_FILE}, the "
                                     "record of what a command of this project wrote there, and is not a model or "
                                     "tokenizer folder of this project)")
        return None
    for path in entries:
        why = _legacy_file_problem(path)
        if why is not None:
            return Foreign(path, f"{why} (the folder holds no {MANIFEST_FILE}: it was written by an earlier version, "
                                 "whose model folders are replaced only when they hold nothing else)")
    return None


def _legacy_file_problem(path: Path) -> str | None:
    """Why `path`, in a model or tokenizer folder of an earlier version, is not what this project writes there."""
    kind = path_kind(path)
    if kind == "a folder" and path.name == "__pycache__":
        inner = [inner for inner in path.iterdir()]
        if all(path_kind(one) == "a file" and one.suffix == ".pyc" for one in inner):
            return None
    if kind != "a file":
        return "is not a file this project writes"
    name = path.name
    if own_by_content(path):
        return None
    if name.endswith(".py"):
        return "is not a code file of this version of the project (it differs from the package's, or is not one)"
    if name in LEGACY_JSON_FILES:
        return None if read_json_object(path, largest=LARGEST_MANIFEST) is not None else (
            "is not the JSON object this project writes there")
    if LEGACY_WEIGHTS.match(name):
        return None if _is_safetensors(path) else "is not a safetensors file"
    if name == "README.md":
        return None if _is_model_card(path) else "is not a model card of this project"
    return "is not a file this project writes"


def _is_safetensors(path: Path) -> bool:
    """A safetensors file by its header: an 8-byte length, then that many bytes of a JSON object."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length <= 0 or length > min(size - 8, 100 * 1024 * 1024):
                return False
            header = json.loads(handle.read(length).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(header, dict)


def _is_model_card(path: Path) -> bool:
    """A model card of this project: front matter naming transformers and the `vaswani` tag."""
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(65536)
    except (OSError, UnicodeDecodeError):
        return False
    if not head.startswith("---\n") or "\n---" not in head[4:]:
        return False
    front_matter = head[4 : head.index("\n---", 4)]
    return all(marker in front_matter.splitlines() for marker in CARD_MARKERS)


# --- a swap in one step -----------------------------------------------------------------------------------------

AT_FDCWD = -100  # fcntl.h: paths relative to the working directory
RENAME_EXCHANGE = 2  # linux/fs.h
UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def exchange(first: Path, second: Path) -> bool:
    """Swap the two paths (both exist) in one step: renameat2(RENAME_EXCHANGE), through ctypes. False, nothing done,
    where the system lacks it (not Linux, a C library without renameat2, a file system that refuses the flag);
    any other failure raises OSError."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


__all__ = [
    "Foreign",
    "MANIFEST_FILE",
    "command_line",
    "exchange",
    "foreign_entry",
    "is_plain_folder",
    "is_results_file",
    "legacy_problem",
    "own_by_content",
    "path_kind",
    "read_json_object",
    "read_manifest",
    "sha256_of",
    "start_manifest",
    "token_of",
    "write_manifest",
    "writer_name",
]
