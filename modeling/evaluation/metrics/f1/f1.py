"""F1 of label predictions, in 0-1: binary (of `pos_label`), or averaged over labels (macro, micro, weighted)."""

from collections import Counter

import datasets
import evaluate


_KWARGS = """
Args:
    predictions: predicted label ids.
    references: true label ids.
    average: "binary" (F1 of pos_label; the default), "macro", "micro" or "weighted".
    pos_label: the positive label for average="binary" (default 1).
Returns:
    f1 (0-1).
"""


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="F1 of label predictions.",
            citation="",
            inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, average="binary", pos_label=1):
        if not predictions:
            raise ValueError("F1 needs at least one prediction; the evaluation set is empty.")
        pairs = list(zip(predictions, references))
        if average == "binary":
            return {"f1": label_f1(pairs, pos_label)}
        labels = sorted(set(predictions) | set(references))
        if average == "macro":
            return {"f1": sum(label_f1(pairs, label) for label in labels) / len(labels)}
        if average == "weighted":
            support = Counter(references)
            return {"f1": sum(label_f1(pairs, label) * support[label] for label in labels) / len(references)}
        if average == "micro":
            # every prediction is a true or false positive of exactly one label: micro-F1 equals accuracy
            return {"f1": sum(p == r for p, r in pairs) / len(pairs)}
        raise ValueError(f"average must be 'binary', 'macro', 'micro' or 'weighted', got {average!r}.")


def label_f1(pairs, label) -> float:
    true_positive = sum(p == label and r == label for p, r in pairs)
    predicted = sum(p == label for p, _ in pairs)
    actual = sum(r == label for _, r in pairs)
    if predicted + actual == 0:
        return 0.0
    return 2 * true_positive / (predicted + actual)
