"""The data options the commands share, named as in transformers' example scripts: one base for where the data come
from and how much of the validation split is used (`DataArguments`), extended by the commands that also train
(`TrainingDataArguments`: scripts/train.py, whose options add to it, and the fine-tuning scripts) and by the ones
that score a split (`vaswani.evaluation.scoring.EvaluatedSplitArguments`). A command whose own behaviour differs
declares that option again with its own help."""

from dataclasses import dataclass, field


@dataclass
class DataArguments:
    dataset_name: str | None = field(default=None, metadata={"help": "A dataset on the Hub, instead of local files."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    validation_file: str | None = field(
        default=None, metadata={"help": "Local .jsonl/.json/.csv file(s) of the validation split, comma-separated."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on the first N rows of the validation split only."}
    )


@dataclass
class TrainingDataArguments(DataArguments):
    train_file: str | None = field(
        default=None, metadata={"help": "Local .jsonl/.json/.csv training file(s), comma-separated."}
    )
    train_split: str = field(default="train", metadata={"help": "The Hub dataset's split to train on."})
    validation_split: str = field(
        default="validation",
        metadata={"help": "The Hub dataset's split to validate on, where no --validation_file is given."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on the first N rows only."})


__all__ = ["DataArguments", "TrainingDataArguments"]
