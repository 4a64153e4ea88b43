"""Whether an output can be written where a command is told to write it, checked before any work: a command that
evaluates for an hour, or converts a model, and only then finds that its output cannot be written has lost that work.

`check_output_writable` refuses, in one line naming the option and the path:

- a name that the file system would refuse once the command's temporary name is added to it (a command writes a
  file or folder under a longer temporary name beside it first, then renames it into place: `vaswani.output_paths`);
  a name of 245 characters is valid, and its temporary name of 270 is not. A folder the command would create on the
  way is held to the file system's limit too, and the whole path to the system's;
- a folder it would be written into (or the nearest folder above it that exists, where the command creates the
  rest) that is not a folder, or that this process cannot write into: a read-only file system, a folder without
  write permission;
- a disk without room for what the command will write, where the command can say how much that is at least.

Whether the output may replace what is at its path, or overlaps the command's inputs, is `vaswani.output_paths`'s.
"""

import os
import shutil
from pathlib import Path


# The most characters a command adds to an output's name for what it writes beside it first (vaswani.output_paths:
# `.NAME.PID-HEX.partial` for a file, `.NAME.partial-PID-HEX`, `.NAME.replaced-PID-HEX` and `.NAME.lock` for a
# folder): a dot, a word of up to 9 characters, a process id of up to 7 digits, 8 hex digits and 3 separators,
# rounded up.
TEMPORARY_NAME_EXTRA = 32
NAME_MAX = 255  # where the file system does not say (os.pathconf)
PATH_MAX = 4096


def check_output_writable(path: str | os.PathLike, option: str, needed_bytes: int | None = None) -> None:
    """Refuse an output `path` (given as `option`) that could not be written, before the command does any work: see
    the module's docstring. `needed_bytes`: the least the command will write there, where it is known."""
    path = Path(path)
    absolute = Path(os.path.abspath(path))
    existing = _nearest_existing_folder(absolute, option, path)
    name_max = _name_max(existing)
    created = absolute.relative_to(existing).parts
    for index, part in enumerate(created):
        last = index == len(created) - 1
        length = len(os.fsencode(part))
        limit = name_max - TEMPORARY_NAME_EXTRA if last else name_max
        if length > limit:
            what = (f"its name is {length} bytes long, and the temporary name it is written under first adds up to "
                    f"{TEMPORARY_NAME_EXTRA}: more than the {name_max} this file system allows"
                    if last else f"the folder {part[:40]}... it would create has a name of {length} bytes, more than "
                    f"the {name_max} this file system allows")
            raise ValueError(f"{option} {path}: {what}. Give a name of at most {limit} bytes; nothing was done.")
    total = len(os.fsencode(str(absolute))) + TEMPORARY_NAME_EXTRA
    if total > PATH_MAX:
        raise ValueError(f"{option} {path}: the path is {total - TEMPORARY_NAME_EXTRA} bytes long, too long with the "
                         f"temporary name written first (the system allows {PATH_MAX}). Give a shorter path; nothing "
                         "was done.")
    problem = _unwritable(existing)
    if problem is not None:
        raise PermissionError(f"{option} {path}: {existing} {problem}: the output could not be written "
                              "there. Give a folder this process can write into; nothing was done.")
    if needed_bytes is not None:
        try:
            free = shutil.disk_usage(existing).free
        except OSError:
            return  # not known: left to the write
        if free < needed_bytes:
            raise OSError(f"{option} {path}: the disk of {existing} has {_in_units(free)} free, and "
                          f"the output needs at least {_in_units(needed_bytes)}. Free disk space, or write elsewhere; "
                          "nothing was done.")


def _nearest_existing_folder(absolute: Path, option: str, given: Path) -> Path:
    """The folder the output goes into, or the nearest one above it that exists (the command creates the rest)."""
    for folder in absolute.parents:
        if os.path.lexists(folder):
            try:
                if folder.is_dir():
                    return folder
            except OSError as error:  # a loop of symbolic links, a name too long
                raise OSError(f"{option} {given}: {folder}: {error.strerror}.") from None
            raise NotADirectoryError(f"{option} {given}: {folder} is not a folder, so nothing can "
                                     "be written under it. Give a path in a folder.")
    return Path(absolute.anchor)


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def _unwritable(folder: Path) -> str | None:
    """Why this process cannot create a file in `folder`, in words; None where it can."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except (OSError, AttributeError):
        pass
    if not os.access(folder, os.W_OK | os.X_OK):
        return "is not writable by this process (its permissions, or a read-only file system)"
    return None


def _in_units(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} bytes"


__all__ = ["TEMPORARY_NAME_EXTRA", "check_output_writable"]
