"""The metrics the project reports, shipped as local `evaluate` modules.

`evaluate.load("sacrebleu")` fetches its code from the Hub, which many clusters (and these machines) cannot reach.
These modules load from this folder, so the same code works online and offline:

    from vaswani.evaluation.metrics import load_metric
    sacrebleu = load_metric("sacrebleu")
    sacrebleu.compute(predictions=["Ein Mann reitet."], references=[["Ein Mann reitet."]])  # {"score": 100.0, ...}

Each is an ordinary `evaluate.Metric` named as its Hub counterpart (`sacrebleu`, `rouge`, `accuracy`, `f1`, `seqeval`)
and answering as it does (same arguments, defaults, keys and scales: BLEU 0-100, the others 0-1), so a script written
for `evaluate.load("rouge")` runs unchanged on `evaluate.load(metric_path("rouge"))`; `tokenized_bleu` (BLEU as the
papers compute it) has no Hub counterpart. They wrap the reference implementations (sacreBLEU, sacremoses, Google's
rouge-score) rather than re-implementing them, except accuracy/F1 and the CoNLL-style entity F1, which are a few
lines each.

What the project reports goes through one function, `compute_scores` (`scores`), under one vocabulary of names
(`names`: `sacrebleu`, `tokenized_bleu`, `rouge1`, ..., `accuracy`, `f1`, `entity_f1`, ...).
"""

from pathlib import Path

import evaluate


METRICS_DIR = Path(__file__).resolve().parent
NAMES = ("sacrebleu", "tokenized_bleu", "rouge", "accuracy", "f1", "seqeval")


def metric_path(name: str) -> str:
    """The folder of one metric module, for `evaluate.load(metric_path(name))`."""
    if name not in NAMES:
        raise ValueError(f"Unknown metric {name!r}; the project ships {list(NAMES)}.")
    return str(METRICS_DIR / name)


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """Load one of the project's metrics (see NAMES) as an `evaluate` module, without the Hub."""
    return evaluate.load(metric_path(name), **kwargs)


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def rouge_percent(predictions, references) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum as the project (and the summarization literature) reports them: F-measures in 0-100 with
    Porter stemming, the mean over examples."""
    scores = load_metric("rouge", keep_in_memory=True).compute(
        predictions=list(predictions), references=list(references), use_stemmer=True, use_aggregator=False
    )
    return {key: 100 * sum(scores[key]) / len(scores[key]) for key in ROUGE_TYPES}


# after load_metric and rouge_percent, which the scores are computed with
from .names import METRIC_TYPES, TASK_METRICS, retired_metric  # noqa: E402
from .scores import Score, compute_scores, score_values  # noqa: E402


__all__ = [
    "METRIC_TYPES",
    "NAMES",
    "ROUGE_TYPES",
    "Score",
    "TASK_METRICS",
    "compute_scores",
    "load_metric",
    "metric_path",
    "retired_metric",
    "rouge_percent",
    "score_values",
]
