"""Loading text datasets for the scripts (local JSON Lines / JSON / CSV files, or a Hub dataset by name), and writing
the JSON Lines training and validation files of the scripts that make self-supervised pairs.

Every script names its data as transformers' example scripts do: local files with `--train_file`, `--validation_file`
or `--test_file`, a dataset on the Hub with `--dataset_name` (and `--dataset_config_name`). `data_source` checks that
each split comes from exactly one of them, and that each is what its option says, before anything is loaded.

Errors name what is wrong: the file and line of a broken record, the missing column and the columns there are.
"""

import csv
import json
import os
import reprlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import datasets

from ..remote_code.configuration_vaswani import json_nesting_depth, special_kind
from ..remote_code.loading_checks import cpu_memory_available
from ..output_paths import path_kind


LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv"}


def is_local(dataset: str) -> bool:
    return any(Path(part).exists() for part in split_paths(dataset))


def split_paths(dataset: str) -> list[str]:
    """Several local files may be given at once, separated by commas; a path that is there as given, commas and
    all (`a,b.jsonl`), is one file."""
    if "," in dataset and os.path.lexists(dataset.strip()):
        return [dataset.strip()]
    return [part.strip() for part in dataset.split(",") if part.strip()]


def looks_like_hub_dataset(name: str) -> bool:
    """A Hub dataset id ("multi30k", "bentrevett/multi30k") rather than a path to local files."""
    return (
        not Path(name).exists()
        and name.count("/") <= 1
        and not name.startswith((".", "/", "~"))
        and not name.lower().endswith(tuple(LOCAL_FORMATS))
        and "," not in name
    )


HUB_OPTION = "--dataset_name"


def data_source(
    file: str | None, dataset_name: str | None, file_option: str = "--train_file", needed_by: str | None = None
) -> str | None:
    """The one source of a split: the local file(s) given with `file_option`, or the Hub dataset of --dataset_name
    (None where neither is given, or an error naming `needed_by`, what needs them). Checked before any loading: a
    file that is not there is not looked for on the Hub, and a local file is not taken for a Hub id."""
    if file is not None and dataset_name is not None:
        raise ValueError(
            f"{file_option} {file} and {HUB_OPTION} {dataset_name} both give the data of one split: give local "
            f"files with {file_option} or a dataset on the Hub with {HUB_OPTION}, not both."
        )
    if file is not None:
        check_files_exist(file, file_option)
        return file
    if dataset_name is not None:
        if not looks_like_hub_dataset(dataset_name):
            kind = "a local file" if is_local(dataset_name) else "a file path"
            raise ValueError(
                f"{HUB_OPTION} {dataset_name} is {kind}, not a dataset on the Hub: give local files with {file_option}."
            )
        return dataset_name
    if needed_by is not None:
        raise ValueError(f"{needed_by} needs data: local files with {file_option}, or a dataset on the Hub with "
                         f"{HUB_OPTION}.")
    return None


def evaluated_source(
    validation_file: str | None, test_file: str | None, dataset_name: str | None, split: str | None
) -> tuple[str, str]:
    """(the data, the split recorded) of an evaluation script: --validation_file or --test_file, or the --split of
    --dataset_name. Without --split the split is `test` for --test_file, else `validation`."""
    if validation_file is not None and test_file is not None:
        raise ValueError(
            f"--validation_file {validation_file} and --test_file {test_file}: give the one split to evaluate."
        )
    if validation_file is None and test_file is None and dataset_name is None:
        raise ValueError("Give the data to evaluate: local files with --validation_file or --test_file, or a "
                         f"dataset on the Hub with {HUB_OPTION} (and --split).")
    file_option = "--test_file" if test_file is not None else "--validation_file"
    source = data_source(test_file if test_file is not None else validation_file, dataset_name, file_option)
    return source, split or ("test" if test_file is not None else "validation")


def check_files_exist(files: str, option: str) -> None:
    """Every file of a file option is there (comma-separated files each; a message about one of several says how
    the option was split). A link that leads nowhere, or round in a loop, is named as such."""
    parts = split_paths(files)
    if not parts:
        raise ValueError(f"{option} {files!r} names no file.")
    split = f" ({option} {files} is read as {len(parts)} files separated by commas: {parts})" if len(parts) > 1 else ""
    for part in parts:
        if Path(part).exists():
            continue
        if os.path.lexists(part):  # a symbolic link
            kind = special_kind(part) or f"a symbolic link to {os.readlink(part)}, which is not there"
            raise FileNotFoundError(f"{option} {part}: it is {kind}; give the data file itself{split}.")
        hint = f" (a dataset on the Hub is given with {HUB_OPTION})" if looks_like_hub_dataset(part) else ""
        raise FileNotFoundError(f"{option} {part}: no such file{hint}{split}.")


