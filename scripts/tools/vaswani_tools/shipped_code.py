"""The code of the models this project ships (results/NAME/model): one source, the package's `modeling/remote_code/`,
which every shipped folder holds a copy of, file for file, and whose card says which code it holds.

`refresh` copies the package's files into every shipped folder (a file of a name the package no longer has is
removed) and writes the card's line on its code: a content hash of the files and the commit whose
`modeling/remote_code/` holds exactly those files. `problems` says what differs (the suite runs it, so a change to the
carried code that was not refreshed fails there). A folder copied elsewhere (`cp -r`) holds real files, not links, and
loads with `trust_remote_code=True` on its own."""

import hashlib
import re
import subprocess
from pathlib import Path

from vaswani.remote_code.modeling_vaswani import code_files_to_ship


REPO = Path(__file__).resolve().parents[3]  # the checkout: scripts/tools/vaswani_tools/ is three folders down
SOURCE = "modeling/remote_code"  # the package's folder of carried code, relative to the checkout
CARD = "README.md"
# the card's line on its code (one line, which `refresh` writes and `problems` reads)
CODE_LINE = re.compile(r"^Code files: .*$", re.MULTILINE)
CODE_LINE_FORMAT = ("Code files: `{names}`, the package's `{source}/` of commit `{commit}` (sha256 of their names and "
                    "bytes in name order: `{digest}`; `python scripts/tools/refresh_shipped_code.py --check` "
                    "recomputes it).")
TRAINED_BY = "## Training procedure\n\n"


def shipped_folders(repo: Path = REPO) -> list[Path]:
    """Every model folder the checkout ships: results/NAME/model with a config."""
    return sorted(path.parent for path in (repo / "results").glob("*/model/config.json"))


def carried_files() -> dict[str, bytes]:
    """The package's carried files by name, their bytes."""
    return {path.name: path.read_bytes() for path in code_files_to_ship()}


def code_digest(files: dict[str, bytes]) -> str:
    """sha256 over each file's name and bytes, in name order (lengths included, so that no two sets collide)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode(), files[name]):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def _git(*arguments: str, repo: Path = REPO) -> str | None:
    try:
        done = subprocess.run(["git", *arguments], cwd=repo, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace").strip() if done.returncode == 0 else None


def committed_digest(commit: str, repo: Path = REPO) -> str | None:
    """The digest of `SOURCE` at `commit` (its `.py` files but `__init__.py`), or None where git cannot tell."""
    listing = _git("ls-tree", "--name-only", f"{commit}:{SOURCE}", repo=repo)
    if listing is None:
        return None
    files = {}
    for name in listing.splitlines():
        if name.endswith(".py") and name != "__init__.py":
            done = subprocess.run(["git", "show", f"{commit}:{SOURCE}/{name}"], cwd=repo, capture_output=True,
                                  timeout=60)
            if done.returncode != 0:
                return None
            files[name] = done.stdout
    return code_digest(files)


def source_commit(repo: Path = REPO) -> str:
    """The last commit that changed `SOURCE`, which must hold what the working tree holds there (commit the carried
    code first, then refresh: the card names a commit that has it)."""
    if _git("status", "--porcelain", "--", SOURCE, repo=repo):
        raise SystemExit(f"{SOURCE} has uncommitted changes: commit them first, so that the cards can name the commit "
                         "that holds the code they carry.")
    commit = _git("log", "-1", "--format=%H", "--", SOURCE, repo=repo)
    if not commit:
        raise SystemExit(f"git cannot tell which commit last changed {SOURCE} (not a git checkout?).")
    return commit


def code_line(files: dict[str, bytes], commit: str) -> str:
    return CODE_LINE_FORMAT.format(names="`, `".join(sorted(files)), source=SOURCE, commit=commit,
                                   digest=code_digest(files))


def with_code_line(card: str, line: str) -> str:
    """The card with its code line replaced, or added at the top of its training procedure."""
    if CODE_LINE.search(card):
        return CODE_LINE.sub(lambda _: line, card, count=1)
    if TRAINED_BY not in card:
        raise ValueError(f"The card has no '{TRAINED_BY.strip()}' section to put its code line in.")
    return card.replace(TRAINED_BY, TRAINED_BY + line + "\n\n", 1)


def refresh(folders: list[Path], repo: Path = REPO, commit: str | None = None) -> list[str]:
    """Copy the package's carried files into each folder and write each card's code line naming `commit` (default:
    the last commit that changed `SOURCE`, which must hold the working tree's code); what changed, a line each."""
    files, commit = carried_files(), commit or source_commit(repo)
    changes = []
    for folder in folders:
        for name, data in files.items():
            target = folder / name
            if not target.is_file() or target.read_bytes() != data:
                target.write_bytes(data)
                changes.append(f"{target.relative_to(repo)}: written")
        for stale in sorted(folder.glob("*.py")):
            if stale.name not in files:
                stale.unlink()
                changes.append(f"{stale.relative_to(repo)}: removed (the package carries no such file)")
        card = folder / CARD
        text = card.read_text(encoding="utf-8")
        updated = with_code_line(text, code_line(files, commit))
        if updated != text:
            card.write_text(updated, encoding="utf-8")
            changes.append(f"{card.relative_to(repo)}: code line")
    return changes


def problems(folders: list[Path], repo: Path = REPO, check_commit: bool = True) -> list[str]:
    """What differs between the shipped folders and the package: a carried file missing, other or extra, a card
    without its code line or whose digest is not the files'; with `check_commit`, a card naming a commit whose
    `SOURCE` holds other code (skipped where git cannot tell)."""
    files = carried_files()
    digest = code_digest(files)
    found = []
    digests: dict[str, str | None] = {}
    for folder in folders:
        where = folder.relative_to(repo)
        held = {path.name: path.read_bytes() for path in folder.glob("*.py")}
        found += [f"{where}/{name}: missing" for name in sorted(set(files) - set(held))]
        found += [f"{where}/{name}: not a file the package carries" for name in sorted(set(held) - set(files))]
        found += [f"{where}/{name}: differs from {SOURCE}/{name}" for name in sorted(set(files) & set(held))
                  if files[name] != held[name]]
        match = CODE_LINE.search((folder / CARD).read_text(encoding="utf-8"))
        if match is None:
            found.append(f"{where}/{CARD}: no 'Code files:' line")
            continue
        recorded = re.search(r"sha256 [^`]*`([0-9a-f]{64})`", match.group(0))
        if recorded is None or recorded.group(1) != digest:
            found.append(f"{where}/{CARD}: its code digest is not that of {SOURCE}'s files ({digest})")
        commit = re.search(r"of commit `([0-9a-f]{40})`", match.group(0))
        if check_commit and commit is not None:
            if commit.group(1) not in digests:
                digests[commit.group(1)] = committed_digest(commit.group(1), repo)
            if digests[commit.group(1)] not in (None, digest):
                found.append(f"{where}/{CARD}: commit {commit.group(1)[:12]} holds other code in {SOURCE}")
        elif commit is None:
            found.append(f"{where}/{CARD}: its code line names no commit")
    return found


__all__ = ["carried_files", "code_digest", "code_line", "problems", "refresh", "shipped_folders", "with_code_line"]
