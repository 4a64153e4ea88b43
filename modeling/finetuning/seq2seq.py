"""Fine-tuning an encoder-decoder for summarization or translation with `Seq2SeqTrainer` (scripts/finetune_seq2seq.py):
the task's options, its columns, the tokenized pairs (a language tag first in every source where the tokenizer has
them) and the metrics of generated text: sacreBLEU and tokenized BLEU for translation, ROUGE for summarization, with
the generated length and how many distinct outputs the model wrote.
"""

import logging
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from ..cli import run_command
from ..data.splits import drop_empty_pairs, input_length, load_splits, prepare_splits, usable_length
from ..evaluation.diagnostics import input_independence_warning, output_diversity
from ..evaluation.metrics import compute_scores, score_values
from .head_loading import load_head, load_tokenizer
from .run import KeepGenerationConfig, start_run, train_and_evaluate


logger = logging.getLogger(__name__)

DEFAULT_COLUMNS = {"summarization": ("document", "summary"), "translation": (None, None)}


@dataclass
class Seq2SeqTaskArguments:
    task: Literal["summarization", "translation"] = field(
        default="summarization",
        metadata={"help": "Decides the metrics: ROUGE for summaries, sacreBLEU and tokenized BLEU for translation."},
    )
    source_column: str | None = field(
        default=None, metadata={"help": "Source text column (default: document; for translation, --source_lang)."}
    )
    target_column: str | None = field(
        default=None, metadata={"help": "Target text column (default: summary; for translation, --target_lang)."}
    )
    source_lang: str | None = field(
        default=None, metadata={"help": "Translation: source language, kept in the config."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Translation: target language, kept in the config and used to tokenize BLEU."}
    )
    max_source_length: int = field(default=512, metadata={"help": "Sources are truncated to this many tokens."})
    max_target_length: int = field(default=128, metadata={"help": "Targets are truncated to this many tokens."})


def _resolve_columns(task_args: Seq2SeqTaskArguments) -> tuple[str, str]:
    default_source, default_target = DEFAULT_COLUMNS[task_args.task]
    source = task_args.source_column or default_source or task_args.source_lang
    target = task_args.target_column or default_target or task_args.target_lang
    if source is None or target is None:
        raise ValueError(
            "Translation needs its columns: --source_column and --target_column (or --source_lang / --target_lang "
            "when the columns are named after the languages, as in Multi30k's en/de)."
        )
    return source, target


def encode_pairs(batch, tokenizer, source_column, target_column, max_source_length, max_target_length, tgt_lang=None):
    """Token ids of a batch of sources and their targets (`labels`), truncated. With `tgt_lang` (for a tokenizer with
    language tags), each source starts with that language's tag, as the project's translation pipeline gives it: the
    model learns from what it will be given."""
    if tgt_lang is not None:
        tokenizer.tgt_lang = tgt_lang
    encoded = tokenizer(batch[source_column], truncation=True, max_length=max_source_length)
    targets = tokenizer(text_target=batch[target_column], truncation=True, max_length=max_target_length)
    encoded["labels"] = targets["input_ids"]
    return encoded


def _generation_metrics(task: str, tokenizer, target_lang: str | None):
    """compute_metrics for generated ids: the task's scores (`sacrebleu` and `tokenized_bleu`, or `rouge1`...
    `rougeLsum`: vaswani.evaluation.metrics.compute_scores), the mean generated length in tokens, and how many
    distinct outputs the model wrote for how many distinct inputs (with a warning when the outputs do not depend on
    the inputs; the inputs come from `include_for_metrics`)."""

    def decode(ids: np.ndarray) -> list[str]:
        # batches are padded with -100 when gathered; the tokenizer cannot decode that
        ids = np.where(ids < 0, tokenizer.pad_token_id, ids)
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute_metrics(prediction) -> dict:
        predictions, references = decode(prediction.predictions), decode(prediction.label_ids)
        generated = np.asarray(prediction.predictions)
        lengths = ((generated >= 0) & (generated != tokenizer.pad_token_id)).sum(-1)
        metrics = {"gen_len": float(lengths.mean())}
        if prediction.inputs is not None:
            diversity = output_diversity(decode(prediction.inputs), predictions)
            metrics.update(distinct_outputs=diversity["distinct_outputs"], distinct_inputs=diversity["distinct_inputs"])
            warning = input_independence_warning(diversity)
            if warning:
                logger.warning(warning)
        scores = compute_scores(task, predictions, references, target_lang=target_lang or "en")
        if task == "translation":  # the Trainer logs numbers only: the signatures go to the log
            logger.info("; ".join(f"{score.type} signature: {score.signature}" for score in scores))
        metrics.update(score_values(scores))
        return metrics

    return compute_metrics


def finetune_seq2seq(model_args, data_args, task_args: Seq2SeqTaskArguments, training_args) -> dict:
    """Load the tokenizer, the splits and the model with its generation head, tokenize the pairs, then train and
    evaluate with `Seq2SeqTrainer` (see `train_and_evaluate`); returns the metrics."""
    source_column, target_column = _resolve_columns(task_args)

    tokenizer = load_tokenizer(model_args)
    columns = [source_column, target_column]
    splits = load_splits(data_args, training_args, columns, text_columns=columns)
    languages = {}
    if task_args.task == "translation":
        languages = {
            key: value
            for key, value in (("source_lang", task_args.source_lang), ("target_lang", task_args.target_lang))
            if value is not None
        }
    model, report = load_head(AutoModelForSeq2SeqLM, model_args, tokenizer, **languages)
    target_lang = task_args.target_lang or getattr(model.config, "target_lang", None)
    max_source_length = input_length(model, tokenizer, task_args.max_source_length)
    max_target_length = usable_length(model, task_args.max_target_length)
    # a tokenizer with language tags (`>>de<<`) puts the target's first in every source
    tagged = task_args.task == "translation" and target_lang in (getattr(tokenizer, "language_tags", None) or {})

    def prepare(dataset, source):
        dataset = drop_empty_pairs(dataset, source_column, target_column, source)
        return dataset.map(
            encode_pairs,
            batched=True,
            remove_columns=dataset.column_names,
            fn_kwargs=dict(
                tokenizer=tokenizer, source_column=source_column, target_column=target_column,
                max_source_length=max_source_length, max_target_length=max_target_length,
                tgt_lang=target_lang if tagged else None,
            ),
            desc="Tokenizing",
        )

    train, evaluation = prepare_splits(training_args, splits, prepare)

    # Evaluation generates up to the model's own max_new_tokens where its generation config has one (a
    # --generation_max_length beside it would only be overridden, with a warning on every batch); else up to the
    # target length.
    if training_args.generation_max_length is None and model.generation_config.max_new_tokens is None:
        training_args.generation_max_length = max_target_length
    if training_args.predict_with_generate and "inputs" not in training_args.include_for_metrics:
        training_args.include_for_metrics = [*training_args.include_for_metrics, "inputs"]  # for distinct_inputs
    if training_args.do_eval and not training_args.predict_with_generate:
        logger.warning("Without --predict_with_generate, evaluation reports the loss only (no BLEU / ROUGE).")
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        compute_metrics=(
            _generation_metrics(task_args.task, tokenizer, target_lang) if training_args.predict_with_generate else None
        ),
        callbacks=[KeepGenerationConfig(model)],
    )
    return train_and_evaluate(trainer, training_args, {"loading_report": report.as_dict() if report else None},
                              arguments=(model_args, data_args, task_args))


def main(argv: list[str] | None = None) -> dict:
    """scripts/finetune_seq2seq.py, the `vaswani-finetune-seq2seq` command."""
    return finetune_seq2seq(*start_run(Seq2SeqTaskArguments, argv, Seq2SeqTrainingArguments))


def console_main() -> None:
    """The `vaswani-finetune-seq2seq` command."""
    run_command(main)


__all__ = ["Seq2SeqTaskArguments", "console_main", "encode_pairs", "finetune_seq2seq", "main"]
