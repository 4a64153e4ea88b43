"""Fine-tuning for text classification (`scripts/finetune_classification.py`, the `vaswani-finetune-classification`
command): a text column and a label column, a `Trainer`, accuracy and F1."""

from dataclasses import dataclass, field

from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer

from ..cli import run_command
from ..data.label_sets import encode_labels
from ..data.splits import input_length, load_splits, prepare_splits
from ..evaluation.metrics import compute_scores, score_values
from .head_loading import load_labelled_head, load_tokenizer
from .run import argmax_logits, start_run, train_and_evaluate


@dataclass
class ClassificationArguments:
    text_column: str = field(default="text", metadata={"help": "Column holding the text to classify."})
    label_column: str = field(default="label", metadata={"help": "Column holding the label (id or name)."})
    label_set: list[str] | None = field(default=None, metadata={"help": "The label names, in id order."})
    max_length: int = field(default=128, metadata={"help": "Texts are truncated to this many tokens."})


def classification_metrics(num_labels: int):
    """compute_metrics of the predicted labels: `accuracy`, and `f1` (of label 1 when there are two labels, else
    averaged over labels), both in 0-1 (vaswani.evaluation.metrics.compute_scores)."""

    def compute_metrics(prediction) -> dict:
        predicted, references = prediction.predictions.reshape(-1), prediction.label_ids.reshape(-1)
        return score_values(compute_scores("text-classification", predicted, references, num_labels=num_labels))

    return compute_metrics


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, task_args, training_args = start_run(ClassificationArguments, argv)
    tokenizer = load_tokenizer(model_args)
    splits = load_splits(
        data_args, training_args, [task_args.text_column, task_args.label_column], text_columns=[task_args.text_column]
    )
    labels, model, report = load_labelled_head(
        AutoModelForSequenceClassification, model_args, tokenizer, splits, task_args.label_column, task_args.label_set
    )
    max_length = input_length(model, tokenizer, task_args.max_length)

    def prepare(dataset, source):
        dataset = encode_labels(dataset, task_args.label_column, labels, source)
        return dataset.map(
            lambda batch: tokenizer(batch[task_args.text_column], truncation=True, max_length=max_length),
            batched=True,
            remove_columns=[column for column in dataset.column_names if column != "labels"],
            desc="Tokenizing",
        )

    train, evaluation = prepare_splits(training_args, splits, prepare)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics(len(labels)),
        preprocess_logits_for_metrics=argmax_logits,
    )
    return train_and_evaluate(trainer, training_args, {"loading_report": report.as_dict() if report else None},
                              arguments=(model_args, data_args, task_args))


def console_main() -> None:
    """The `vaswani-finetune-classification` command."""
    run_command(main)


__all__ = ["ClassificationArguments", "classification_metrics", "console_main", "main"]