# Bounds on what a data file's check reads: a record (a line of JSON Lines or CSV) longer than any real one (a long
# document is a few hundred KB) is refused before it is held whole (a 1 GiB line ended in a MemoryError), and so is a
# record nested deeper than any data a command reads (a translation pair is nested 2 levels; JSON nested 100,000
# levels deep exhausts the interpreter's stack).
MAX_RECORD_BYTES = 32 * 2**20
MAX_RECORD_DEPTH = 64
# A .json file is parsed whole (here and by the loader): about this many bytes of memory per byte of the file.
JSON_PARSE_BYTES_PER_FILE_BYTE = 10
READ_CHUNK = 2**20


def _check_local_file(path: Path) -> None:
    """Read a local data file once, so that an encoding or syntax error is reported with its file and line rather
    than from deep inside the loader; a record too long or nested too deep (MAX_RECORD_BYTES, MAX_RECORD_DEPTH), a
    key given twice in one record, a number beyond what Python reads (4,300 digits) and a .json file that is not a
    list of records or an object of columns are named with their file and line."""
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir() if p.suffix.lower() in LOCAL_FORMATS)
        raise ValueError(
            f"Data file {path} is a folder; give the file itself"
            + (f" (it holds {', '.join(found[:8])})." if found else ".")
        )
    if not path.exists():
        kind = special_kind(path) if os.path.lexists(path) else None
        raise FileNotFoundError(f"Data file {path} {f'is {kind}' if kind else 'does not exist'}.")
    if not path.is_file():  # a device (/dev/zero would never end), a FIFO, a socket
        raise ValueError(f"Data file {path} is {path_kind(path.resolve())}, not a regular file; give a data file.")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_FORMATS:
        raise ValueError(f"Data file {path}: unsupported format {suffix!r}; use one of {sorted(LOCAL_FORMATS)}.")
    if suffix == ".json":
        _check_json_document(path)
        return
    records = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(_bounded_lines(handle, path), start=1):
            records += bool(raw.strip())
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error}).") from None
            if suffix == ".jsonl" and line.strip():
                _check_record(parse_record(line, f"{path}, line {number}"), f"{path}, line {number}")
    if records == 0:
        raise ValueError(f"Data file {path} is empty: it holds no records.")
    if suffix == ".csv":
        _check_csv_rows(path)


