"""Render the card of a saved model from the repository's `model_card.md` template (Jinja2), which the package
carries as its own data (`vaswani/hub/model_card.md`, installed with it), so that an installed package renders cards.

The card's YAML header is what the Hub reads: license, language, datasets, metrics, `pipeline_tag`, tags, and a
`model-index` whose results come from evaluation results files (written by scripts/evaluate_model.py):

    {"task": "translation", "dataset": {"name": "bentrevett/multi30k", "config": null, "split": "test",
     "num_examples": 1000}, "decoding": {"num_beams": 4}, "metrics": [{"type": "sacrebleu", "name": "sacreBLEU",
     "value": 35.2, "signature": "nrefs:1|..."}], "conventions": "..."}

The header is written by huggingface_hub's `ModelCardData`, so that it follows the Hub's format exactly.
"""

import importlib.util
import json
import math
from importlib import resources
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..data.loading import looks_like_hub_dataset
from ..evaluation.metrics.names import RENAME_COMMAND, renamed_metric
from ..runs.records import ARGUMENTS_FILE, TRAINER_STATE_FILE
from ..tasks import FEATURE_EXTRACTION, TASKS, architecture_task, auto_class_name


TEMPLATE = "model_card.md"  # the package's data file: the repository's model_card.md (modeling/hub/ links to it)

TAGS = ["vaswani", "transformer", "encoder-decoder", "attention-is-all-you-need"]


def load_results(path: str | Path) -> dict:
    """Read one evaluation results file, checking the fields the card uses; an error names the file and field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Results file {path} does not exist.")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Results file {path} is not valid JSON: {error}") from None

    def need(container, key, kind, where):
        if not isinstance(container, dict) or not isinstance(container.get(key), kind):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise ValueError(f"Results file {path}: `{where}{key}` is missing or not a {expected}.")
        return container[key]

    if need(results, "task", str, "") not in TASKS:
        raise ValueError(f"Results file {path}: `task` is {results['task']!r}; expected one of {list(TASKS)}.")
    dataset = need(results, "dataset", dict, "")
    need(dataset, "name", str, "dataset.")
    need(dataset, "split", str, "dataset.")
    metrics = need(results, "metrics", list, "")
    if not metrics:
        raise ValueError(f"Results file {path}: `metrics` is empty.")
    for index, metric in enumerate(metrics):
        for key in ("type", "name"):
            need(metric, key, str, f"metrics[{index}].")
        if (renamed := renamed_metric(metric["type"], "results", results["task"])) is not None:
            raise ValueError(
                f"Results file {path}: `metrics[{index}].type` is `{metric['type']}`, a retired metric name (here: "
                f"{renamed}); {RENAME_COMMAND} --rename_paths {path} rewrites it."
            )
        value = need(metric, "value", (int, float), f"metrics[{index}].")
        if isinstance(value, bool) or not math.isfinite(value):
            # JSON as Python reads it takes NaN and Infinity; the card's model-index would publish them as scores
            raise ValueError(f"Results file {path}: `metrics[{index}].value` is {value!r}; expected a finite number.")
    # the optional fields, present for the template
    dataset.setdefault("config", None)
    dataset.setdefault("num_examples", None)
    decoding = results.setdefault("decoding", {})
    if not isinstance(decoding, dict):
        raise ValueError(f"Results file {path}: `decoding` is not a mapping of settings.")
    # what scripts/push_to_hub.py writes into a published model's generation config
    for key, least in (("num_beams", 1), ("max_new_tokens", 1), ("no_repeat_ngram_size", 0)):
        value = decoding.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            raise ValueError(f"Results file {path}: `decoding.{key}` is {value!r}; expected an integer >= {least}.")
    penalty = decoding.get("length_penalty")
    if penalty is not None and (not isinstance(penalty, (int, float)) or isinstance(penalty, bool)
                                or not math.isfinite(penalty)):
        raise ValueError(f"Results file {path}: `decoding.length_penalty` is {penalty!r}; expected a finite number.")
    results.setdefault("conventions", "")
    for metric in metrics:
        metric.setdefault("signature", None)
    return results


def _dataset_label(name: str) -> str:
    """How a dataset is named in the model-index: its Hub id, or for local files the folder they are in."""
    if looks_like_hub_dataset(name):
        return name
    first = Path(name.split(",")[0].strip())
    return first.parent.name or first.stem


# What a run leaves beside its model (vaswani.runs.records): train.py's options (in the run folder, above best/ and
# last/) or the fine-tuning scripts' (in --output_dir), and the Trainer's state. JSON only: transformers'
# training_args.bin is a pickle.
MAX_RECORD_BYTES = 1_000_000
TRAIN_PY_DATA_OPTIONS = (
    "train_file", "dataset_name", "dataset_config_name", "train_split", "validation_file", "validation_split", "task",
    "source_column", "target_column", "source_lang", "target_lang", "max_train_samples", "synthetic_train_size",
)
RUN_BOOKKEEPING = ("output_dir", "overwrite_output_dir", "resume", "logging_dir", "report_to", "push_to_hub",
                   "hub_token", "hub_model_id", "hub_strategy", "hub_private_repo")
FINE_TUNING_SETTINGS = (
    "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
    "warmup_steps", "warmup_ratio", "lr_scheduler_type", "weight_decay", "label_smoothing_factor", "seed",
)


def _read_record(path: Path) -> dict | None:
    """A JSON object from a model's folder (untrusted: bounded in size), or None where it is absent."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is {path.stat().st_size:,} bytes; a run's record is at most {MAX_RECORD_BYTES:,}.")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a {type(record).__name__}; expected a JSON object.")
    return record


