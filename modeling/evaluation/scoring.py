"""Score a fine-tuned model on a dataset split, through the pipelines a user would call: the project's
translation / summarization pipelines (`vaswani.pipelines`), and transformers' own `text-classification` and
`token-classification` pipelines.

Each `score_*` function takes the pipeline and the rows, and returns the metrics as entries of the results file
(`{"type", "name", "value", "signature"?}`, see scripts/evaluate_model.py); the two generative ones also return the
texts the model wrote, so that the caller can check them (`vaswani.evaluation.diagnostics.output_diversity`).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import datasets
from transformers import Pipeline

from ..data.arguments import DataArguments
from ..data.label_sets import LabelSet
from ..data.loading import evaluated_source, split_paths
from ..data.splits import load_checked_split
from .metrics import compute_scores
from ..output_paths import write_text_atomically


TEXT_ROLES = ("source", "target", "text")  # the columns of one text per row, by role (the others: labels, word lists)


@dataclass
class EvaluatedSplitArguments(DataArguments):
    """The split a results file scores (scripts/evaluate_model.py, scripts/extractive_baseline.py), and how the file
    names it: the data options every command shares (vaswani.data.arguments), a test split, and its name."""

    test_file: str | None = field(
        default=None, metadata={"help": "Local file(s) of a test split, as --validation_file."}
    )
    split: str | None = field(
        default=None,
        metadata={"help": "The split: of the Hub dataset, and recorded in the results either way (default: "
                  "validation; test with --test_file)."},
    )
    dataset_label: str | None = field(
        default=None,
        metadata={"help": "The dataset's name in the results (e.g. the Hub id of a local copy); default: "
                  "--dataset_name, else the file as given."},
    )

    def source(self) -> tuple[str, str]:
        """(the data, the split recorded), checked before anything is loaded (vaswani.data.loading.evaluated_source)."""
        if self.max_eval_samples is not None and self.max_eval_samples < 1:
            raise ValueError(f"--max_eval_samples must be at least 1, got {self.max_eval_samples}.")
        return evaluated_source(self.validation_file, self.test_file, self.dataset_name, self.split)

    def files(self) -> dict[str, list[str]]:
        """The local files given, by option: what the results file must not overwrite (vaswani.output_paths)."""
        return {
            "--validation_file": split_paths(self.validation_file or ""),
            "--test_file": split_paths(self.test_file or ""),
        }

    def load(self, columns: dict[str, str]) -> tuple[datasets.Dataset, str, dict]:
        """The rows to score (with `columns` by role, each with a value; a string for the roles that are text),
        where they came from (for messages), and the results file's `dataset` entry."""
        source, split = self.source()
        text_columns = [column for role, column in columns.items() if role in TEXT_ROLES]
        dataset, where = load_checked_split(
            source, split, self.dataset_config_name, list(columns.values()), self.max_eval_samples, "evaluation",
            text_columns,
        )
        record = {"name": self.dataset_label or source, "config": self.dataset_config_name, "split": split,
                  "columns": columns, "num_examples": len(dataset)}
        return dataset, where, record


GROUPED_AGGREGATIONS = ("simple", "first", "average", "max")


def _in_length_order(texts: Sequence[str]) -> list[int]:
    """Indices of `texts` from the longest to the shortest: batches of similar lengths waste little on padding."""
    return sorted(range(len(texts)), key=lambda index: -len(texts[index]))


def run_pipeline(pipe: Pipeline, texts: Sequence[str], batch_size: int, **call_kwargs) -> list:
    """The pipeline's output for each text, in the order of `texts` (they are batched by length)."""
    order = _in_length_order(texts)
    outputs = pipe([texts[index] for index in order], batch_size=batch_size, **call_kwargs)
    results = [None] * len(texts)
    for index, output in zip(order, outputs):
        results[index] = output
    return results


def run_bounded_by_input(pipe: Pipeline, texts: Sequence[str], batch_size: int, extra: int, max_positions: int,
                         **call_kwargs) -> list:
    """The pipeline's output for each text, in the order of `texts`, each batch generating up to the length of its
    longest input + `extra` tokens (the paper's "input length + 50", as tensor2tensor bounds a padded batch), at most
    `max_positions` - 1: the texts are batched from the longest to the shortest, in tokens as the encoder gets them."""
    lengths = [len(ids) for ids in pipe.tokenizer(list(texts))["input_ids"]]
    order = sorted(range(len(texts)), key=lambda index: -lengths[index])
    results = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        bound = min(max(lengths[index] for index in batch) + extra, max_positions - 1)
        outputs = pipe([texts[index] for index in batch], batch_size=batch_size, max_new_tokens=bound, **call_kwargs)
        for index, output in zip(batch, outputs, strict=True):
            results[index] = output
    return results


