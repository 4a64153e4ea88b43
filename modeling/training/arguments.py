"""What `scripts/train.py` accepts: three typed dataclasses (data, model, training), filled from an experiment config
file (YAML or JSON) and then from the command line, which overrides the file.

    python scripts/train.py --config scripts/configs/multi30k_en_de.yaml --max_steps 2000 --mixed_precision bf16

The data options are those of transformers' example scripts: `--train_file` / `--validation_file` (local files) or
`--dataset_name` (a dataset on the Hub, or `synthetic`), `--max_train_samples`, `--config_overrides "key=value,..."`.

The training defaults are the paper's recipe (section 5.3 and 5.4): Adam with beta (0.9, 0.98) and eps 1e-9, a
learning rate that rises linearly for 4,000 warmup updates and then decays with the inverse square root of the
update number, label smoothing 0.1, dropout 0.1, and batches of about 25,000 source + 25,000 target tokens.
"""

import argparse
import difflib
import json
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

import yaml
from transformers import HfArgumentParser

from ..cli import (
    FRACTION,
    POSITIVE,
    SEED,
    VOCAB_SIZE,
    Allowed,
    at_least,
    check_numbers,
    format_config_overrides,
    given_options,
    parse_config_overrides,
)
from ..data.arguments import TrainingDataArguments
from ..evaluation.metrics.names import TASK_METRICS, retired_metric


PROGRAM = "train.py"
SYNTHETIC_DATASET = "synthetic"
TRAINING_DATA_OPTIONS = ("train_file", "dataset_name")  # one of them names the training data