def _json_block(options: dict) -> str:
    return "```json\n" + json.dumps(options, indent=2, ensure_ascii=False, default=str) + "\n```"


def training_from_record(model_dir: str | Path) -> tuple[str | None, str | None]:
    """(training data, training procedure) of the card, from the record the run left beside the model
    (`arguments.json` in the folder or the run folder above it); (None, None) where there is none."""
    model_dir = Path(model_dir)
    path = next((folder / ARGUMENTS_FILE for folder in (model_dir, model_dir.parent)
                 if (folder / ARGUMENTS_FILE).is_file()), None)
    record = _read_record(path) if path else None
    if record is None:
        return None, None
    if "training" in record and "data" in record:  # a fine-tuning script's record
        script, model = record.get("script", "a fine-tuning script"), record.get("model") or {}
        data = record["data"] if isinstance(record["data"], dict) else {}
        training = record["training"] if isinstance(record["training"], dict) else {}
        state = _read_record(path.parent / TRAINER_STATE_FILE) or {}
        start = model.get("model_name_or_path") or f"preset {model.get('preset')!r} (from scratch)"
        steps = f" for {state['global_step']:,} updates ({state.get('epoch', 0):.2f} epochs)" if state.get(
            "global_step") else ""
        settings = {key: training[key] for key in FINE_TUNING_SETTINGS if training.get(key) not in (None, "")}
        procedure = (f"Fine-tuned from {start} with `scripts/{script}` (the transformers Trainer){steps}. Its "
                     f"settings, from `{ARGUMENTS_FILE}`:\n\n" + _json_block({**settings, "task": record.get("task")}))
        return _json_block({key: value for key, value in data.items() if value is not None}), procedure
    data = {key: record[key] for key in TRAIN_PY_DATA_OPTIONS if record.get(key) is not None}
    options = {key: value for key, value in record.items() if value is not None and key not in RUN_BOOKKEEPING}
    procedure = (f"Trained from scratch with `scripts/train.py`. The run's options, from `{ARGUMENTS_FILE}`:\n\n"
                 + _json_block(options))
    return _json_block(data), procedure


def _pipeline_tag_for(config, results: list[dict]) -> str:
    only = architecture_task((config.architectures or ["VaswaniForConditionalGeneration"])[0])
    if only is not None:  # a classifier, a tagger, the bare model: the one task its class serves
        return only.name
    for result in results:
        if result["task"] in ("translation", "summarization"):
            return result["task"]
    return "translation" if config.source_lang and config.target_lang else "text2text-generation"


