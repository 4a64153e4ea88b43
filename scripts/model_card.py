"""Render the model card of a checkpoint from the repository's `model_card.md` template (Jinja2).

The card's YAML header is what the Hub reads: license, language, datasets, metrics, `pipeline_tag`, tags, and a
`model-index` whose results come from evaluation results files (written by scripts/evaluate_model.py):

    {"task": "translation", "dataset": {"name": "bentrevett/multi30k", "config": null, "split": "test",
     "num_examples": 1000}, "decoding": {"num_beams": 4}, "metrics": [{"type": "sacrebleu", "name": "sacreBLEU",
     "value": 35.2, "signature": "nrefs:1|..."}], "conventions": "..."}

The header is written by huggingface_hub's `ModelCardData`, so that it follows the Hub's format exactly.
"""

import json
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData


TEMPLATE = Path(__file__).resolve().parents[1] / "model_card.md"

TASKS = ("translation", "summarization", "text-classification", "token-classification")
# what each model class is for, when no results file says otherwise
TASK_OF_ARCHITECTURE = {
    "VaswaniForSequenceClassification": "text-classification",
    "VaswaniForTokenClassification": "token-classification",
    "VaswaniModel": "feature-extraction",
}
AUTO_CLASS_OF_ARCHITECTURE = {
    "VaswaniForConditionalGeneration": "AutoModelForSeq2SeqLM",
    "VaswaniForSequenceClassification": "AutoModelForSequenceClassification",
    "VaswaniForTokenClassification": "AutoModelForTokenClassification",
    "VaswaniModel": "AutoModel",
}
EXAMPLES = {
    "translation": "A man is riding a horse.",
    "summarization": "Hi Tom, the meeting moved to Friday at 10 in room 4. Please bring the budget draft. Anna",
    "token-classification": "Angela Merkel visited Paris in July .",
}
DEFAULT_EXAMPLE = "A gripping, funny and beautifully acted film."
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
        need(metric, "value", (int, float), f"metrics[{index}].")
    # the optional fields, present for the template
    dataset.setdefault("config", None)
    dataset.setdefault("num_examples", None)
    results.setdefault("decoding", {})
    results.setdefault("conventions", "")
    for metric in metrics:
        metric.setdefault("signature", None)
    return results


def looks_like_hub_dataset(name: str) -> bool:
    """A Hub dataset id ("multi30k", "bentrevett/multi30k") rather than a path to local files."""
    return (
        not Path(name).exists()
        and name.count("/") <= 1
        and not name.startswith((".", "/", "~"))
        and not name.lower().endswith((".jsonl", ".json", ".csv"))
        and "," not in name
    )


def dataset_label(name: str) -> str:
    """How a dataset is named in the model-index: its Hub id, or for local files the folder they are in."""
    if looks_like_hub_dataset(name):
        return name
    first = Path(name.split(",")[0].strip())
    return first.parent.name or first.stem


def pipeline_tag_for(config, results: list[dict]) -> str:
    architecture = (config.architectures or ["VaswaniForConditionalGeneration"])[0]
    if architecture in TASK_OF_ARCHITECTURE:
        return TASK_OF_ARCHITECTURE[architecture]
    for result in results:
        if result["task"] in ("translation", "summarization"):
            return result["task"]
    return "translation" if config.source_lang and config.target_lang else "text2text-generation"


def eval_results_for(results: list[dict]) -> list[EvalResult]:
    return [
        EvalResult(
            task_type=result["task"],
            dataset_type=dataset_label(result["dataset"]["name"]),
            dataset_name=dataset_label(result["dataset"]["name"]),
            dataset_config=result["dataset"]["config"],
            dataset_split=result["dataset"]["split"],
            metric_type=metric["type"],
            metric_name=metric["name"],
            metric_value=metric["value"],
        )
        for result in results
        for metric in result["metrics"]
    ]


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
    template: str | Path = TEMPLATE,
) -> str:
    """The model card's text (README.md of the Hub repo) for a checkpoint with `config` and `num_parameters`."""
    results = list(results)
    pipeline_tag = pipeline_tag_for(config, results)
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
        eval_results=eval_results_for(results) or None,
    )
    direction = f" ({config.source_lang} → {config.target_lang})" if pipeline_tag == "translation" else ""
    labels = (
        [config.id2label[i] for i in sorted(config.id2label)] if pipeline_tag.endswith("classification") else []
    )
    card = ModelCard.from_template(
        card_data,
        template_path=str(template),
        model_name=model_name,
        repo_id=repo_id,
        summary=f"A {num_parameters / 1e6:.1f}M-parameter encoder-decoder Transformer for {pipeline_tag}{direction}.",
        architecture=architecture,
        auto_class=AUTO_CLASS_OF_ARCHITECTURE.get(architecture, "AutoModel"),
        num_parameters=f"{num_parameters:,}",
        config=config.to_dict(),
        source_lang=config.source_lang,
        target_lang=config.target_lang,
        labels=labels,
        results=results,
        training_data=training_data,
        training_procedure=training_procedure,
        example=EXAMPLES.get(pipeline_tag, DEFAULT_EXAMPLE),
    )
    return str(card)
