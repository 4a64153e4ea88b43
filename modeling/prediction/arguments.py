"""The options of scripts/predict.py (`vaswani-predict`), named as transformers' example scripts and pipelines name
them, and the checks made on them before anything is read or loaded."""

from dataclasses import dataclass, field
from typing import Literal

from ..cli import POSITIVE, Allowed, at_least, check_numbers


TASKS = ("translation", "summarization", "text-classification", "token-classification")
GENERATION_TASKS = ("translation", "summarization")
AGGREGATIONS = ("none", "simple", "first", "average", "max")


@dataclass
class PredictionArguments:
    model: str = field(metadata={"help": "The model: a folder of this project's models, or a Hub id."})
    input_file: str = field(
        default=None,
        metadata={"help": "The corpus: a text file (one example a line), JSON Lines (.jsonl) or CSV (.csv) with "
                  "--text_column, or - for standard input. Or give --dataset_name instead."},
    )
    output_file: str = field(
        default=None, metadata={"help": "Where the outputs go, one line per input, in input order; - for standard output."}
    )
    task: Literal["translation", "summarization", "text-classification", "token-classification"] | None = field(
        default=None, metadata={"help": "What to run; default: the model's task (from its config)."}
    )
    # --- the input -----------------------------------------------------------------------------------------------
    input_format: Literal["text", "jsonl", "csv"] | None = field(
        default=None, metadata={"help": "How the input is written; default: by its suffix (.jsonl, .csv), else text."}
    )
    text_column: str | None = field(
        default=None,
        metadata={"help": "The column of JSON Lines, CSV or a Hub dataset that holds the text; default: the model's "
                  "source language (translation), document (summarization), text (classification, tagging)."},
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A dataset on the Hub, instead of --input_file."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "The Hub dataset's configuration."})
    split: str = field(default="test", metadata={"help": "The Hub dataset's split."})
    errors: Literal["strict", "replace"] = field(
        default="strict",
        metadata={"help": "A line that is not valid UTF-8: strict stops, naming the line; replace reads the bad bytes "
                  "as U+FFFD and goes on (counted at the end)."},
    )
    strict: bool = field(
        default=False,
        metadata={"help": "Refuse an input longer than the model reads (naming its line) instead of truncating it "
                  "(truncated inputs are counted at the end)."},
    )
    # --- the output ----------------------------------------------------------------------------------------------
    output_format: Literal["text", "jsonl"] | None = field(
        default=None,
        metadata={"help": "text: the output text or label, one line per input; jsonl: one JSON record per input, "
                  "with scores. Default: text, jsonl for token-classification (entities with their spans)."},
    )
    overwrite_output_file: bool = field(
        default=False,
        metadata={"help": "Replace an existing --output_file (and start over an unfinished run of other settings)."},
    )
    quiet: bool = field(default=False, metadata={"help": "No progress bar on standard error."})
    # --- batching and hardware ------------------------------------------------------------------------------------
    read_batch_size: int = field(
        default=4096,
        metadata={"help": "Examples read at a time (a window): sorted by length, batched, decoded, written in input "
                  "order; progress is recorded per window."},
    )
    batch_size: int = field(default=128, metadata={"help": "The most examples in a batch."})
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={"help": "The most input tokens in a batch, padding included (unset: --batch_size alone decides)."},
    )
    workers: int | None = field(
        default=None,
        metadata={"help": "On a CPU: batches decoded side by side, each by a process of its own with its share of the "
                  "cores (default: one per core, divided among the processes of a launch). On a GPU: 1."},
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        default="float32", metadata={"help": "The weights' precision; bfloat16 / float16 on a GPU."}
    )
    # --- decoding (translation, summarization): unset ones come from the model's generation config -------------
    num_beams: int | None = field(default=None, metadata={"help": "Beam size (1: greedy)."})
    max_new_tokens: int | None = field(default=None, metadata={"help": "Longest output, in tokens."})
    min_new_tokens: int | None = field(default=None, metadata={"help": "Shortest output, in tokens."})
    length_penalty: float | None = field(default=None, metadata={"help": "Beam length penalty alpha."})
    no_repeat_ngram_size: int | None = field(default=None, metadata={"help": "Never repeat an n-gram of this size."})
    early_stopping: bool | None = field(
        default=None,
        metadata={"help": "Beam search: stop an input once num_beams outputs are finished (CTranslate2's rule)."},
    )
    num_return_sequences: int = field(
        default=1, metadata={"help": "Outputs per input, best first (needs --output_format jsonl)."}
    )
    # --- tagging -------------------------------------------------------------------------------------------------
    aggregation_strategy: str = field(
        default="first", metadata={"help": f"token-classification: how pieces become entities, {list(AGGREGATIONS)}."}
    )


NUMBER_RULES = {
    "read_batch_size": POSITIVE,
    "batch_size": POSITIVE,
    "max_tokens_per_batch": at_least(1, meaning="unset: --batch_size alone"),
    "workers": at_least(1, meaning="unset: one per core"),
    "num_beams": at_least(1, optional=True),
    "max_new_tokens": at_least(1, optional=True),
    "min_new_tokens": at_least(0, optional=True),
    "length_penalty": Allowed(optional=True),
    "no_repeat_ngram_size": at_least(1, optional=True),
    "num_return_sequences": POSITIVE,
}
# A window is held in memory with its outputs; beams x batch rows are decoded at once
MOST_READ_BATCH = 1_000_000
MOST_BEAMS = 64


def check_arguments(args: PredictionArguments) -> None:
    """The options on their own, before anything is read: one line naming the option, the value and what is allowed."""
    check_numbers(args, NUMBER_RULES)
    if args.input_file is None and args.dataset_name is None:
        raise ValueError("Give the corpus: --input_file FILE (or - for standard input), or --dataset_name NAME.")
    if args.input_file is not None and args.dataset_name is not None:
        raise ValueError(f"--input_file {args.input_file} and --dataset_name {args.dataset_name} both give the corpus: "
                         "give one.")
    if args.output_file is None:
        raise ValueError("Give --output_file FILE (or - for standard output).")
    if args.read_batch_size > MOST_READ_BATCH:
        raise ValueError(f"--read_batch_size must be at most {MOST_READ_BATCH:,} (a window is held in memory); got "
                         f"{args.read_batch_size}.")
    if args.num_beams is not None and args.num_beams > MOST_BEAMS:
        raise ValueError(f"--num_beams must be at most {MOST_BEAMS}; got {args.num_beams}.")
    if args.aggregation_strategy not in AGGREGATIONS:
        raise ValueError(f"--aggregation_strategy must be one of {list(AGGREGATIONS)}; got "
                         f"{args.aggregation_strategy!r}.")


__all__ = ["GENERATION_TASKS", "PredictionArguments", "TASKS", "check_arguments"]
