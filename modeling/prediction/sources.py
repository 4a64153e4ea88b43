"""Reading a corpus one example at a time, in order, with no more than one record in memory: a text file (one example
a line), JSON Lines or CSV (the text in one column), a split of a Hub dataset, or standard input.

Each example is a string; an empty line of a text file is an example (an empty text, whose output is empty), a blank
line of JSON Lines holds no record and is passed over. A problem is one line
naming the input and the line: a line that is not valid UTF-8 (`errors="replace"` reads its bad bytes as U+FFFD and
counts them), a record that is not a JSON object, lacks the column or holds no text there, a record longer than
`MOST_RECORD_BYTES`. A binary file, a missing column in a CSV header or a Hub dataset, and a file that is not a regular
file (a folder, a FIFO) are refused when the source is opened, before any work (`open_source`).
"""

import csv
import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..output_paths import path_kind


MOST_RECORD_BYTES = 16 * 2**20  # a line or CSV field: a document to summarize is a few KB
SNIFFED_BYTES = 64 * 1024  # the start of a file looked at for NUL bytes (a binary file)
SUFFIX_FORMATS = {".jsonl": "jsonl", ".csv": "csv"}


@dataclass
class Counts:
    """What reading met on the way, reported at the end."""

    replaced: int = 0  # lines with bytes that were not UTF-8, read as U+FFFD (errors="replace")


