"""ROUGE-1/2/L/Lsum (Lin, 2004) with Google's reference implementation (rouge-score): a drop-in for the Hub's
`evaluate.load("rouge")` (same arguments, defaults, keys and 0-1 scale) that loads without the Hub. The project reports
ROUGE as the summarization literature does (0-100, Porter-stemmed, mean over examples):
`vaswani.evaluation.metrics.rouge_percent`."""

import datasets
import evaluate
from rouge_score import rouge_scorer, scoring


_CITATION = """@inproceedings{lin-2004-rouge,
  title = "{ROUGE}: A Package for Automatic Evaluation of Summaries", author = "Lin, Chin-Yew",
  booktitle = "Text Summarization Branches Out", year = "2004", pages = "74--81"}"""

_DESCRIPTION = "ROUGE F-measures: bootstrap-aggregated (mid score), or one score per example."

_KWARGS = """
Args:
    predictions: list of summaries.
    references: one reference per prediction (or a list of references per prediction: the best-scoring one counts).
    rouge_types: which of rouge1, rouge2, rougeL, rougeLsum (default: all four).
    use_aggregator: bootstrap-aggregate and return the mid F-measure (default True); False: a list with each
        example's F-measure.
    use_stemmer: Porter-stem words before matching (default False, as the Hub module).
    tokenizer: an object with a `tokenize(text) -> list[str]` method, instead of rouge-score's default.
Returns:
    the F-measure of each ROUGE type, in 0-1. rougeLsum splits summaries into sentences at newlines.
"""

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class Rouge(evaluate.Metric):
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

    def _compute(self, predictions, references, rouge_types=None, use_aggregator=True, use_stemmer=False,
                 tokenizer=None):
        if not predictions:
            raise ValueError("ROUGE needs at least one prediction; the evaluation set is empty.")
        rouge_types = list(rouge_types or ROUGE_TYPES)
        scorer = rouge_scorer.RougeScorer(rouge_types, use_stemmer=use_stemmer, tokenizer=tokenizer)
        scores = []
        for prediction, reference in zip(predictions, references):
            if isinstance(reference, str):
                scores.append(scorer.score(reference, prediction))
            else:
                scores.append(scorer.score_multi(reference, prediction))
        if not use_aggregator:
            return {key: [score[key].fmeasure for score in scores] for key in rouge_types}
        aggregator = scoring.BootstrapAggregator()
        for score in scores:
            aggregator.add_scores(score)
        result = aggregator.aggregate()
        return {key: result[key].mid.fmeasure for key in rouge_types}
