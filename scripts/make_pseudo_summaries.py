"""Self-supervised pretraining pairs for summarization: each document paired with its own lead sentence, or with
some of its own lines (`--method`).

    python scripts/make_pseudo_summaries.py --train_file ../shared/data/aeslc/train.jsonl --column document \
        --output_dir outputs/aeslc_lead_data

A small summarization set (AESLC: 14,436 e-mails, ~120,000 subject-line tokens) is too little signal for a model
trained from scratch to learn to read its source: the decoder learns a language model of the targets and ignores the
encoder (see the AESLC notes in scripts/configs/recipes.yaml). These pairs give it that signal from the documents
alone, with no labels: the target is the document's first sentence of at least `--min_sentence_words` words (the
"Lead" choice of PEGASUS's gap-sentence pretraining, Zhang et al. 2020), cut to `--max_target_words` words and left
in the source, so the model learns to find that sentence and copy it. Train on them with `scripts/train.py`, then
fine-tune on the real summaries with `scripts/finetune_seq2seq.py --model_name_or_path` (the AESLC recipe).

Writes `train.jsonl` and `validation.jsonl` (the last `--validation_size` usable documents, held out) to
`--output_dir`, each row `{"document": ..., "summary": ...}`. Documents without a sentence of
`--min_sentence_words` words are left out, and counted. With `--reference_column summary` it also scores the lead
sentences against the real summaries with ROUGE, as `scripts/evaluate_model.py` scores a model (the lead baseline):

    python scripts/make_pseudo_summaries.py --train_file ../shared/data/aeslc/validation.jsonl --validation_size 0 \
        --reference_column summary --output_dir outputs/aeslc_lead_baseline

The documents come from `--train_file` (local files), or from a dataset on the Hub (`--dataset_name`, with
`--dataset_config_name` and `--split`).

A dialogue has no lead sentence that sums it up; `--method longest_lines --count 2` pairs it with its two longest
utterances instead, speaker names included, in the dialogue's order (the SAMSum recipe), and `--method first_lines`
with its first lines (vaswani.evaluation.extractive).
"""

from dataclasses import dataclass, field

from transformers import HfArgumentParser

from vaswani.cli import run_command
from vaswani.data.loading import (
    data_source,
    load_split,
    require_columns,
    require_text,
    split_paths,
    write_train_validation,
)
from vaswani.evaluation.extractive import METHODS, extract
from vaswani.evaluation.metrics import compute_scores, score_values
from vaswani.output_paths import OutputFolder


@dataclass
class PseudoSummaryArguments:
    output_dir: str = field(metadata={"help": "Folder for train.jsonl and validation.jsonl."})
    train_file: str | None = field(default=None, metadata={"help": "Local data file(s), comma-separated."})
    dataset_name: str | None = field(default=None, metadata={"help": "A dataset on the Hub, instead."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    split: str = field(default="train", metadata={"help": "Hub dataset split."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use the first N documents only."})
    column: str = field(default="document", metadata={"help": "The column holding the documents."})
    method: str = field(default="lead_sentence", metadata={"help": f"What the target is: {list(METHODS)}."})
    count: int = field(default=2, metadata={"help": "first_lines / longest_lines: how many lines."})
    min_sentence_words: int = field(default=4, metadata={"help": "lead_sentence: shorter sentences are not chosen."})
    max_target_words: int = field(default=20, metadata={"help": "lead_sentence: the sentence is cut to N words."})
    validation_size: int = field(default=500, metadata={"help": "Documents held out for validation."})
    reference_column: str | None = field(
        default=None, metadata={"help": "Also score the extracted targets against this column (ROUGE) and print it."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (by default an existing folder is refused)."}
    )


def main(argv: list[str] | None = None) -> dict[str, int | float]:
    (args,) = HfArgumentParser(PseudoSummaryArguments).parse_args_into_dataclasses(args=argv)
    if args.method not in METHODS:
        raise ValueError(f"--method {args.method!r} is not one of {list(METHODS)}.")
    for name in ("count", "min_sentence_words", "max_target_words"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}.")
    if args.validation_size < 0:
        raise ValueError(f"--validation_size must be 0 or more, got {args.validation_size}.")
    if args.max_train_samples is not None and args.max_train_samples < 1:
        raise ValueError(f"--max_train_samples must be at least 1, got {args.max_train_samples}.")
    source = data_source(args.train_file, args.dataset_name, needed_by="Making pairs")
    inputs = {"--train_file": split_paths(args.train_file or "")}
    with OutputFolder(args.output_dir, inputs, overwrite=args.overwrite_output_dir) as output:
        dataset = load_split(source, args.split, args.dataset_config_name)
        columns = [args.column] + ([args.reference_column] if args.reference_column else [])
        require_columns(dataset, columns, where=source)
        require_text(dataset, columns, where=source)  # a number or a list is named (a null: a document left out)
        if args.max_train_samples is not None:
            dataset = dataset.select(range(min(args.max_train_samples, len(dataset))))
        pairs, extracts = [], []
        for document in dataset[args.column]:
            summary = ""
            if isinstance(document, str):
                summary = extract(document, args.method, args.count, args.min_sentence_words, args.max_target_words)
            extracts.append(summary)
            if summary:
                pairs.append({"document": document, "summary": summary})
        if len(pairs) <= args.validation_size:
            raise ValueError(
                f"{source}: only {len(pairs)} of {len(dataset)} documents have a usable sentence or line, not more "
                f"than --validation_size {args.validation_size}; lower it, or --min_sentence_words."
            )
        with output.publish() as folder:
            cut = write_train_validation(pairs, folder, args.validation_size)
    counts = {
        "documents": len(dataset), "train": cut, "validation": len(pairs) - cut, "left_out": len(dataset) - len(pairs)
    }
    print(
        f"{counts['documents']} documents -> {counts['train']} training and {counts['validation']} validation pairs "
        f"in {args.output_dir} ({counts['left_out']} without a usable sentence left out)."
    )
    if args.reference_column:
        # every document counts: one without a lead sentence scores an empty prediction
        rouge = score_values(compute_scores("summarization", extracts, dataset[args.reference_column]))
        counts.update({name: round(value, 2) for name, value in rouge.items()})
        scores = ", ".join(f"{name} {value:.2f}" for name, value in rouge.items())
        print(f"{args.method} baseline against {args.reference_column}: {scores}")
    return counts


if __name__ == "__main__":
    run_command(main)