@dataclass
class Source:
    """A corpus to read: `examples()` yields its texts in order, from the start, each time it is called (but once for
    standard input); `name` is how messages name it; `file` is the file read (None for stdin and the Hub), whose
    identity a resumed run checks."""

    name: str
    kind: str  # "text", "jsonl", "csv", "dataset"
    column: str | None = None
    file: Path | None = None
    errors: str = "strict"
    dataset: object = None
    counts: Counts = field(default_factory=Counts)

    @property
    def rereadable(self) -> bool:
        """Whether the corpus can be read again from the start (a resumed run skips what it did): not stdin."""
        return self.kind == "dataset" or self.file is not None

    def examples(self) -> Iterator[str]:
        self.counts = Counts()
        if self.kind == "dataset":
            yield from _dataset_texts(self.dataset, self.column, self.name)
            return
        lines = _lines(sys.stdin.buffer if self.file is None else open(self.file, "rb"), self.name)
        if self.kind == "csv":
            yield from self._csv_texts(lines)
        else:
            for number, raw in lines:
                if self.kind == "jsonl" and not raw.strip():
                    continue  # a blank line of JSON Lines holds no record
                text = self._decode(raw, number)
                yield _json_text(text, number, self.column, self.name) if self.kind == "jsonl" else text

    def check_first_example(self) -> None:
        """Read the first example of a file (its record, its column), so that a wrong format or --text_column is
        refused before any work; later examples are checked as they are read."""
        if self.file is not None and self.kind in ("jsonl", "csv"):
            next(iter(self.examples()), None)

    def count(self) -> int | None:
        """How many examples there are, where counting is cheap (a text file: its lines, read in blocks); None
        otherwise (the progress bar then shows no total)."""
        if self.kind == "dataset":
            return len(self.dataset)
        if self.kind not in ("text", "jsonl") or self.file is None:
            return None
        lines, last = 0, b"\n"
        with open(self.file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                lines += block.count(b"\n")
                last = block[-1:]
        return lines + (last != b"\n")

    def _decode(self, raw: bytes, number: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            if self.errors != "replace":
                raise ValueError(
                    f"{self.name}, line {number}: not valid UTF-8 (byte {raw[error.start]:#04x} at column "
                    f"{error.start + 1}). Convert the file to UTF-8, or pass --errors replace to read such bytes as "
                    "U+FFFD (counted at the end)."
                ) from None
            self.counts.replaced += 1
            return raw.decode("utf-8", errors="replace")

    def _csv_texts(self, lines: Iterator[tuple[int, bytes]]) -> Iterator[str]:
        numbers = []

        def text_lines():
            for number, raw in lines:
                numbers.append(number)
                yield self._decode(raw, number) + "\n"

        reader = csv.reader(text_lines())
        header = next(reader, None) or []
        position = header.index(self.column)  # checked when the source was opened
        for row in reader:
            if not row:
                continue  # csv's blank line: no record
            if len(row) <= position:
                raise ValueError(f"{self.name}, line {numbers[-1]}: the record has {len(row)} fields; "
                                 f"--text_column {self.column} is field {position + 1} of the header.")
            yield row[position]
            numbers.clear()


def _lines(handle, name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, the line's bytes without its end of line), at most MOST_RECORD_BYTES a line."""
    with handle:
        for number in range(1, 1 << 62):
            raw = handle.readline(MOST_RECORD_BYTES + 1)
            if not raw:
                return
            if len(raw) > MOST_RECORD_BYTES and not raw.endswith(b"\n"):
                raise ValueError(f"{name}, line {number}: longer than {MOST_RECORD_BYTES // 2**20} MiB; an example is "
                                 "one line of text (split the document, or check that the file is text).")
            if raw.endswith(b"\n"):
                raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
            yield number, raw


def _json_text(line: str, number: int, column: str, name: str) -> str:
    where = f"{name}, line {number}"
    try:
        record = json.loads(line)
    except RecursionError:
        raise ValueError(f"{where}: the JSON record is nested too deeply.") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not a JSON record ({error.msg} at column {error.colno}).") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a JSON {type(record).__name__}, not a record (an object with a {column!r} field).")
    if column not in record:
        shown = ", ".join(list(record)[:8])
        raise ValueError(f"{where}: no {column!r} field (it has {shown or 'none'}); name the text's field with "
                         "--text_column.")
    text = record[column]
    if text is None:
        return ""
    if not isinstance(text, str):
        raise ValueError(f"{where}: {column!r} holds a {type(text).__name__}, not text.")
    return text


def _dataset_texts(dataset, column: str, name: str) -> Iterator[str]:
    for number, text in enumerate(dataset[column] if len(dataset) < 10_000 else _rows(dataset, column), start=1):
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise ValueError(f"{name}, row {number}: {column!r} holds a {type(text).__name__}, not text.")
        yield text


def _rows(dataset, column: str) -> Iterator:
    for start in range(0, len(dataset), 10_000):
        yield from dataset[start : start + 10_000][column]


def open_source(input_file: str | None, input_format: str | None, column: str | None, errors: str = "strict",
                dataset_name: str | None = None, dataset_config_name: str | None = None,
                split: str = "test") -> Source:
    """The corpus the options name, checked before any work: a regular file that is not binary, a CSV header or a Hub
    dataset that has the column."""
    if dataset_name is not None:
        from ..data.loading import load_split, require_columns

        dataset = load_split(dataset_name, split, dataset_config_name)
        name = f"--dataset_name {dataset_name} ({split})"
        require_columns(dataset, [column], name)
        return Source(name, "dataset", column=column, dataset=dataset, errors=errors)
    kind = input_format or ("text" if input_file == "-" else SUFFIX_FORMATS.get(Path(input_file).suffix.lower(), "text"))
    if input_file == "-":
        if kind == "csv":
            raise ValueError("--input_format csv: standard input is read as text or jsonl; give a CSV file.")
        if kind == "jsonl" and not column:
            raise ValueError("--input_format jsonl: name the field that holds the text with --text_column.")
        return Source("standard input", kind, column=column, errors=errors)
    path = Path(input_file)
    name = f"--input_file {input_file}"
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{name}: no such file.")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise ValueError(f"{name} is {path_kind(path.resolve())}, not a regular file: give a file of examples, one a "
                         "line (or - for standard input).")
    with open(path, "rb") as handle:
        start = handle.read(SNIFFED_BYTES)
    if b"\0" in start:
        raise ValueError(f"{name} is a binary file (it holds NUL bytes), not text: give a text, JSON Lines or CSV "
                         "file.")
    if kind in ("jsonl", "csv") and not column:
        raise ValueError(f"{name} is {kind}: name the field that holds the text with --text_column.")
    if kind == "csv":
        _check_csv_header(path, column, name)
    return Source(name, kind, column=column, file=path, errors=errors)


def _check_csv_header(path: Path, column: str, name: str) -> None:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        header = next(csv.reader(io.StringIO(handle.readline(MOST_RECORD_BYTES))), [])
    if column not in header:
        raise ValueError(f"{name}: no column {column!r} in its header (it has {', '.join(header[:12]) or 'none'}); "
                         "name the text's column with --text_column.")


def file_identity(path: Path) -> dict:
    """What tells a resumed run that its input is the same file, unchanged: its size, modification time and inode."""
    found = os.stat(path)
    return {"path": str(path.resolve()), "size": found.st_size, "mtime_ns": found.st_mtime_ns, "inode": found.st_ino}


csv.field_size_limit(MOST_RECORD_BYTES)


__all__ = ["Counts", "MOST_RECORD_BYTES", "Source", "file_identity", "open_source"]
