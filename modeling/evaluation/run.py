"""Evaluating a model on a dataset split through the pipelines a user would call (scripts/evaluate_model.py):
the options, the checks made before anything is loaded, the scoring of each task and the results file that the model
card and `push_to_hub` read (vaswani.evaluation.scoring writes it).

    from vaswani.evaluation.run import EvaluationArguments, evaluate_model
    from vaswani.evaluation.scoring import EvaluatedSplitArguments

    evaluate_model(EvaluationArguments(model="results/multi30k_en_de/model", task="translation"),
                        EvaluatedSplitArguments(test_file="../shared/data/multi30k/test_2016_flickr.jsonl"))
"""

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import transformers
from transformers import AutoTokenizer, HfArgumentParser

from .. import pipelines as vaswani_pipelines
from ..cli import POSITIVE, at_least, check_numbers, require_folder_or_hub_id, run_command
from ..data.label_sets import LabelSet
from ..remote_code.loading_checks import check_generation_fits
from ..output_checks import check_output_writable
from ..output_paths import check_output_file
from ..remote_code.vocabulary import check_vocabulary
from ..runs.records import RESULTS_FILE, weights_provenance
from ..safe_loading import check_model_folder, require_trained_head
from ..serving.cpu_inference import for_cpu_inference
from ..tasks import TASKS, auto_class_of
from .diagnostics import (
    encoder_collapse,
    format_encoder_collapse,
    input_independence_warning,
    output_diversity,
)
from .scoring import (
    EvaluatedSplitArguments,
    GROUPED_AGGREGATIONS,
    score_summarization,
    score_text_classification,
    score_token_classification,
    score_translation,
    write_results,
)


RESULTS_ROOM = 1 << 16  # bytes: the least a results file takes (metrics, conventions, diagnostics)