def _bounded_lines(handle, path: Path) -> Iterator[bytes]:
    """The lines of a file opened in binary, each read only up to MAX_RECORD_BYTES: a longer one is refused."""
    number = 0
    while True:
        raw = handle.readline(MAX_RECORD_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_RECORD_BYTES:
            raise ValueError(f"{path}, line {number}: longer than {MAX_RECORD_BYTES:,} bytes, more than any record "
                             "of text a command reads (a long document is a few hundred KB). The file is damaged, or "
                             "its records are not one a line; split it into records.")
        yield raw


def parse_record(text: str, where: str, whole_file: Path | None = None):
    """One JSON value of a data file (`where`: its file and line, for messages; or `whole_file`, the file it all is,
    whose line of a syntax error is then named), refused in one line where it is nested deeper than
    MAX_RECORD_DEPTH, gives a key twice in one object, holds a number Python will not read or is not valid JSON."""
    if json_nesting_depth(text, stop_above=MAX_RECORD_DEPTH) > MAX_RECORD_DEPTH:
        raise ValueError(f"{where}: nested more than {MAX_RECORD_DEPTH} levels deep, deeper than any record of "
                         "text (a translation pair is nested 2 levels). The file is damaged or hostile.")
    try:
        return json.loads(text, object_pairs_hook=_object_without_repeated_keys)
    except _RepeatedKey as repeated:
        raise ValueError(f"{where}: the key {repeated.key!r} is given twice in one object; the loader would keep "
                         "only one of its values without a word. Give each key once.") from None
    except json.JSONDecodeError as error:
        where = where if whole_file is None else f"{where}, line {error.lineno}"
        raise ValueError(f"{where}: not valid JSON ({error.msg}).") from None
    except ValueError as error:  # Python's limit on the digits of an integer it converts (4,300)
        raise ValueError(f"{where}: {str(error).splitlines()[0][:160]} (a number of thousands of digits is "
                         "no data a command reads).") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to read.") from None


class _RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object_without_repeated_keys(pairs: list) -> dict:
    record = {}
    for key, value in pairs:
        if key in record:
            raise _RepeatedKey(key)
        record[key] = value
    return record


def _check_record(record, where: str) -> None:
    """A record of JSON Lines is an object, and its strings are valid text."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {_json_kind(record)}.")
    if (bad := _unencodable(record)) is not None:
        raise ValueError(f"{where}: {bad}.")


def _json_kind(value) -> str:
    """What a parsed JSON value is, as JSON names it."""
    kinds = ((bool, "true/false"), (str, "a string"), (int, "a number"), (float, "a number"), (list, "an array"),
             (dict, "an object"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), "null")


def _check_json_document(path: Path) -> None:
    """A .json file: valid UTF-8 throughout (read in chunks, the line of a bad byte named), then parsed whole, as the
    loader parses it, where the memory left allows (else refused), as a list of record objects or an object of
    columns; or, failing that, JSON Lines (which the loader also takes), each line a record."""
    size = path.stat().st_size
    available = cpu_memory_available()
    if available is not None and size * JSON_PARSE_BYTES_PER_FILE_BYTE > available:
        raise ValueError(f"{path} ({size:,} bytes) would take about {size * JSON_PARSE_BYTES_PER_FILE_BYTE:,} bytes "
                         f"of memory to parse, more than the {available:,} available: give the data as JSON Lines "
                         "(.jsonl, one record a line), which is read a record at a time.")
    _check_utf8(path)
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(f"Data file {path} is empty: it holds no records.")
    try:
        content = parse_record(text, str(path), whole_file=path)
    except ValueError as whole:
        if "not valid JSON" not in str(whole) or not _is_json_lines(path):
            raise
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                if len(line) > MAX_RECORD_BYTES:
                    raise ValueError(f"{path}, line {number}: longer than {MAX_RECORD_BYTES:,} bytes.") from None
                _check_record(parse_record(line, f"{path}, line {number}"), f"{path}, line {number}")
        return
    if isinstance(content, list):
        for index, record in enumerate(content):
            if not isinstance(record, dict):
                raise ValueError(f"{path}: item {index} of its array is {_json_kind(record)}; a .json file holds an "
                                 "array of record objects, or an object of columns.")
        if not content:
            return  # no rows: the caller says so with its role
    elif not isinstance(content, dict):
        raise ValueError(f"{path} holds {_json_kind(content)}, not records: a .json file holds an array of record "
                         "objects (`[{\"en\": ..., \"de\": ...}, ...]`), or an object of columns.")
    if (bad := _unencodable(content)) is not None:
        raise ValueError(f"{path}: {bad}.")


def _check_utf8(path: Path) -> None:
    """Every byte of the file is UTF-8, read a chunk at a time (a bad byte is named with its line)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    lines = 1
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line = lines + chunk.count(b"\n", 0, error.start)
                raise ValueError(f"{path}, line {line}: not valid UTF-8 ({error.reason}).") from None
            lines += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}, line {lines}: not valid UTF-8 ({error.reason}: the file ends inside a "
                             "character).") from None


def _check_csv_rows(path: Path) -> None:
    """A CSV file parsed strictly, as the loader will read it, with its columns named once and every row on its own
    line with one value per column. A quote left open (`"A man,Ein Mann`) makes the loader read on into the next
    line and join two rows into one pair, without a word, and the counts look normal: such a row is named with its
    lines. (A line break inside a field is written `\\n`, or the data as JSON Lines.)"""
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        try:
            header = next(reader, [])
            repeated = sorted({name for name in header if header.count(name) > 1})
            if repeated:
                raise ValueError(f"{path}, line 1: the column {repeated[0]!r} is named twice in the header; give each "
                                 "column its own name.")
            last = reader.line_num
            for row in reader:
                first, last = last + 1, reader.line_num
                if last > first:
                    raise ValueError(f"{path}, lines {first}-{last}: one row runs over {last - first + 1} lines (a "
                                     "quote left open?); write a line break inside a field as \\n.")
                if row and len(row) != len(header):
                    raise ValueError(f"{path}, line {first}: {len(row)} values for the {len(header)} columns "
                                     f"{header}.")
        except csv.Error as error:
            raise ValueError(f"{path}, line {reader.line_num}: not valid CSV ({error}).") from None


