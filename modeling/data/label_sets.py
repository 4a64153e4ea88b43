"""The label set of a classification or tagging task, and the mapping of a dataset's label values onto its ids.

Where the label names come from (the first that applies):
  1. names given explicitly (the scripts' `--label_set`);
  2. a `labels.json` (a JSON list of names) beside the local training file, as the project's copies of SST-2 and
     CoNLL-2003 carry;
  3. the names of a Hub dataset's `ClassLabel` feature;
  4. the names of a model already fine-tuned for the same task (so that its ids keep their meaning);
  5. the distinct values of the training split (names sorted; ids 0..max).

Label values in a dataset are ids (int, or a float holding a whole number) or names (str): names are mapped through
`label2id`, ids must lie in the set. Anything else is an error that names the value, the row, the column, the data
and the labels there are.
"""

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets

from .loading import is_local, split_paths


LABELS_FILE = "labels.json"


@dataclass(frozen=True)
class LabelSet:
    names: tuple[str, ...]
    source: str  # where the names came from, for messages

    def __post_init__(self):
        if not self.names:
            raise ValueError(f"The label set from {self.source} is empty; a task needs at least one label.")
        if not all(isinstance(name, str) and name for name in self.names):
            raise ValueError(f"Label names must be non-empty strings; {self.source} gives {list(self.names)}.")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"Label names must be distinct; {self.source} gives {list(self.names)}.")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.names)}

    def to_id(self, value, where: str) -> int:
        """The id of one label value (an id or a name); `where` says which row of which column of which data."""
        if isinstance(value, float) and value.is_integer():
            # a column with one float in it is read as floats throughout (0 -> 0.0): whole numbers are ids
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(
                f"Label {value!r} ({type(value).__name__}) at {where}: labels must be ids (int) or names (str). "
                f"{self.describe()}"
            )
        if isinstance(value, str):
            if value not in self.label2id:
                raise ValueError(f"Label {value!r} at {where} is not in the label set. {self.describe()}")
            return self.label2id[value]
        if not 0 <= value < len(self.names):
            raise ValueError(f"Label id {value} at {where} is outside the label set. {self.describe()}")
        return value

    def describe(self) -> str:
        return f"The labels (from {self.source}) are ids 0..{len(self.names) - 1} = {list(self.names)}."


def resolve_label_set(
    dataset: datasets.Dataset,
    column: str,
    data: str,
    label_set: Sequence[str] | None = None,
    checkpoint_names: Sequence[str] | None = None,
) -> LabelSet:
    """The label set for `column` of the training split `dataset`, loaded from `data` (see the module docstring)."""
    if label_set:
        return LabelSet(tuple(label_set), "--label_set")
    labels_file = labels_file_beside(data)
    if labels_file is not None:
        return LabelSet(tuple(read_labels_file(labels_file)), str(labels_file))
    class_label = _class_label_feature(dataset.features.get(column))
    if class_label is not None:
        return LabelSet(tuple(class_label.names), f"the dataset's ClassLabel feature {column!r}")
    if checkpoint_names:
        return LabelSet(tuple(checkpoint_names), "the checkpoint's id2label")
    return LabelSet(_names_from_values(_flatten(dataset[column]), column, data), f"the values of column {column!r}")


def labels_file_beside(data: str) -> Path | None:
    if not is_local(data):
        return None
    for part in split_paths(data):
        candidate = Path(part).parent / LABELS_FILE
        if candidate.is_file():
            return candidate
    return None


def read_labels_file(path: Path) -> list[str]:
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON list of label names ({error}).") from None
    if not isinstance(names, list):
        raise ValueError(f"{path}: expected a JSON list of label names, got {type(names).__name__}.")
    return names


def _class_label_feature(feature) -> datasets.ClassLabel | None:
    # a tag column is a list of ClassLabel (`datasets.List` / `Sequence`), a label column a ClassLabel
    inner = getattr(feature, "feature", feature)
    return inner if isinstance(inner, datasets.ClassLabel) else None


def _flatten(values: Iterable) -> list:
    flat = []
    for value in values:
        flat.extend(value if isinstance(value, list) else [value])
    return flat


def _names_from_values(values: list, column: str, data: str) -> tuple[str, ...]:
    kinds = {type(value) for value in values}
    if kinds == {str}:
        return tuple(sorted(set(values)))
    if kinds == {int}:
        if min(values) < 0:
            raise ValueError(f"Column {column!r} of {data} holds the negative label id {min(values)}.")
        return tuple(f"LABEL_{index}" for index in range(max(values) + 1))
    raise ValueError(
        f"Column {column!r} of {data} holds values of types {sorted(kind.__name__ for kind in kinds)}; labels must "
        "be all ids (int) or all names (str). Give the label names with --label_set or a labels.json file."
    )


def encode_labels(dataset: datasets.Dataset, column: str, labels: LabelSet, data: str, target: str = "labels"):
    """`dataset` with `target` holding the id of each row's label (or list of ids, for a column of tag lists)."""

    def encode(row, index):
        value = row[column]
        where = f"row {index} of column {column!r} in {data}"
        if isinstance(value, list):
            return {target: [labels.to_id(tag, f"{where} (position {p})") for p, tag in enumerate(value)]}
        return {target: labels.to_id(value, where)}

    return dataset.map(encode, with_indices=True, desc=f"Mapping {column!r} to label ids")


__all__ = ["LABELS_FILE", "LabelSet", "encode_labels", "labels_file_beside", "read_labels_file", "resolve_label_set"]
