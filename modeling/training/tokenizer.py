"""Learning the project's tokenizer from dataset columns (scripts/train_tokenizer.py, the `vaswani-train-tokenizer`
command): the texts read, a vocabulary learned (`VaswaniTokenizer.train_from_texts`), the folder written whole."""

import json
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..cli import POSITIVE, VOCAB_SIZE, at_least, check_numbers, run_command
from ..data.loading import (
    data_source,
    iter_texts,
    load_split,
    require_columns,
    require_text_rows,
    split_paths,
)
from ..output_paths import OutputFolder
from ..remote_code.tokenization_vaswani import VaswaniTokenizer


@dataclass
class TokenizerTrainingArguments:
    columns: list[str] = field(metadata={"help": "Text columns to learn from (source and target for translation)."})
    output_dir: str = field(metadata={"help": "Folder to save the tokenizer in."})
    train_file: str | None = field(default=None, metadata={"help": "Local data file(s), comma-separated."})
    dataset_name: str | None = field(default=None, metadata={"help": "A dataset on the Hub, instead."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    split: str = field(default="train", metadata={"help": "Hub dataset split."})
    vocab_size: int = field(default=8000, metadata={"help": "Size of the vocabulary, special and byte tokens included."})
    min_frequency: int = field(default=2, metadata={"help": "Merges seen fewer times than this are not learned."})
    language_codes: list[str] = field(default_factory=list, metadata={"help": "Add a >>xx<< tag token per code."})
    model_max_length: int = field(default=1024, metadata={"help": "Longest input the tokenizer truncates to."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Learn from the first N rows only."})
    split_punctuation: bool = field(
        default=False, metadata={"help": "Make every punctuation mark a piece of its own (no pieces like 'house.')."}
    )
    split_newlines: bool = field(
        default=False,
        metadata={"help": "Make every line break a piece of its own, the next line's first word a word start (no "
                  "pieces like '?\\nJerry:'; for texts made of lines, such as dialogues)."},
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (by default an existing folder is refused)."}
    )


NUMBER_RULES = {
    "vocab_size": VOCAB_SIZE,
    "min_frequency": POSITIVE,
    "model_max_length": POSITIVE,
    "max_train_samples": at_least(1, meaning="unset: every row"),
}


def _require_merges(tokenizer: VaswaniTokenizer, args: TokenizerTrainingArguments, rows: int) -> None:
    """A vocabulary that learned no subword (no merge) while --vocab_size left room for some spells every text
    character by character: refused, with the reason (--min_frequency above every pair's count)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str()).get("model", {})
    if not model.get("merges") and tokenizer.backend_tokenizer.get_vocab_size() < args.vocab_size:
        raise ValueError(
            f"No subword was learned from {rows} rows: no pair of characters occurs --min_frequency "
            f"{args.min_frequency} times in their texts, so the vocabulary would spell every word character by "
            "character. Lower --min_frequency (the default is 2), or give more text."
        )


def main(argv: list[str] | None = None) -> VaswaniTokenizer:
    (args,) = HfArgumentParser(TokenizerTrainingArguments).parse_args_into_dataclasses(args=argv)
    check_numbers(args, NUMBER_RULES)
    source = data_source(args.train_file, args.dataset_name, needed_by="Learning a vocabulary")
    inputs = {"--train_file": split_paths(args.train_file or "")}
    with OutputFolder(args.output_dir, inputs, overwrite=args.overwrite_output_dir) as output:
        dataset = load_split(source, args.split, args.dataset_config_name)
        require_columns(dataset, args.columns, where=source)
        if args.max_train_samples is not None:
            dataset = dataset.select(range(min(args.max_train_samples, len(dataset))))
        if len(dataset) == 0:
            raise ValueError(f"{source} has no rows to learn a vocabulary from.")
        require_text_rows(dataset, args.columns, where=source)
        tokenizer = VaswaniTokenizer.train_from_texts(
            iter_texts(dataset, args.columns),
            vocab_size=args.vocab_size,
            min_frequency=args.min_frequency,
            language_codes=args.language_codes,
            model_max_length=args.model_max_length,
            split_punctuation=args.split_punctuation,
            split_newlines=args.split_newlines,
        )
        _require_merges(tokenizer, args, len(dataset))
        with output.publish() as folder:
            tokenizer.save_pretrained(folder)
    print(f"Saved a tokenizer of {len(tokenizer)} tokens, learned from {len(dataset)} rows, to {args.output_dir}")
    return tokenizer


def console_main() -> None:
    """The `vaswani-train-tokenizer` command."""
    run_command(main)


__all__ = ["TokenizerTrainingArguments", "console_main", "main"]