@dataclass
class EvaluationArguments:
    model: str = field(metadata={"help": "The model: a folder or a Hub id."})
    task: Literal[tuple(TASKS)] = field(  # the registry's tasks (vaswani.tasks)
        metadata={"help": "What the model was fine-tuned for; decides the pipeline and the metrics."}
    )
    output_file: str | None = field(
        default=None, metadata={"help": f"Where to write the results; default: {RESULTS_FILE} in the model."}
    )
    batch_size: int = field(default=16, metadata={"help": "Inputs per pipeline batch."})
    # translation / summarization
    source_column: str | None = field(
        default=None, metadata={"help": "Source column (default: document; translation: the model's source_lang)."}
    )
    target_column: str | None = field(
        default=None, metadata={"help": "Reference column (default: summary; translation: the model's target_lang)."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Language for tokenized BLEU (default: the model's target_lang, else en)."}
    )
    num_beams: int = field(default=4, metadata={"help": "Beam size (the paper: 4)."})
    length_penalty: float = field(default=0.6, metadata={"help": "Beam length penalty alpha (the paper: 0.6)."})
    max_new_tokens: int = field(default=128, metadata={"help": "Longest output, in tokens."})
    max_new_tokens_over_input: int | None = field(
        default=None,
        metadata={"help": "Translation / summarization: outputs up to the input's length + N tokens instead of "
                  "--max_new_tokens (the paper: 50, section 6.1), the input's length that of the longest input of its "
                  "batch (as tensor2tensor bounds a padded batch); batches are made of inputs of about one length."},
    )
    compound_split: bool = field(
        default=False,
        metadata={"help": "Translation: also score tokenized_bleu_compound_split, cased BLEU of Moses-tokenized text "
                  "with hyphenated compounds split (a-b -> a ##AT##-##AT## b), as WMT14 English-German is scored in "
                  "the paper (tensor2tensor's get_ende_bleu.sh)."},
    )
    no_repeat_ngram_size: int | None = field(
        default=None, metadata={"help": "Never repeat an n-gram of this size in an output (unset: no such rule)."}
    )
    # text classification
    text_column: str = field(default="text", metadata={"help": "Text column (text-classification)."})
    label_column: str = field(default="label", metadata={"help": "Label column, ids or names (text-classification)."})
    # token classification
    tokens_column: str = field(default="tokens", metadata={"help": "Words column (token-classification)."})
    tags_column: str = field(default="ner_tags", metadata={"help": "Tags column, ids or names (token-classification)."})
    diagnostic_examples: int = field(
        default=200,
        metadata={"help": "Translation / summarization: measure the encoder's attention entropy and token cosine per "
                  "layer on the first N sources (0: skip)."},
    )
    aggregation_strategy: str = field(
        default="first", metadata={"help": f"Token-classification pipeline aggregation: {list(GROUPED_AGGREGATIONS)}."}
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow the folder's own code."})
    engine: Literal["transformers", "ctranslate2"] = field(
        default="transformers",
        metadata={"help": "Translation / summarization: decode with the model's generate() or with a CTranslate2 "
                  "export of the model (needs the ctranslate2 extra)."},
    )
    quantization: Literal["none", "int8"] = field(
        default="none", metadata={"help": "Weights as saved (none) or int8 Linear layers / int8 CTranslate2 weights."}
    )
    cpu_decoding: bool = field(
        default=True,
        metadata={"help": "Translation / summarization with --engine transformers, fp32 weights on a CPU: decode with "
                  "the project's CPU decoder (every model's default: the tokens of transformers' generate loop, "
                  "faster); False runs transformers' loop."},
    )


# What each numeric option allows; every one is a finite number of its type (vaswani.cli.check_numbers), so that no
# NaN reaches a results file (the length penalty may be any finite number: below 0 it favours short outputs).
NUMBER_RULES = {
    "batch_size": POSITIVE,
    "num_beams": POSITIVE,
    "max_new_tokens": POSITIVE,
    "max_new_tokens_over_input": at_least(0, meaning="unset: --max_new_tokens"),
    "no_repeat_ngram_size": at_least(1, meaning="unset: no such rule"),
    "diagnostic_examples": at_least(0, meaning="0 skips the diagnostics"),
    "max_eval_samples": at_least(1, meaning="unset: every row"),
}


def _check_arguments(args: EvaluationArguments, data: EvaluatedSplitArguments) -> None:
    check_numbers((args, data), NUMBER_RULES)
    if args.aggregation_strategy not in GROUPED_AGGREGATIONS:
        raise ValueError(
            f"--aggregation_strategy {args.aggregation_strategy!r}: scoring needs grouped entities, so use one of "
            f"{list(GROUPED_AGGREGATIONS)}."
        )
    if args.engine == "ctranslate2" and args.task not in ("translation", "summarization"):
        raise ValueError(f"--engine ctranslate2 translates and summarizes; --task {args.task} runs with transformers.")
    if args.compound_split and args.task != "translation":
        raise ValueError(f"--compound_split scores translation BLEU; --task {args.task} is not scored with BLEU.")
    if args.max_new_tokens_over_input is not None and args.task not in ("translation", "summarization"):
        raise ValueError(f"--max_new_tokens_over_input {args.max_new_tokens_over_input} bounds generated outputs; "
                         f"--task {args.task} generates none.")


def _columns_for(args: EvaluationArguments, config) -> dict[str, str]:
    """The dataset columns the task reads, by role."""
    if args.task == "text-classification":
        return {"text": args.text_column, "label": args.label_column}
    if args.task == "token-classification":
        return {"tokens": args.tokens_column, "tags": args.tags_column}
    if args.task == "summarization":
        return {"source": args.source_column or "document", "target": args.target_column or "summary"}
    source = args.source_column or getattr(config, "source_lang", None)
    target = args.target_column or getattr(config, "target_lang", None)
    if source is None or target is None:
        raise ValueError(
            "Translation needs --source_column and --target_column: the model's config names no source_lang / "
            "target_lang to default to."
        )
    return {"source": source, "target": target}


def _direction_warning(columns: dict[str, str], config) -> str | None:
    """A warning where the translation columns name the languages of the model's config the other way round (an
    en -> de model given --source_column de or --target_column en would be scored translating from the references'
    language): a column is taken to name a language where it is called as the language is (`de`, `translation.de`)."""
    source_lang, target_lang = getattr(config, "source_lang", None), getattr(config, "target_lang", None)
    if not source_lang or not target_lang or source_lang == target_lang:
        return None
    language = {role: column.rsplit(".", 1)[-1].lower() for role, column in columns.items()}
    if language["source"] != target_lang.lower() and language["target"] != source_lang.lower():
        return None
    return (
        f"--source_column {columns['source']} and --target_column {columns['target']} contradict the model's "
        f"direction, {source_lang} -> {target_lang} (source_lang / target_lang in its config.json): the scores would "
        "be of translating the other way; check the columns."
    )


def _score_split(args: EvaluationArguments, model, tokenizer, dataset, columns: dict[str, str], where: str):
    """(metrics, decoding settings ({} where nothing is generated), conventions text, diagnostics ({} where nothing
    is generated)) for the task, through its pipeline."""
    config = model.config
    if args.task in ("translation", "summarization"):
        decoding = applied_decoding(args, config)
        max_positions = getattr(config, "max_position_embeddings", 10**9)
        if args.num_beams > 1:
            beams = f"beam {args.num_beams}, length penalty {args.length_penalty}"
        else:  # a length penalty weighs finished beams against each other: greedy decoding has none to weigh
            beams = "greedy (beam 1)"
        if args.max_new_tokens_over_input is None:
            beams += f", at most {decoding['max_new_tokens']} new tokens"
        else:
            beams += (f", at most the input's length + {args.max_new_tokens_over_input} new tokens (the longest input "
                      f"of its batch, in tokens; at most {max_positions - 1})")
        if args.no_repeat_ngram_size is not None:
            beams += f", no repeated {args.no_repeat_ngram_size}-grams"
        recorded = dict(decoding)
        if args.max_new_tokens_over_input is not None:
            recorded["max_new_tokens_over_input"] = args.max_new_tokens_over_input
            decoding["over_input"] = (args.max_new_tokens_over_input, max_positions)
        if (args.engine, args.quantization) != ("transformers", "none"):  # recorded where it is not the default
            recorded.update(engine=args.engine, quantization=args.quantization)
            beams += f"; decoded with {args.engine}" + (", int8 weights" if args.quantization == "int8" else "")
        sources, references = dataset[columns["source"]], dataset[columns["target"]]
        _check_generation_size(args, model, tokenizer, sources)
        pipe = _generation_pipeline(args, model, tokenizer)
        weights = weights_provenance(args.model)
        if args.task == "translation":
            target_lang = args.target_lang or getattr(config, "target_lang", None) or "en"
            metrics, outputs = score_translation(pipe, sources, references, args.batch_size, target_lang,
                                                 compound_split=args.compound_split, **decoding)
            split = (f"; BLEU (tokenized, cased, compounds split) after Moses tokenization ({target_lang}) with each "
                     "hyphen inside a word split off (a ##AT##-##AT## b), as WMT14 en-de is scored in the papers"
                     if args.compound_split else "")
            conventions = (
                f"sacreBLEU on detokenized output against the raw references (signature given); BLEU (tokenized, "
                f"lowercased) after lowercasing and Moses normalization + tokenization ({target_lang}), as papers "
                f"report it{split}. {beams}; weights: {weights}."
            )
        else:
            metrics, outputs = score_summarization(pipe, sources, references, args.batch_size, **decoding)
            conventions = (
                f"ROUGE F-measures (0-100) from rouge-score with Porter stemming, averaged over examples; {beams}; "
                f"weights: {weights}."
            )
        return metrics, recorded, conventions, _generation_diagnostics(args, model, tokenizer, sources, outputs)

    if args.quantization == "int8":
        model = for_cpu_inference(model, quantization="int8")
    label_set = LabelSet(tuple(config.id2label[i] for i in sorted(config.id2label)), f"{args.model}'s id2label")
    if args.task == "text-classification":
        pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)
        metrics = score_text_classification(
            pipe, dataset[columns["text"]], dataset[columns["label"]], label_set, args.batch_size, where
        )
        return metrics, {}, "Accuracy and F1 in 0-1 (F1 of label 1 for two labels, else macro-averaged).", {}

    pipe = transformers.pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=args.aggregation_strategy
    )
    metrics = score_token_classification(
        pipe, dataset[columns["tokens"]], dataset[columns["tags"]], label_set, args.batch_size, where
    )
    conventions = (
        "Entity-level precision / recall / F1 in 0-1 (an entity counts when type, first and last word match, as "
        "conlleval counts), on words joined by single spaces and tagged from the token-classification pipeline's "
        f"entities (aggregation_strategy={args.aggregation_strategy!r})."
    )
    return metrics, {"aggregation_strategy": args.aggregation_strategy}, conventions, {}


def applied_decoding(args: EvaluationArguments, config) -> dict:
    """The decoding settings the evaluation applies, as the results file records them and `generate()` gets them:
    the length penalty only with beam search (greedy decoding never reads it, and a results file that named it would
    say otherwise), at most as many new tokens as the model has positions for after its start token (with
    --max_new_tokens_over_input, no fixed count: each batch's is its longest input's length + that many)."""
    decoding = {"num_beams": args.num_beams}
    if args.max_new_tokens_over_input is None:
        decoding["max_new_tokens"] = min(args.max_new_tokens, getattr(config, "max_position_embeddings", 10**9) - 1)
    if args.num_beams > 1:
        decoding["length_penalty"] = args.length_penalty
    if args.no_repeat_ngram_size is not None:
        decoding["no_repeat_ngram_size"] = args.no_repeat_ngram_size
    return decoding


def _check_generation_size(args: EvaluationArguments, model, tokenizer, sources) -> None:
    """Refuse, before the first batch, a --batch_size x --num_beams whose decoding would not fit in the memory
    left (vaswani.remote_code.loading_checks.check_generation_fits), for the longest source of the split (by
    characters)."""
    if not sources:
        return
    config = model.config
    longest = max(sources, key=len)
    source_length = len(tokenizer(longest, truncation=True, max_length=tokenizer.model_max_length)["input_ids"])
    rows = min(args.batch_size, len(sources)) * args.num_beams
    decoding = applied_decoding(args, config)
    if "max_new_tokens" in decoding:
        target = decoding["max_new_tokens"] + 1
    else:  # the longest source's outputs are the longest
        target = min(source_length + args.max_new_tokens_over_input,
                     getattr(config, "max_position_embeddings", 10**9) - 1) + 1
    check_generation_fits(config, rows, source_length, target,
                          f"--batch_size {min(args.batch_size, len(sources))} x --num_beams {args.num_beams}",
                          dtype=model.dtype, device=model.device)


def _generation_pipeline(args: EvaluationArguments, model, tokenizer):
    """The translation / summarization pipeline of `--engine` with `--quantization`."""
    if args.engine == "ctranslate2":
        from ..serving.ctranslate2_export import export_to_ctranslate2
        from ..serving.ctranslate2_generation import CTranslate2Pipeline

        tgt_lang = getattr(model.config, "target_lang", None) if getattr(tokenizer, "language_tags", None) else None
        # the translator and the tokenizer are in memory once built: the exported folder is not needed after that
        with tempfile.TemporaryDirectory(prefix="vaswani-ct2-") as folder:
            export_to_ctranslate2(
                args.model, folder, quantization="int8" if args.quantization == "int8" else None,
                overwrite_output_dir=True,
            )
            return CTranslate2Pipeline(folder, args.task, tgt_lang=tgt_lang)
    if args.quantization == "int8":
        model = for_cpu_inference(model, quantization="int8")
    elif not args.cpu_decoding:
        model.generation_config.cpu_decoding = False
    return vaswani_pipelines.pipeline(args.task, model=model, tokenizer=tokenizer)


def _generation_diagnostics(args: EvaluationArguments, model, tokenizer, sources, outputs) -> dict:
    """Whether the outputs depend on the inputs (with a warning when they do not), and how the encoder treats the
    first `--diagnostic_examples` sources (see vaswani.evaluation.diagnostics)."""
    diagnostics = {"output_diversity": output_diversity(sources, outputs)}
    warning = input_independence_warning(diagnostics["output_diversity"])
    if warning:
        diagnostics["warning"] = warning
        print(f"WARNING: {warning}", file=sys.stderr)
    if args.diagnostic_examples and hasattr(model, "get_encoder"):
        diagnostics["encoder_layers"] = encoder_collapse(
            model, tokenizer, sources[: args.diagnostic_examples], tokenizer.model_max_length
        )
    return diagnostics


def evaluate_model(args: EvaluationArguments, data: EvaluatedSplitArguments) -> dict:
    """Check the options and paths, load the model, score it on the split and write the results file (printing
    the metrics and the diagnostics); returns the results as written."""
    _check_arguments(args, data)
    require_folder_or_hub_id(args.model, "--model")
    output_file = Path(args.output_file) if args.output_file else Path(args.model) / RESULTS_FILE
    if args.output_file is None and not Path(args.model).is_dir():
        raise ValueError(f"--model {args.model} is not a local folder: give --output_file for the results.")
    data.source()  # bad data options stop here, before the model is loaded
    check_output_file(output_file, {"--model": args.model, **data.files()})
    check_output_writable(output_file, "--output_file", needed_bytes=RESULTS_ROOM)

    model, tokenizer = _load_model(args)
    columns = _columns_for(args, model.config)
    if args.task == "translation" and (warning := _direction_warning(columns, model.config)):
        print(f"WARNING: {warning}", file=sys.stderr)
    dataset, where, dataset_record = data.load(columns)

    started = time.perf_counter()
    metrics, decoding, conventions, diagnostics = _score_split(args, model, tokenizer, dataset, columns, where)
    results = write_results(
        output_file, model=args.model, task=args.task,
        dataset=dataset_record,
        decoding=decoding, metrics=metrics, conventions=conventions, seconds=time.perf_counter() - started,
        **({"diagnostics": diagnostics} if diagnostics else {}),
    )
    _print_results(metrics, diagnostics)
    print(f"Wrote {output_file}")
    return results


def _load_model(args: EvaluationArguments):
    """The model (with a trained head for the task, in eval mode) and its tokenizer, checked before and after
    loading; the tokenizer never gives the model more positions than it has."""
    check_model_folder(args.model)  # before transformers parses any of its files
    model = require_trained_head(auto_class_of(args.task), args.model, args.task, args.trust_remote_code).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    check_vocabulary(model, tokenizer)
    max_positions = getattr(model.config, "max_position_embeddings", None)
    if max_positions:
        tokenizer.model_max_length = min(tokenizer.model_max_length, max_positions)
    return model, tokenizer


def _print_results(metrics: list[dict], diagnostics: dict) -> None:
    for metric in metrics:
        print(f"{metric['name']}: {metric['value']}" + (f"  ({metric['signature']})" if "signature" in metric else ""))
    if diagnostics:
        diversity = diagnostics["output_diversity"]
        print(f"{diversity['distinct_outputs']} distinct outputs for {diversity['distinct_inputs']} distinct inputs")
        if "encoder_layers" in diagnostics:
            print(format_encoder_collapse(diagnostics["encoder_layers"]))

def main(argv: list[str] | None = None) -> dict:
    """scripts/evaluate_model.py, the `vaswani-evaluate` command: the results of `evaluate_model`."""
    args, data = HfArgumentParser((EvaluationArguments, EvaluatedSplitArguments)).parse_args_into_dataclasses(args=argv)
    return evaluate_model(args, data)


def console_main() -> None:
    """The `vaswani-evaluate` command."""
    run_command(main)


__all__ = ["EvaluationArguments", "applied_decoding", "console_main", "evaluate_model", "main"]
