"""Score a summary made of the document's own lines or sentences, with no model: the floor a trained summarizer must
beat, written as a results file of the same form as scripts/evaluate_model.py's, so the results table shows it as a
row of its own beside the models.

    python scripts/extractive_baseline.py --validation_file ../shared/data/samsum/validation.jsonl \
        --dataset_label knkarthick/samsum --method first_lines --count 3 \
        --output_file results/samsum_first_3/evaluation_results.json

    python scripts/extractive_baseline.py --validation_file ../shared/data/aeslc/validation.jsonl \
        --dataset_label Yale-LILY/aeslc --method lead_sentence --max_words 20 --output_file results/aeslc_lead/...

The data and their name in the results file are given as to scripts/evaluate_model.py (`--validation_file`,
`--test_file` or `--dataset_name` with `--split`; `--dataset_label`).

Methods (vaswani.evaluation.extractive): `first_lines` (the first N lines: a dialogue's first N utterances),
`longest_lines` (the N longest lines, in the document's order), `lead_sentence` (the first sentence of at least
`--min_sentence_words` words, cut to `--max_words` words). ROUGE as evaluate_model.py scores a model.
"""

import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from vaswani.cli import run_command
from vaswani.evaluation.extractive import METHODS, extract
from vaswani.evaluation.scoring import EvaluatedSplitArguments, rouge_metrics, write_results
from vaswani.output_paths import check_output_file


DESCRIPTIONS = {
    "first_lines": "the first {count} non-empty lines of each document",
    "longest_lines": "the {count} longest non-empty lines of each document (in characters), in the document's order",
    "lead_sentence": "the first sentence of each document with at least {min_sentence_words} words, cut to "
                     "{max_words} words (empty where there is none)",
}


@dataclass
class BaselineArguments:
    method: str = field(metadata={"help": f"How the summary is taken from the document: {list(METHODS)}."})
    output_file: str = field(metadata={"help": "Where to write the results (the form of evaluate_model.py's)."})
    source_column: str = field(default="document", metadata={"help": "The documents."})
    target_column: str = field(default="summary", metadata={"help": "The reference summaries."})
    count: int = field(default=3, metadata={"help": "first_lines / longest_lines: how many lines."})
    min_sentence_words: int = field(default=4, metadata={"help": "lead_sentence: shorter sentences are skipped."})
    max_words: int = field(default=20, metadata={"help": "lead_sentence: the sentence is cut to N words."})


def check_arguments(args: BaselineArguments) -> None:
    if args.method not in METHODS:
        raise ValueError(f"--method {args.method!r} is not one of {list(METHODS)}.")
    for name in ("count", "min_sentence_words", "max_words"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}.")


def main(argv: list[str] | None = None) -> dict:
    args, data = HfArgumentParser((BaselineArguments, EvaluatedSplitArguments)).parse_args_into_dataclasses(args=argv)
    check_arguments(args)
    data.source()  # bad data options stop here, before the output is checked against the data files
    check_output_file(args.output_file, data.files())
    dataset, _, dataset_record = data.load({"source": args.source_column, "target": args.target_column})
    started = time.perf_counter()
    settings = {"count": args.count, "min_sentence_words": args.min_sentence_words, "max_words": args.max_words}
    summaries = [
        extract(document if isinstance(document, str) else "", args.method, **settings)
        for document in dataset[args.source_column]
    ]
    description = DESCRIPTIONS[args.method].format(**settings)
    results = write_results(
        args.output_file, model=f"none: extractive baseline ({description})", task="summarization",
        dataset=dataset_record,
        decoding={}, metrics=rouge_metrics(summaries, dataset[args.target_column]),
        conventions=f"No model: the summary is {description} (scripts/extractive_baseline.py --method {args.method})."
                    " ROUGE F-measures (0-100) from rouge-score with Porter stemming, averaged over examples, as for "
                    "the models.",
        seconds=time.perf_counter() - started,
    )
    print(", ".join(f"{metric['name']} {metric['value']}" for metric in results["metrics"]))
    print(f"Wrote {args.output_file}")
    return results


if __name__ == "__main__":
    run_command(main)
