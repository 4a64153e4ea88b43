"""ROUGE-1/2/L/Lsum (Lin, 2004) with Google's reference implementation (rouge-score), F-measures in 0-100."""

import datasets
import evaluate
from rouge_score import rouge_scorer, scoring


_CITATION = """@inproceedings{lin-2004-rouge,
  title = "{ROUGE}: A Package for Automatic Evaluation of Summaries", author = "Lin, Chin-Yew",
  booktitle = "Text Summarization Branches Out", year = "2004", pages = "74--81"}"""

_DESCRIPTION = "ROUGE F-measures (mean over examples, or bootstrap-aggregated with confidence intervals)."

_KWARGS = """
Args:
    predictions: list of summaries.
    references: one reference per prediction (or a list of references per prediction: the best-scoring one counts).
    use_stemmer: Porter-stem words before matching (default True, as in the summarization literature).
    use_aggregator: bootstrap-aggregate (mid score and 95% interval) instead of the plain mean.
Returns:
    rouge1, rouge2, rougeL, rougeLsum (0-100). rougeLsum splits summaries into sentences at newlines.
"""

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class VaswaniRouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS,
            features=[
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Score `predictions` against `references`."""
        # evaluate cannot tell which input format an empty list has, and fails obscurely; say what is wrong instead
        if predictions is not None and len(predictions) == 0:
            raise ValueError("There are no predictions to score: the evaluation set is empty.")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references, use_stemmer=True, use_aggregator=False):
        if not predictions:
            raise ValueError("ROUGE needs at least one prediction; the evaluation set is empty.")
        scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
        scores = []
        for prediction, reference in zip(predictions, references):
            if isinstance(reference, str):
                scores.append(scorer.score(reference, prediction))
            else:
                scores.append(scorer.score_multi(reference, prediction))
        if use_aggregator:
            aggregator = scoring.BootstrapAggregator()
            for score in scores:
                aggregator.add_scores(score)
            result = aggregator.aggregate()
            return {
                key: 100 * result[key].mid.fmeasure for key in ROUGE_TYPES
            } | {f"{key}_interval": (100 * result[key].low.fmeasure, 100 * result[key].high.fmeasure) for key in ROUGE_TYPES}
        return {key: 100 * sum(s[key].fmeasure for s in scores) / len(scores) for key in ROUGE_TYPES}