def _unencodable(value, where: str = "") -> str | None:
    """Where a JSON value holds a string that is not valid text (a lone surrogate, `"\\ud800"`), in words."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            return f"`{where or 'the value'}` is not valid text ({error.reason}: {value[error.start:error.end]!a})"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if (bad := _unencodable(item, f"{where}.{key}" if where else str(key))) is not None:
            return bad
    return None


def _is_json_lines(path: Path) -> bool:
    """Whether every line of a .json file that did not parse whole parses on its own (the bounds aside)."""
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json_nesting_depth(line, stop_above=MAX_RECORD_DEPTH) <= MAX_RECORD_DEPTH:
                json.loads(line)
        return True
    except (ValueError, RecursionError):
        return False


def load_split(dataset: str, split: str = "train", config_name: str | None = None) -> datasets.Dataset:
    """One split of a dataset: `dataset` is a local file (or comma-separated files of one format), or else the name
    of a dataset on the Hub (with `config_name` where it has several). The scripts check which with `data_source`
    first, from the option it was given with."""
    if is_local(dataset):
        paths = [Path(part) for part in split_paths(dataset)]
        for path in paths:
            _check_local_file(path)
        formats = {LOCAL_FORMATS[path.suffix.lower()] for path in paths}
        if len(formats) > 1:
            raise ValueError(f"Data files {dataset!r} mix formats {sorted(formats)}; give files of one format.")
        return datasets.load_dataset(formats.pop(), data_files=[str(p) for p in paths], split="train")
    return datasets.load_dataset(dataset, config_name, split=split)


def require_columns(dataset: datasets.Dataset, columns: Sequence[str], where: str = "the dataset") -> None:
    for column in columns:
        if column not in dataset.column_names:
            raise ValueError(
                f"Column {column!r} is not in {where}; its columns are {dataset.column_names}. "
                "Choose the columns to use with the script's column options."
            )


def require_values(dataset: datasets.Dataset, columns: Sequence[str], where: str = "the dataset") -> None:
    """Every row has a value in each column, and its text is text: a null (JSON `null`, an empty CSV cell) or a lone
    surrogate (`"\\ud800"` in JSON) is named with its row, instead of failing deep inside the tokenizer."""
    for column in columns:
        for row, value in enumerate(dataset[column], start=1):
            values = value if isinstance(value, list) else [value]
            if value is None or any(item is None for item in values):
                raise ValueError(f"{where}, row {row}: `{column}` is null (empty); every row needs a value.")
            if (bad := _unencodable(value, column)) is not None:
                raise ValueError(f"{where}, row {row}: {bad}.")


def require_text(dataset: datasets.Dataset, columns: Sequence[str], where: str = "the dataset") -> None:
    """Every value of the text `columns` is a string (or null, which the caller reports or counts as empty): a number
    or a list where text belongs is named with its row and what it is, instead of being taken for an empty text or
    failing inside the tokenizer. A dotted name reads inside a dict column (`translation.en`). A column typed as text
    throughout is not read row by row."""
    for column in columns:
        if _is_text_feature(_column_feature(dataset.features, column)):
            continue
        for row, value in enumerate(dotted_values(dataset[column.partition(".")[0]], column), start=1):
            if value is not None and not isinstance(value, str):
                raise ValueError(
                    f"{where}, row {row}: `{column}` holds {_value_kind(value)} ({reprlib.repr(value)}), not text; "
                    "every value of a text column must be a string."
                )


def require_text_rows(dataset: datasets.Dataset, columns: Sequence[str], where: str = "the dataset") -> None:
    """Every row holds text in each of `columns`: a string, or, in a column of dicts (transformers' `translation`), a
    string under each key. A row whose value is null or missing, a number, a list or anything else is named with
    its row and what it holds: a command that learns from the texts (train_tokenizer.py) would otherwise skip it
    and count it as learned."""
    for column in columns:
        for row, value in enumerate(dataset[column], start=1):
            values = value.items() if isinstance(value, dict) else [(None, value)]
            if isinstance(value, dict) and not value:
                values = [(None, None)]
            for key, item in values:
                if isinstance(item, str):
                    continue
                name = f"{column}.{key}" if key is not None else column
                held = "null or missing" if item is None else f"{_value_kind(item)} ({reprlib.repr(item)})"
                raise ValueError(f"{where}, row {row}: `{name}` is {held}, not text; every row needs a string in "
                                 f"each of the columns {list(columns)}.")


def _column_feature(features: datasets.Features, column: str):
    """The type of `column`; of key `en` of the dict column `translation` for `translation.en` (None if unknown)."""
    top, _, key = column.partition(".")
    feature = features.get(top)
    if not key:
        return feature
    if isinstance(feature, datasets.Translation):
        return datasets.Value("string")  # a translation's values are its texts
    return feature.get(key) if isinstance(feature, dict) else None


def _is_text_feature(feature) -> bool:
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def dotted_values(values: Iterable, column: str) -> Iterator:
    """The values of `column` from those of its top-level column: key `en` of each dict for `translation.en` (None
    where a row has no such dict or key)."""
    _, _, key = column.partition(".")
    for value in values:
        yield (value.get(key) if isinstance(value, dict) else None) if key else value


TRANSLATION_COLUMN = "translation"  # transformers' translation format: {"translation": {"en": ..., "de": ...}}


def unnest_translation(dataset: datasets.Dataset, keys: dict[str, str], where: str = "the dataset") -> datasets.Dataset:
    """A dataset in transformers' translation format (rows `{"translation": {"en": ..., "de": ...}}`, read by its
    example scripts with --source_lang/--target_lang) with the texts the caller reads as flat columns: `keys` maps
    each column name to its key in `translation`. Columns the dataset has already are left alone, and a dataset
    without a `translation` column is returned as it is (the caller then names the missing column). A key that is
    not in the column is an error naming the keys there are."""
    missing = {column: key for column, key in keys.items() if column not in dataset.column_names}
    if not missing or TRANSLATION_COLUMN not in dataset.column_names:
        return dataset
    there = _translation_keys(dataset.features[TRANSLATION_COLUMN])
    for key in missing.values():
        if there is not None and key not in there:
            raise ValueError(f"{where}: the {TRANSLATION_COLUMN!r} column has no key {key!r}; its keys are {there}. "
                             "--source_lang/--target_lang name the keys to read.")

    def lift(batch: dict) -> dict:
        return {column: list(dotted_values(batch[TRANSLATION_COLUMN], f"{TRANSLATION_COLUMN}.{key}"))
                for column, key in missing.items()}

    return dataset.map(lift, batched=True, desc=f"Reading the {TRANSLATION_COLUMN!r} column")


def _translation_keys(feature) -> list[str] | None:
    """The keys of a `translation` column's dicts, from its type (None where the type does not say)."""
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    if isinstance(feature, datasets.TranslationVariableLanguages):
        return None  # the languages vary from row to row
    return list(feature) if isinstance(feature, dict) else None


