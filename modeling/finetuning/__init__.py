"""What the fine-tuning scripts share on the standard `Trainer` path: the model and data arguments, loading the
splits (with the checks that make a bad input fail early and clearly), the checkpoint to resume from, and the
train -> save -> evaluate sequence.

Everything else is transformers: the scripts build a `Trainer` / `Seq2SeqTrainer` from `TrainingArguments`, so that
`torchrun` / `accelerate launch`, `--activation_checkpointing`, `--gradient_accumulation_steps`,
`--resume_from_checkpoint` and the rest work as for any model. The data options are those of transformers' example
scripts (`--train_file`, `--validation_file`, `--dataset_name`, `--max_train_samples`); the spellings of the last
release are still read, with a warning (vaswani.cli.OLD_OPTIONS).
"""

import copy
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from transformers import (
    AutoTokenizer,
    HfArgumentParser,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from ..cli import OLD_OPTIONS, modern_argv
from ..data import data_source, is_local, load_split, require_columns, require_values
from ..model_card import ARGUMENTS_FILE
from .head_loading import LoadingReport, ModelArguments, label_names_of_fine_tuned, load_head
from .label_sets import LabelSet, resolve_label_set


logger = logging.getLogger(__name__)

RESUME_LATEST = ("last", "latest", "true", "True")


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "Local training data: .jsonl/.json/.csv file(s), comma-separated."}
    )
    validation_file: str | None = field(
        default=None,
        metadata={"help": "Local evaluation data, as --train_file. Unset: the --validation_split of --dataset_name."},
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A dataset on the Hub: its --train_split to train on, its --validation_split to evaluate on "
                  "(unless --validation_file is given)."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    train_split: str = field(default="train", metadata={"help": "Hub split to train on."})
    validation_split: str = field(default="validation", metadata={"help": "Hub split to evaluate on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on the first N rows only."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on the first N rows only."})


def start_run(
    task_arguments, argv: list[str] | None, training_arguments=TrainingArguments, program: str | None = None
):
    """Parse the command line (of the script `program`) into (model, data, task, training) arguments, set up
    logging, check that the run makes sense and seed everything."""
    argv = modern_argv(argv, OLD_OPTIONS["fine-tuning"], program)
    parser = HfArgumentParser((ModelArguments, DataArguments, task_arguments, training_arguments))
    model_args, data_args, task_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    setup_logging(training_args)
    check_run(training_args)
    set_seed(training_args.seed)
    return model_args, data_args, task_args, training_args


def setup_logging(training_args: TrainingArguments) -> None:
    """Log to stdout. This project's messages (labels, the loading report) at info level from the main process and
    warnings from the others; transformers and datasets at the level `--log_level` / `--log_level_replica` give."""
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    ours = logging.INFO if training_args.should_log else logging.WARNING
    logging.getLogger("vaswani").setLevel(ours)
    logging.getLogger("__main__").setLevel(ours)
    level = training_args.get_process_log_level()
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)


def check_run(training_args: TrainingArguments) -> None:
    """Fail early on a run that would do nothing, or that would silently run as unrelated single processes."""
    if not (training_args.do_train or training_args.do_eval):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval.")
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and training_args.world_size != launched:
        # without a GPU, accelerate forms a process group only when told to run on the CPU
        raise ValueError(
            f"Launched as {launched} processes (WORLD_SIZE={launched}), but they would each train alone "
            f"(world_size={training_args.world_size}): on a machine without GPUs pass --use_cpu true "
            "(or set ACCELERATE_USE_CPU=1) to train on CPU processes together."
        )
    resume_checkpoint(training_args)  # a checkpoint that is not there is an error now, not after loading everything


def loss_is_a_batch_mean(trainer: Trainer) -> Trainer:
    """Tell `Trainer` that a Vaswani model's loss is the plain mean over its batch.

    Their `forward` takes `**kwargs` (attention options), which `Trainer` reads as "normalizes the loss by
    `num_items_in_batch` itself"; it would then skip the division by the gradient-accumulation steps and multiply
    the loss by the number of processes, making the gradients that many times too large. A model that declares
    `accepts_loss_kwargs` is left as it says.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    if getattr(model.config, "model_type", None) == "vaswani" and not hasattr(model, "accepts_loss_kwargs"):
        trainer.model_accepts_loss_kwargs = False
    return trainer


class KeepGenerationConfig(TrainerCallback):
    """Give the model back the generation config it started with after each evaluation.

    `Seq2SeqTrainer.prediction_step` fills the model's generation config with every default of transformers (among
    them `max_length=20`), and the checkpoints and the final model were saved with it: every later `generate()` with
    `max_new_tokens` then warned that both limits were set. The config a checkpoint is saved with is the one it was
    loaded with, plus what the run set on purpose before training. It is put back after each evaluation batch too:
    the filled-in `max_length=20` made every batch after the first warn the same during evaluation."""

    def __init__(self, model: PreTrainedModel):
        self.generation_config = copy.deepcopy(getattr(model, "generation_config", None))

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if model is not None and self.generation_config is not None:
            model.generation_config = copy.deepcopy(self.generation_config)

    on_prediction_step = on_evaluate


def load_tokenizer(model_args: ModelArguments):
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source is None:
        raise ValueError("Training from scratch (--preset) needs --tokenizer_name: see scripts/train_tokenizer.py.")
    return AutoTokenizer.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)


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


def load_splits(data_args: DataArguments, training_args: TrainingArguments, columns: list[str]) -> Splits:
    """The training and evaluation splits the actions need, each from one source (vaswani.data.data_source). Each
    must have rows and the given columns."""
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
            data_args.max_train_samples, "training",
        )
    if evaluation_source is not None:
        splits.evaluation, splits.evaluation_source = load_checked_split(
            evaluation_source, data_args.validation_split, data_args.dataset_config_name, columns,
            data_args.max_eval_samples, "evaluation",
        )
    return splits


def load_checked_split(
    source: str, split: str, dataset_config_name: str | None, columns: list[str], max_rows: int | None, role: str
) -> tuple[datasets.Dataset, str]:
    """One split (its first `max_rows` rows), and a description of where it came from. It must have the columns
    and at least one row: `role` ("training", "evaluation") says which split, in the errors."""
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
    require_columns(dataset, columns, where=where)
    require_values(dataset, columns, where=where)
    if max_rows is not None:
        if max_rows < 1:
            raise ValueError(f"The number of {role} rows to use must be at least 1, got {max_rows}.")
        dataset = dataset.select(range(min(max_rows, len(dataset))))
    return dataset, where


ROLE_VERBS = {"training": "train on", "evaluation": "evaluate"}


def load_labelled_head(
    auto_class, model_args: ModelArguments, tokenizer, splits: Splits, column: str, label_set: list[str] | None
) -> tuple[LabelSet, PreTrainedModel, LoadingReport | None]:
    """The label set of `column` (see vaswani.finetuning.label_sets) and a classification head (`auto_class`) sized to it."""
    reference, reference_source = splits.reference
    # a checkpoint already fine-tuned with this kind of head keeps its label ids
    head_suffix = auto_class.__name__.removeprefix("AutoModel")  # e.g. "ForTokenClassification"
    labels = resolve_label_set(
        reference,
        column,
        reference_source,
        label_set,
        label_names_of_fine_tuned(model_args.model_name_or_path, head_suffix, model_args.trust_remote_code),
    )
    logger.info(labels.describe())
    model, report = load_head(
        auto_class, model_args, tokenizer, num_labels=len(labels), id2label=labels.id2label, label2id=labels.label2id
    )
    return labels, model, report


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


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """The Trainer checkpoint to resume from: `--resume_from_checkpoint PATH`, or `last` for the newest
    `checkpoint-*` folder in `--output_dir`."""
    value = training_args.resume_from_checkpoint
    if value is None or not training_args.do_train:
        return None
    if value in RESUME_LATEST:
        latest = get_last_checkpoint(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
        if latest is None:
            raise ValueError(
                f"--resume_from_checkpoint {value}: there is no checkpoint-* folder in --output_dir "
                f"{training_args.output_dir} to resume from."
            )
        return latest
    if not (Path(value) / "trainer_state.json").is_file():
        raise ValueError(
            f"--resume_from_checkpoint {value}: not a Trainer checkpoint (a checkpoint-* folder with "
            "trainer_state.json)."
        )
    return value


def argmax_logits(logits, labels):
    """`preprocess_logits_for_metrics`: keep only the predicted ids, so that evaluation gathers one id per position
    across processes rather than the logits and the encoder states a seq2seq head also returns."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)


def train_and_evaluate(
    trainer: Trainer, training_args: TrainingArguments, extra: dict | None = None, arguments: tuple = ()
) -> dict:
    """Train (resuming where asked), save the model and tokenizer to --output_dir, evaluate. Returns the metrics,
    which are also written to train_results.json / eval_results.json / all_results.json in --output_dir. The run's
    `arguments` (its model, data and task dataclasses) and training arguments go to arguments.json beside the model,
    which the model card reads (transformers' training_args.bin is a pickle: nothing of this project reads it)."""
    results = dict(extra or {})
    loss_is_a_batch_mean(trainer)
    if training_args.do_train:
        outcome = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
        trainer.save_model()
        trainer.save_state()
        if trainer.is_world_process_zero():
            record = {"script": Path(sys.argv[0]).name, **{kind: asdict(value) for kind, value in
                                                            zip(("model", "data", "task"), arguments)}}
            record["training"] = training_args.to_dict()  # tokens are masked by transformers
            (Path(training_args.output_dir) / ARGUMENTS_FILE).write_text(
                json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8"
            )
        metrics = {**outcome.metrics, "num_processes": training_args.world_size}
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        results.update({f"train_{k}" if not k.startswith("train") else k: v for k, v in metrics.items()})
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results.update(metrics)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # the Trainer leaves the process group up; left to the interpreter's exit, gloo's threads sometimes abort the
        # process after the run is done ("terminate called without an active exception", exit -6 under torchrun)
        torch.distributed.destroy_process_group()
    return results


__all__ = [
    "DataArguments",
    "KeepGenerationConfig",
    "Splits",
    "argmax_logits",
    "check_run",
    "load_checked_split",
    "load_labelled_head",
    "input_length",
    "load_splits",
    "load_tokenizer",
    "loss_is_a_batch_mean",
    "prepare_splits",
    "resume_checkpoint",
    "setup_logging",
    "start_run",
    "train_and_evaluate",
    "usable_length",
]
