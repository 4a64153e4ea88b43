"""The metrics the project reports, shipped as local `evaluate` modules.

`evaluate.load("sacrebleu")` fetches its code from the Hub, which many clusters (and these machines) cannot reach.
These modules load from this folder, so the same code works online and offline:

    from vaswani.metrics import load_metric
    bleu = load_metric("sacrebleu")
    bleu.compute(predictions=["Ein Mann reitet."], references=[["Ein Mann reitet."]])   # {"score": 100.0, "signature": ...}

Each is an ordinary `evaluate.Metric`; they wrap the reference implementations (sacreBLEU, sacremoses, Google's
rouge-score) rather than re-implementing them, except accuracy/F1 and the CoNLL-style entity F1, which are a few
lines each.
"""

from pathlib import Path

import evaluate


METRICS_DIR = Path(__file__).resolve().parent
NAMES = ("sacrebleu", "tokenized_bleu", "rouge", "accuracy", "f1", "seqeval")


def metric_path(name: str) -> str:
    """The folder of one metric module, for `evaluate.load(metric_path(name))`."""
    if name not in NAMES:
        raise ValueError(f"Unknown metric {name!r}; the project ships {list(NAMES)}.")
    return str(METRICS_DIR / f"vaswani_{name}")


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """Load one of the project's metrics (see NAMES) as an `evaluate` module, without the Hub."""
    return evaluate.load(metric_path(name), **kwargs)


__all__ = ["NAMES", "load_metric", "metric_path"]
