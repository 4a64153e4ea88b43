"""Fine-tuning for token classification (`scripts/finetune_token_classification.py`, the
`vaswani-finetune-token-classification` command): a column of words and a column of BIO tags, a `Trainer`, entity F1."""

from dataclasses import dataclass, field

from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, Trainer

from ..cli import run_command
from ..data.label_sets import encode_labels
from ..data.loading import require_same_lengths
from ..data.splits import input_length, load_splits, prepare_splits
from ..evaluation.metrics import compute_scores, score_values
from .head_loading import load_labelled_head, load_tokenizer
from .run import argmax_logits, start_run, train_and_evaluate
from .token_alignment import WordStarts, inside_label_ids, tokenize_and_align, word_level_tags


@dataclass
class TokenClassificationArguments:
    tokens_column: str = field(default="tokens", metadata={"help": "Column holding each sentence's list of words."})
    tags_column: str = field(default="ner_tags", metadata={"help": "Column holding each sentence's list of tags."})
    label_set: list[str] | None = field(default=None, metadata={"help": "The tag names, in id order."})
    max_length: int = field(default=256, metadata={"help": "Sentences are truncated to this many tokens."})


def entity_metrics(id2label: dict[int, str], word_starts: WordStarts):
    """Entity-level `entity_f1`, `entity_precision` and `entity_recall` and word `accuracy`
    (vaswani.evaluation.metrics.compute_scores), from the tag predicted at each word's first token: the Trainer logs
    them as `eval_entity_f1`, ..."""

    def compute_metrics(prediction) -> dict:
        predicted, references = word_level_tags(
            prediction.predictions, prediction.label_ids, prediction.inputs, word_starts, id2label
        )
        return score_values(compute_scores("token-classification", predicted, references))

    return compute_metrics


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, task_args, training_args = start_run(TokenClassificationArguments, argv)
    tokenizer = load_tokenizer(model_args)
    splits = load_splits(data_args, training_args, [task_args.tokens_column, task_args.tags_column])
    labels, model, report = load_labelled_head(
        AutoModelForTokenClassification, model_args, tokenizer, splits, task_args.tags_column, task_args.label_set
    )
    max_length = input_length(model, tokenizer, task_args.max_length)
    inside = inside_label_ids(labels)

    def prepare(dataset, source):
        require_same_lengths(dataset, task_args.tokens_column, task_args.tags_column, source)
        dataset = encode_labels(dataset, task_args.tags_column, labels, source, target="word_labels")
        return dataset.map(
            lambda batch: tokenize_and_align(
                batch[task_args.tokens_column], batch["word_labels"], tokenizer, max_length, inside
            ),
            batched=True,
            remove_columns=dataset.column_names,
            desc="Tokenizing and aligning tags",
        )

    train, evaluation = prepare_splits(training_args, splits, prepare)
    # which token starts each word is needed for scoring only: keep it beside the data, not in the model's inputs;
    # scoring finds it by each sentence's input ids, which Trainer returns with the predictions
    word_starts = None
    if evaluation is not None:
        word_starts = WordStarts(evaluation["input_ids"], evaluation["first_token"], tokenizer.pad_token_id)
        evaluation = evaluation.remove_columns("first_token")
        training_args.include_for_metrics = sorted({*training_args.include_for_metrics, "inputs"})
    train = train.remove_columns("first_token") if train is not None else None

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=entity_metrics(labels.id2label, word_starts),
        preprocess_logits_for_metrics=argmax_logits,
    )
    return train_and_evaluate(trainer, training_args, {"loading_report": report.as_dict() if report else None},
                              arguments=(model_args, data_args, task_args))


def console_main() -> None:
    """The `vaswani-finetune-token-classification` command."""
    run_command(main)


__all__ = ["TokenClassificationArguments", "console_main", "entity_metrics", "main"]
