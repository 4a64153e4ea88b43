"""A split loaded with the checks that make a bad input fail early and clearly (`load_checked_split`: the fine-tuning
scripts' splits and the one a results file scores), and the fine-tuning scripts' training and evaluation splits,
prepared for the Trainer."""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import datasets
from transformers import PreTrainedModel, TrainingArguments

from .arguments import TrainingDataArguments
from .loading import (
    data_source,
    is_local,
    load_split,
    require_columns,
    require_text,
    require_values,
    unnest_translation,
)


logger = logging.getLogger(__name__)


@dataclass
class Splits:
    """The loaded splits (None when their action is off) and where each came from, for messages."""

    train: datasets.Dataset | None = None
    evaluation: datasets.Dataset | None = None
    train_source: str | None = None
    evaluation_source: str | None = None

    @property
    def reference(self) -> tuple[datasets.Dataset, str]:
        """The split that defines the label set: the training split, else the evaluation split."""
        if self.train is not None:
            return self.train, self.train_source
        return self.evaluation, self.evaluation_source


def load_splits(
    data_args: TrainingDataArguments, training_args: TrainingArguments, columns: list[str], text_columns: Sequence[str] = ()
) -> Splits:
    """The training and evaluation splits the actions need, each from one source (vaswani.data.loading.data_source). Each
    must have rows and the given columns, with a value in each, a string in each of `text_columns`."""
    train_source = evaluation_source = None
    if training_args.do_train:
        train_source = data_source(data_args.train_file, data_args.dataset_name, "--train_file", "--do_train")
    if training_args.do_eval:
        # a Hub dataset that gives the training split may leave the evaluation to --validation_file
        hub = None if training_args.do_train and data_args.validation_file else data_args.dataset_name
        evaluation_source = data_source(data_args.validation_file, hub, "--validation_file", "--do_eval")
    splits = Splits()
    if train_source is not None:
        splits.train, splits.train_source = load_checked_split(
            train_source, data_args.train_split, data_args.dataset_config_name, columns,
            data_args.max_train_samples, "training", text_columns,
        )
    if evaluation_source is not None:
        splits.evaluation, splits.evaluation_source = load_checked_split(
            evaluation_source, data_args.validation_split, data_args.dataset_config_name, columns,
            data_args.max_eval_samples, "evaluation", text_columns,
        )
    return splits


def load_checked_split(
    source: str, split: str, dataset_config_name: str | None, columns: list[str], max_rows: int | None, role: str,
    text_columns: Sequence[str] = (),
) -> tuple[datasets.Dataset, str]:
    """One split (its first `max_rows` rows), and a description of where it came from. It must have the columns,
    a value in each (a string in each of `text_columns`) and at least one row: `role` ("training", "evaluation") says
    which split, in the errors. Rows in transformers' translation format, `{"translation": {"en": ..., "de": ...}}`,
    give the text columns named after the keys (finetune_seq2seq.py's --source_lang/--target_lang)."""
    where = source if is_local(source) else f"{source} (split {split!r})"
    try:
        dataset = load_split(source, split, dataset_config_name)
    except ValueError as error:
        # what `datasets` says of a file that parses but holds no rows (`[]`, a CSV header alone)
        if "corresponds to no data" not in str(error):
            raise
        dataset = datasets.Dataset.from_dict({})
    if len(dataset) == 0:
        raise ValueError(f"The {role} split {where} has no rows: there is nothing to {ROLE_VERBS[role]}.")
    dataset = unnest_translation(dataset, {column: column for column in text_columns if "." not in column}, where)
    require_columns(dataset, columns, where=where)
    require_values(dataset, columns, where=where)
    require_text(dataset, text_columns, where=where)
    if max_rows is not None:
        dataset = dataset.select(range(min(max_rows, len(dataset))))
    return dataset, where


ROLE_VERBS = {"training": "train on", "evaluation": "evaluate"}


def usable_length(model: PreTrainedModel, requested: int) -> int:
    """`requested`, or fewer tokens if the model has fewer positions."""
    return min(requested, getattr(model.config, "max_position_embeddings", None) or requested)


def input_length(model: PreTrainedModel, tokenizer, requested: int) -> int:
    """The length inputs are truncated to in training, also set as the tokenizer's `model_max_length`: the tokenizer
    saved with the fine-tuned model then truncates for the pipelines as training did."""
    length = usable_length(model, requested)
    tokenizer.model_max_length = min(tokenizer.model_max_length, length)
    return length


def drop_empty_pairs(dataset: datasets.Dataset, source: str, target: str, where: str) -> datasets.Dataset:
    """Pairs whose source or target is blank teach nothing (scripts/train.py drops them too): dropped, and counted."""
    kept = dataset.filter(lambda row: bool(row[source].strip()) and bool(row[target].strip()), desc="Dropping empty")
    if len(kept) == 0:
        raise ValueError(f"{where}: every pair has an empty `{source}` or `{target}`; there is nothing to use.")
    if len(kept) < len(dataset):
        logger.warning(f"{where}: dropped {len(dataset) - len(kept)} of {len(dataset)} pairs with an empty "
                       f"`{source}` or `{target}`.")
    return kept


def prepare_splits(training_args: TrainingArguments, splits: Splits, prepare) -> tuple:
    """(train, evaluation) after `prepare(dataset, source)`; the main process goes first and the others then read
    what `datasets` cached."""
    with training_args.main_process_first(desc="preparing the data"):
        train = prepare(splits.train, splits.train_source) if splits.train is not None else None
        evaluation = prepare(splits.evaluation, splits.evaluation_source) if splits.evaluation is not None else None
    return train, evaluation


__all__ = [
    "Splits",
    "drop_empty_pairs",
    "input_length",
    "load_checked_split",
    "load_splits",
    "prepare_splits",
    "usable_length",
]
