"""Accuracy: the fraction of predictions equal to their reference, in 0-1."""

import datasets
import evaluate


_KWARGS = """
Args:
    predictions: predicted label ids.
    references: true label ids.
Returns:
    accuracy (0-1).
"""


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Accuracy of label predictions.",
            citation="",
            inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        if not predictions:
            raise ValueError("Accuracy needs at least one prediction; the evaluation set is empty.")
        return {"accuracy": sum(p == r for p, r in zip(predictions, references)) / len(predictions)}