@dataclass
class TrainDataArguments(TrainingDataArguments):
    # the data options every training command shares are vaswani.data.arguments'; these three say what train.py does
    # differently: no data named is its synthetic task, some training pairs stand in for a missing validation split,
    # and the validation loss uses every pair
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": f"A dataset on the Hub, or '{SYNTHETIC_DATASET}' for the toy English->German task this project "
            f"generates (no download). Neither this nor --train_file: '{SYNTHETIC_DATASET}'."
        },
    )
    validation_file: str | None = field(
        default=None,
        metadata={"help": "Local validation file(s). Unset: the Hub dataset's --validation_split, or a few pairs held "
                  "out of --train_file."},
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Score BLEU / ROUGE on the first N validation pairs only (loss uses all)."}
    )
    task: Literal["translation", "summarization"] = field(
        default="translation",
        metadata={"help": "Decides the metrics: sacreBLEU and tokenized BLEU for translation, ROUGE for summaries."},
    )
    source_column: str = field(default="en", metadata={"help": "Column of the source text (e.g. en, document)."})
    target_column: str = field(default="de", metadata={"help": "Column of the target text (e.g. de, summary)."})
    source_lang: str | None = field(
        default=None,
        metadata={"help": "Written into the model config (translation). Rows in transformers' translation format, "
                  "{\"translation\": {\"en\": ..., \"de\": ...}}, take the source text from this key."},
    )
    target_lang: str | None = field(
        default=None,
        metadata={"help": "Written into the model config (translation), whose language rules tokenized BLEU applies "
                  "(unset: en); the key of the target text in rows of transformers' translation format."},
    )
    max_source_length: int = field(default=256, metadata={"help": "Longest source, in tokens."})
    max_target_length: int = field(default=256, metadata={"help": "Longest target, in tokens."})
    too_long: Literal["drop", "truncate"] = field(
        default="drop",
        metadata={"help": "What to do with a pair longer than the limits: drop it, or truncate it (summarization)."},
    )
    synthetic_train_size: int = field(default=20000, metadata={"help": "Pairs in the synthetic training split."})
    synthetic_validation_size: int = field(default=500, metadata={"help": "Pairs in the synthetic validation split."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    bpe_dropout: float = field(
        default=0.0,
        metadata={"help": "Not in the paper: BPE-dropout (Provilkov et al., 2020), the probability of skipping each "
                  "BPE merge when the training pairs are segmented, drawn anew every epoch; validation and the saved "
                  "tokenizer segment as usual. 0: off; the authors use 0.1."},
    )

    def __post_init__(self):
        if self.train_file is None and self.dataset_name is None:
            self.dataset_name = SYNTHETIC_DATASET  # the default task, named in the run's record as before


@dataclass
class TrainModelArguments:
    preset: Literal["tiny", "small", "base", "big"] = field(
        default="small", metadata={"help": "Model size (VaswaniConfig.from_preset)."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Further config fields, e.g. 'encoder_layers=2,d_model=128' (a config file may give them as "
                  "a mapping)."},
    )
    dropout: float = field(default=0.1, metadata={"help": "P_drop of the paper (base model: 0.1)."})
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon_ls of the paper: 0.1."})
    tokenizer: str | None = field(
        default=None, metadata={"help": "A saved tokenizer folder. Unset: learn one from the training data."}
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of a tokenizer learned here."})
    split_punctuation: bool = field(
        default=False,
        metadata={"help": "A tokenizer learned here makes every punctuation mark a piece of its own (as Moses "
                  "tokenization before BPE does), instead of learning pieces such as 'house.'."},
    )
    split_newlines: bool = field(
        default=False,
        metadata={"help": "A tokenizer learned here makes every line break a piece of its own and the first word of "
                  "each line a word start, instead of learning pieces such as '?\\nJerry:' (dialogues, e-mails)."},
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations to save memory."})


@dataclass
class TrainArguments:
    output_dir: str = field(default="outputs/run", metadata={"help": "Where checkpoints, models and logs go."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start over in a non-empty output_dir."})
    resume: bool = field(
        default=False, metadata={"help": "Continue from the latest checkpoint in output_dir (start if there is none)."}
    )
    seed: int = field(default=42)
    max_steps: int = field(default=100_000, metadata={"help": "Updates to train for (the paper: 100,000 for base)."})
    max_epochs: int | None = field(default=None, metadata={"help": "Stop after this many passes over the data."})
    max_tokens_per_batch: int = field(
        default=4096,
        metadata={"help": "Token budget of one micro-batch on one process, counted for source and target each."},
    )
    tokens_per_update: int = field(
        default=25_000,
        metadata={
            "help": "Target tokens per update over all processes; gradient accumulation makes up the difference "
            "(the paper: about 25,000)."
        },
    )
    exact_tokens_per_update: bool = field(
        default=False,
        metadata={"help": "Make every update --tokens_per_update tokens a side on any number of processes: the fewest "
                  "micro-batches per process of at most --max_tokens_per_batch, each cut to tokens_per_update / "
                  "(processes x micro-batches), e.g. 25,000 = 1 x 25,000 = 8 x 3,125 = 16 x 1,562 (the batches then "
                  "depend on the number of processes, which a resume keeps). False: micro-batches of "
                  "--max_tokens_per_batch, as many as come nearest (on 8 processes of 4,096: 32,768 an update)."},
    )
    learning_rate: float | None = field(
        default=None,
        metadata={"help": "Peak learning rate, reached at the end of warmup. Unset: the paper's d_model^-0.5 * "
                  "warmup_steps^-0.5."},
    )
    warmup_steps: int = field(default=4000, metadata={"help": "Linear warmup updates (the paper: 4,000)."})
    cooldown_steps: int = field(
        default=0,
        metadata={"help": "Not in the paper: scale the learning rate linearly down to zero over the last N updates "
                  "before max_steps (0: no cooldown, the paper's schedule to the end)."},
    )
    adam_beta1: float = field(default=0.9)
    adam_beta2: float = field(default=0.98)
    adam_epsilon: float = field(default=1e-9)
    weight_decay: float = field(default=0.0)
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Clip the gradient norm to this (not in the paper); 0 turns clipping off."}
    )
    mixed_precision: Literal["no", "fp16", "bf16"] | None = field(
        default=None,
        metadata={"help": "Unset: what `accelerate launch` / its config says; run without it, bf16 on a GPU that "
                  "supports it, else no (fp32)."},
    )
    logging_steps: int = field(default=50, metadata={"help": "Log training loss, lr and tokens/s every N updates."})
    eval_steps: int = field(default=1000, metadata={"help": "Evaluate every N updates (and at the end)."})
    save_steps: int = field(default=1000, metadata={"help": "Save a full checkpoint every N updates (and at the end)."})
    keep_checkpoints: int = field(default=5, metadata={"help": "Keep the last N full checkpoints (for averaging)."})
    eval_num_beams: int = field(default=4, metadata={"help": "Beam size when scoring (the paper: 4)."})
    eval_length_penalty: float = field(default=0.6, metadata={"help": "Length penalty when scoring (the paper: 0.6)."})
    eval_max_new_tokens: int = field(default=128)
    eval_batch_size: int = field(default=64, metadata={"help": "Sentences per generation batch, per process."})
    best_metric: str = field(
        default="auto",
        metadata={"help": "Which score picks the best model: sacrebleu or tokenized_bleu (translation), rouge1, "
                  "rouge2, rougeL or rougeLsum (summarization), or loss; auto = sacrebleu for translation, rougeL "
                  "for summarization."},
    )
    early_stopping_patience: int | None = field(
        default=None, metadata={"help": "Stop after N evaluations without a better best_metric."}
    )
    report_to: Literal["auto", "tensorboard", "none"] = field(
        default="auto", metadata={"help": "Where to log: tensorboard, none, or auto (tensorboard where installed)."}
    )
    torch_compile: bool = field(
        default=False,
        metadata={"help": "Not in the paper: train through torch.compile(model, fullgraph=True) (inductor on a GPU), "
                  "with batches padded to a few shapes (lengths and pair counts rounded up to 8, 16, ..., 64, 80, "
                  "96, ...) so that the compiled graphs are reused (other batches, so fixed on resume); evaluation and "
                  "generation stay eager."},
    )
    cuda_graphs: bool = field(
        default=False,
        metadata={"help": "Not in the paper: replay each update's forward and backward from CUDA graphs, captured once "
                  "per batch shape (the batches padded to a few shapes, as with --torch_compile): the host launches "
                  "two graphs an update instead of every kernel, for small models whose GPU waits on the host. One "
                  "process on a CUDA GPU; alone, fp32 and one micro-batch an update; with --torch_compile, the "
                  "compiled update and the optimizer's step (fp32 or bf16, micro-batches added in place). Evaluation "
                  "and generation stay eager."},
    )
    chunked_loss: bool = field(
        default=False,
        metadata={"help": "Not in the paper: compute the updates' loss from the decoder's last hidden state and the "
                  "output projection a chunk of rows at a time, with its gradients (vaswani.training.chunked_loss), "
                  "instead of the logits of the whole batch at once: the same loss, and far less memory at a large "
                  "vocabulary. One process; evaluation and generation use the model's own output layer."},
    )
    dataloader_num_workers: int | None = field(
        default=None,
        metadata={"help": "Processes that read and pad the training batches ahead of the updates (the batches are the "
                  "same). Unset: 2 on a GPU (the batches also go to pinned memory), 0 on a CPU."},
    )
    cpu_threads: int | None = field(
        default=None,
        metadata={"help": "Threads for CPU math (torch.set_num_threads); unset: PyTorch's default. On a CPU that "
                  "other work shares, 1 can be many times faster."},
    )


ARGUMENT_CLASSES = (TrainDataArguments, TrainModelArguments, TrainArguments)

# Options a resumed run may change: they take effect from the update it resumes at (a new learning rate, warmup or
# cooldown reshapes the schedule from there; a new max_steps lengthens or shortens the run). Every other option is
# fixed by the checkpoint (the model, the data and their order, the batches, the optimizer's settings, the seed), and
# `--resume` with a different value is refused before anything is loaded.
CHANGEABLE_ON_RESUME = (
    "output_dir", "overwrite_output_dir", "resume", "max_steps", "max_epochs", "learning_rate", "warmup_steps",
    "cooldown_steps", "max_grad_norm", "logging_steps", "eval_steps", "save_steps", "keep_checkpoints",
    "eval_num_beams", "eval_length_penalty", "eval_max_new_tokens", "eval_batch_size", "max_eval_samples",
    "best_metric", "early_stopping_patience", "report_to", "cpu_threads", "preprocessing_num_workers",
    "dataloader_num_workers", "chunked_loss",
)


# Options fixed by a checkpoint that checkpoints written before them do not record: the value those runs had.
# (batches not padded to a few shapes; micro-batches of --max_tokens_per_batch)
OPTIONS_OF_OLDER_CHECKPOINTS = {"torch_compile": False, "cuda_graphs": False, "exact_tokens_per_update": False}


def options_changed_on_resume(saved: dict, current: dict) -> list[str]:
    """`--name saved -> current` for each option fixed by the checkpoint whose value differs."""
    saved = {**OPTIONS_OF_OLDER_CHECKPOINTS, **saved}
    return [
        f"--{name} {saved[name]!r} -> {current[name]!r}"
        for name in current
        if name not in CHANGEABLE_ON_RESUME and name in saved and not _same_value(name, saved[name], current[name])
    ]


def _same_value(name: str, saved, current) -> bool:
    """Config overrides are the same when they set the same fields to the same values, however they are written."""
    if name == "config_overrides" and saved is not None and current is not None:
        return parse_config_overrides(saved) == parse_config_overrides(current)
    return saved == current


# What each numeric option allows (vaswani.cli.check_numbers holds every other one to a finite value of its type).
NUMBER_RULES = {
    **dict.fromkeys(
        ("max_source_length", "max_target_length", "max_steps", "max_tokens_per_batch",
         "tokens_per_update", "logging_steps", "eval_steps", "save_steps", "keep_checkpoints", "eval_num_beams",
         "eval_max_new_tokens", "eval_batch_size", "warmup_steps", "max_train_samples", "max_eval_samples",
         "synthetic_train_size", "synthetic_validation_size", "preprocessing_num_workers", "cpu_threads"),
        POSITIVE,
    ),
    "max_epochs": at_least(1, meaning="unset: --max_steps alone ends the run"),
    "dataloader_num_workers": at_least(0, meaning="0: the training process reads its batches itself; unset: 2 on a "
                                       "GPU, 0 on a CPU"),
    "early_stopping_patience": at_least(1, meaning="evaluations without a better --best_metric; unset: never stop "
                                        "early"),
    "seed": SEED,
    "vocab_size": VOCAB_SIZE,
    "learning_rate": Allowed(minimum=0, above=True, meaning="unset: the paper's peak"),
    "adam_beta1": FRACTION,
    "adam_beta2": FRACTION,
    # Adam divides by sqrt(v) + eps, and v stays 0 for weights that get no gradient (the padding embedding)
    "adam_epsilon": Allowed(minimum=0, above=True),
    "weight_decay": at_least(0, integer=False),
    "max_grad_norm": at_least(0, integer=False, meaning="0 turns clipping off"),
    "dropout": FRACTION,
    "label_smoothing": FRACTION,
    "bpe_dropout": Allowed(minimum=0, maximum=1, below=True, meaning="the probability of skipping a merge; 0: off"),
}


def _check_arguments(data: TrainDataArguments, model: TrainModelArguments, train: TrainArguments) -> None:
    """Values that parse but make no sense, reported with the option's name, its value and what is allowed: every
    number first (a run that would train no update is among them: --max_steps, --max_epochs and --max_train_samples
    are at least 1), then the options that depend on each other."""
    check_numbers((data, model, train), NUMBER_RULES)
    longest = max(data.max_source_length, data.max_target_length)
    if train.max_tokens_per_batch < longest:
        raise ValueError(
            f"--max_tokens_per_batch ({train.max_tokens_per_batch}) is smaller than the longest allowed sequence "
            f"({longest} tokens, from --max_source_length/--max_target_length): such a pair could never be batched."
        )
    if not 0 <= train.cooldown_steps <= train.max_steps:
        raise ValueError(
            f"--cooldown_steps must be between 0 and --max_steps ({train.max_steps}), got {train.cooldown_steps}: "
            "the cooldown is the last part of the run (a config's cooldown_steps may need lowering, or 0, together "
            "with a shorter --max_steps)."
        )
    overrides = parse_config_overrides(model.config_overrides)
    for name in ("dropout", "label_smoothing"):
        if name in overrides:
            raise ValueError(f"Set {name} with --{name}, not inside --config_overrides.")
    _check_best_metric(data.task, train.best_metric)


# What --best_metric may name for each task (every score the task's evaluation logs), and what auto picks.
BEST_METRICS = {task: ("auto", "loss", *TASK_METRICS[task]) for task in ("translation", "summarization")}
AUTO_BEST_METRIC = {"translation": "sacrebleu", "summarization": "rougeL"}


def _check_best_metric(task: str, name: str) -> None:
    if (retired := retired_metric(name)) is not None:
        raise ValueError(f"--best_metric {name}: {retired}.")
    if name not in BEST_METRICS[task]:
        raise ValueError(f"--best_metric {name} is not scored for --task {task}; it may be one of "
                         f"{list(BEST_METRICS[task])}.")


def best_metric_name(data: TrainDataArguments, train: TrainArguments) -> str:
    """The score that decides the best model: --best_metric, or for auto the task's usual one."""
    return AUTO_BEST_METRIC[data.task] if train.best_metric == "auto" else train.best_metric


def load_config_file(path: str) -> dict:
    """An experiment config: a flat mapping of option names to values, in YAML (.yaml/.yml) or JSON."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--config {path}: no such file.")
    text = file.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"--config {path} is not valid {'JSON' if file.suffix == '.json' else 'YAML'}: {error}")
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"--config {path} must hold a mapping of option names to values.")
    known = {f.name: f for cls in ARGUMENT_CLASSES for f in fields(cls)}
    for key, value in values.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ValueError(f"--config {path}: unknown option {key!r}{hint}")
        if key == "config_overrides" and isinstance(value, dict):
            values[key] = format_config_overrides(value)  # the command line takes them as key=value pairs
    return values


def parse_arguments(argv: list[str] | None = None) -> tuple[TrainDataArguments, TrainModelArguments, TrainArguments]:
    """Defaults < values of `--config FILE` < the rest of the command line. Training data named on the command line
    (--train_file or --dataset_name) replace the config's, whichever of the two it names them with."""
    argv = sys.argv[1:] if argv is None else list(argv)
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", default=None)
    known, _ = config_parser.parse_known_args(argv)

    parser = HfArgumentParser(ARGUMENT_CLASSES)
    parser.add_argument("--config", default=None, help="Experiment config file (YAML or JSON); the options given on "
                        "the command line override its values.")
    if known.config:
        values = load_config_file(known.config)
        if given_options(argv) & set(TRAINING_DATA_OPTIONS):
            for name in TRAINING_DATA_OPTIONS:
                values.pop(name, None)
        parser.set_defaults(**values)
    data, model, train, _config = parser.parse_args_into_dataclasses(args=argv)
    _check_arguments(data, model, train)
    return data, model, train


def arguments_as_dict(*arguments) -> dict:
    """All options in one flat mapping: saved with the run, and shown to TensorBoard."""
    merged = {}
    for group in arguments:
        merged.update(asdict(group))
    return merged


__all__ = [
    "CHANGEABLE_ON_RESUME",
    "SYNTHETIC_DATASET",
    "TrainArguments",
    "TrainDataArguments",
    "TrainModelArguments",
    "arguments_as_dict",
    "best_metric_name",
    "load_config_file",
    "options_changed_on_resume",
    "parse_arguments",
]