def score_translation(
    pipe: Pipeline, sources, references, batch_size: int, target_lang: str, compound_split: bool = False,
    over_input: tuple[int, int] | None = None, **generate_kwargs
) -> tuple[list[dict], list[str]]:
    """The translations and their scores; with `over_input` (extra tokens, the model's positions), each batch's
    outputs bounded by its longest input (`run_bounded_by_input`) instead of a `max_new_tokens` of generate_kwargs."""
    if over_input is not None:
        outputs = run_bounded_by_input(pipe, sources, batch_size, *over_input, **generate_kwargs)
    else:
        outputs = run_pipeline(pipe, sources, batch_size, **generate_kwargs)
    hypotheses = [output["translation_text"] for output in outputs]
    scores = compute_scores("translation", hypotheses, references, target_lang=target_lang,
                            compound_split=compound_split)
    return [score.as_entry() for score in scores], hypotheses


def rouge_metrics(summaries: Sequence[str], references: Sequence[str]) -> list[dict]:
    """ROUGE-1/2/L/Lsum of `summaries` against `references`, as entries of the results file."""
    return [score.as_entry() for score in compute_scores("summarization", summaries, references)]


def score_summarization(
    pipe: Pipeline, documents, references, batch_size: int, over_input: tuple[int, int] | None = None,
    **generate_kwargs
) -> tuple[list[dict], list[str]]:
    if over_input is not None:
        outputs = run_bounded_by_input(pipe, documents, batch_size, *over_input, **generate_kwargs)
    else:
        outputs = run_pipeline(pipe, documents, batch_size, **generate_kwargs)
    summaries = [output["summary_text"] for output in outputs]
    return rouge_metrics(summaries, references), summaries


def score_text_classification(pipe: Pipeline, texts, labels, label_set: LabelSet, batch_size: int, where: str):
    references = [label_set.to_id(value, f"row {row} of {where}") for row, value in enumerate(labels)]
    outputs = run_pipeline(pipe, texts, batch_size, truncation=True)
    predictions = [label_set.label2id[output["label"]] for output in outputs]
    scores = compute_scores("text-classification", predictions, references, num_labels=len(label_set))
    return [score.as_entry() for score in scores]


def write_results(
    path: str | Path, *, model: str, task: str, dataset: dict, decoding: dict, metrics: list[dict], conventions: str,
    seconds: float, **extra,
) -> dict:
    """Write the results file (scripts/evaluate_model.py, scripts/extractive_baseline.py) and return its content:
    what was scored (`dataset`: name, config, split, columns, num_examples), how (`decoding`, `conventions`), the
    metrics, anything `extra` (such as `diagnostics`), the seconds taken and when."""
    results = {
        "model": model, "task": task, "dataset": dataset, "decoding": decoding, "metrics": metrics,
        "conventions": conventions, **extra, "time_seconds": round(seconds, 2),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    # whole or not at all, even for a reader that opens it while it is written (vaswani.output_paths)
    write_text_atomically(path, json.dumps(results, indent=2, ensure_ascii=False) + "\n", "--output_file")
    return results


def word_tags_from_entities(words: Sequence[str], entities: Sequence[dict]) -> list[str]:
    """BIO tags of `words` (joined by single spaces) from the pipeline's grouped entities and their character spans:
    a word belongs to an entity when their spans overlap."""
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    tags = ["O"] * len(words)
    for entity in sorted(entities, key=lambda entity: entity["start"]):
        covered = [i for i, (start, end) in enumerate(spans) if entity["start"] < end and entity["end"] > start]
        for rank, index in enumerate(covered):
            tags[index] = f"{'B' if rank == 0 else 'I'}-{entity['entity_group']}"
    return tags


def score_token_classification(pipe: Pipeline, sentences, tags, label_set: LabelSet, batch_size: int, where: str):
    def names(row: int, sentence_tags) -> list[str]:
        return [label_set.names[label_set.to_id(tag, f"row {row} (position {p}) of {where}")]
                for p, tag in enumerate(sentence_tags)]

    references = [names(row, sentence_tags) for row, sentence_tags in enumerate(tags)]
    # the dataset's own words (`is_split_into_words`): each entity covers whole words of the row as written, so the
    # tags compared are those of the row's words whatever the tokenizer does inside them ("U.S." stays one word)
    outputs = run_pipeline(pipe, [list(words) for words in sentences], batch_size, is_split_into_words=True)
    predictions = [word_tags_from_entities(words, entities) for words, entities in zip(sentences, outputs)]
    return [score.as_entry() for score in compute_scores("token-classification", predictions, references)]


__all__ = [
    "EvaluatedSplitArguments",
    "GROUPED_AGGREGATIONS",
    "rouge_metrics",
    "run_bounded_by_input",
    "run_pipeline",
    "score_summarization",
    "score_text_classification",
    "score_token_classification",
    "score_translation",
    "word_tags_from_entities",
    "write_results",
]