def _eval_results_for(results: list[dict]) -> list[EvalResult]:
    return [
        EvalResult(
            task_type=result["task"],
            dataset_type=_dataset_label(result["dataset"]["name"]),
            dataset_name=_dataset_label(result["dataset"]["name"]),
            dataset_config=result["dataset"]["config"],
            dataset_split=result["dataset"]["split"],
            metric_type=metric["type"],
            metric_name=metric["name"],
            metric_value=metric["value"],
        )
        for result in results
        for metric in result["metrics"]
    ]


def _without_repeated_metrics(result: dict) -> dict:
    """The result with a ROUGE-Lsum equal to its ROUGE-L left out: rouge-score's ROUGE-Lsum cuts summaries into
    sentences at line breaks only, and on summaries written on one line (SAMSum's, AESLC's, as this project scores
    them, without sentence splitting) it is ROUGE-L again, which a card would list twice as if it were a second
    measurement. A ROUGE-Lsum that differs is kept."""
    values = {metric["type"]: metric["value"] for metric in result["metrics"]}
    if "rougeLsum" not in values or values["rougeLsum"] != values.get("rougeL"):
        return result
    return {**result, "metrics": [metric for metric in result["metrics"] if metric["type"] != "rougeLsum"]}


def read_template(template: str | Path | None = None) -> str:
    """The text of the card template: the file `template`, or the package's own (TEMPLATE, read through
    importlib.resources: an editable install reads the repository's file, a wheel the copy it installed)."""
    if template is not None:
        return Path(template).read_text(encoding="utf-8")
    return resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8")


def render_model_card(
    config,
    num_parameters: int,
    repo_id: str,
    model_name: str | None = None,
    results: list[dict] = (),
    license_id: str = "apache-2.0",
    languages: list[str] | None = None,
    datasets: list[str] | None = None,
    tags: list[str] = (),
    training_data: str | None = None,
    training_procedure: str | None = None,
    template: str | Path | None = None,
) -> str:
    """The model card's text (README.md of the Hub repo) for a model with `config` and `num_parameters`: its own
    results only (every recipe's are in results/README.md). `template`: a template file of one's own instead of the
    package's."""
    if importlib.util.find_spec("jinja2") is None:
        raise ImportError("Rendering a model card needs Jinja2: pip install 'vaswani-transformer[hub]'.")
    results = [_without_repeated_metrics(result) for result in results]
    pipeline_tag = _pipeline_tag_for(config, results)
    architecture = (config.architectures or ["VaswaniForConditionalGeneration"])[0]
    if languages is None:
        languages = list(dict.fromkeys(code for code in (config.source_lang, config.target_lang) if code))
    if datasets is None:
        datasets = [r["dataset"]["name"] for r in results if looks_like_hub_dataset(r["dataset"]["name"])]
    model_name = model_name or repo_id.split("/")[-1]
    card_data = ModelCardData(
        model_name=model_name,
        license=license_id,
        language=languages or None,
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=list(dict.fromkeys([*TAGS, *tags])),
        datasets=list(dict.fromkeys(datasets)) or None,
        metrics=list(dict.fromkeys(m["type"] for r in results for m in r["metrics"])) or None,
        eval_results=_eval_results_for(results) or None,
    )
    direction = f" ({config.source_lang} → {config.target_lang})" if pipeline_tag == "translation" else ""
    labels = (
        [config.id2label[i] for i in sorted(config.id2label)] if pipeline_tag.endswith("classification") else []
    )
    card = ModelCard.from_template(
        card_data,
        template_str=read_template(template),
        model_name=model_name,
        repo_id=repo_id,
        summary=f"A {num_parameters / 1e6:.1f}M-parameter encoder-decoder Transformer for {pipeline_tag}{direction}.",
        architecture=architecture,
        auto_class=auto_class_name(architecture),
        num_parameters=f"{num_parameters:,}",
        config=config.to_dict(),
        source_lang=config.source_lang,
        target_lang=config.target_lang,
        labels=labels,
        results=results,
        training_data=training_data,
        training_procedure=training_procedure,
        example=TASKS.get(pipeline_tag, FEATURE_EXTRACTION).example,
    )
    return str(card)


__all__ = [
    "TEMPLATE",
    "load_results",
    "read_template",
    "render_model_card",
    "training_from_record",
]
