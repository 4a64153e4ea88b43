"""Loading text datasets for the scripts (local JSON Lines / JSON / CSV files, or a Hub dataset by name), and writing
the JSON Lines training and validation files of the scripts that make self-supervised pairs.

Every script names its data as transformers' example scripts do: local files with `--train_file`, `--validation_file`
or `--test_file`, a dataset on the Hub with `--dataset_name` (and `--dataset_config_name`). `data_source` checks that
each split comes from exactly one of them, and that each is what its option says, before anything is loaded.

Errors name what is wrong: the file and line of a broken record, the missing column and the columns there are.
"""

import csv
import json
import reprlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import datasets

from ..output_paths import path_kind


LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv"}


def is_local(dataset: str) -> bool:
    return any(Path(part).exists() for part in split_paths(dataset))


def split_paths(dataset: str) -> list[str]:
    """Several local files may be given at once, separated by commas."""
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
    """Every file of a file option is there (comma-separated files each)."""
    if not split_paths(files):
        raise ValueError(f"{option} {files!r} names no file.")
    for part in split_paths(files):
        if not Path(part).exists():
            hint = f" (a dataset on the Hub is given with {HUB_OPTION})" if looks_like_hub_dataset(part) else ""
            raise FileNotFoundError(f"{option} {part}: no such file{hint}.")


def _check_local_file(path: Path) -> None:
    """Read a local data file once, so that an encoding or syntax error is reported with its file and line rather
    than from deep inside the loader."""
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir() if p.suffix.lower() in LOCAL_FORMATS)
        raise ValueError(
            f"Data file {path} is a folder; give the file itself"
            + (f" (it holds {', '.join(found[:8])})." if found else ".")
        )
    if not path.exists():
        raise FileNotFoundError(f"Data file {path} does not exist.")
    if not path.is_file():  # a device (/dev/zero would never end), a FIFO, a socket
        raise ValueError(f"Data file {path} is {path_kind(path.resolve())}, not a regular file; give a data file.")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_FORMATS:
        raise ValueError(f"Data file {path}: unsupported format {suffix!r}; use one of {sorted(LOCAL_FORMATS)}.")
    records = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            records += bool(raw.strip())
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error}).") from None
            if suffix == ".jsonl" and line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}).") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}.")
                if (bad := _unencodable(record)) is not None:
                    raise ValueError(f"{path}, line {number}: {bad}.")
    if records == 0:
        raise ValueError(f"Data file {path} is empty: it holds no records.")
    if suffix == ".csv":
        _check_csv_rows(path)
    if suffix == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            # a .json file may also hold one object per line, which the loader accepts
            if not _is_json_lines(path):
                raise ValueError(f"{path}, line {error.lineno}: not valid JSON ({error.msg}).") from None


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
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                json.loads(line)
        return True
    except json.JSONDecodeError:
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
    "require_values",
    "split_paths",
    "unnest_translation",
    "write_train_validation",
]