def _value_kind(value) -> str:
    """What a JSON value is, in words: `an integer`, `a list`."""
    kinds = {bool: "true/false", int: "an integer", float: "a number", list: "a list", dict: "an object"}
    return next((kind for cls, kind in kinds.items() if isinstance(value, cls)), f"a {type(value).__name__}")


def require_same_lengths(dataset: datasets.Dataset, first: str, second: str, where: str = "the dataset") -> None:
    """Each row's lists in `first` and `second` have one item for each other (words and their tags)."""
    for row, (a, b) in enumerate(zip(dataset[first], dataset[second]), start=1):
        if len(a) != len(b):
            raise ValueError(
                f"{where}, row {row}: `{first}` has {len(a)} items and `{second}` {len(b)}; they must match one to one."
            )


def iter_texts(dataset: datasets.Dataset, columns: Sequence[str]) -> Iterator[str]:
    """Every non-empty string of the given columns (a dict column such as `translation` yields its values)."""
    for column in columns:
        for value in dataset[column]:
            yield from _strings(value)


def _strings(value) -> Iterable[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _strings(inner)


def write_train_validation(rows: Sequence[dict], output_dir: str | Path, validation_size: int) -> int:
    """Write `rows` as JSON Lines to `output_dir`/train.jsonl and validation.jsonl, the last `validation_size` rows
    held out for validation; returns the number of training rows."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    cut = len(rows) - validation_size
    for name, part in (("train", rows[:cut]), ("validation", rows[cut:])):
        with open(output_dir / f"{name}.jsonl", "w", encoding="utf-8") as file:
            for row in part:
                file.write(json.dumps(row, ensure_ascii=False) + "\n")
    return cut


__all__ = [
    "check_files_exist",
    "data_source",
    "dotted_values",
    "evaluated_source",
    "is_local",
    "iter_texts",
    "load_split",
    "looks_like_hub_dataset",
    "require_columns",
    "require_same_lengths",
    "require_text",
    "require_text_rows",
    "require_values",
    "split_paths",
    "unnest_translation",
    "write_train_validation",
]
