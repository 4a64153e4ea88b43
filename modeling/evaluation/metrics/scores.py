"""The one place the project's metrics are computed. Training's evaluations (vaswani.training.validation), the
fine-tuning scripts' `compute_metrics`, scripts/evaluate_model.py and the extractive baselines all score through
`compute_scores`, so that a number of one name (vaswani.evaluation.metrics.names) is computed one way everywhere:

    from vaswani.evaluation.metrics import compute_scores
    scores = compute_scores("translation", ["Ein Mann reitet."], ["Ein Mann reitet."], target_lang="de")
    [(score.type, score.value) for score in scores]   # [("sacrebleu", 100.0), ("tokenized_bleu", 100.0)]

Each `Score` keeps its value unrounded (a log or a best-model choice takes it as it is); `as_entry` gives it as an
entry of a results file, rounded to the digits its scale keeps.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version

from . import load_metric, rouge_percent
from .names import METRIC_TYPES, OPTIONAL_TASK_METRICS, TASK_METRICS


@dataclass(frozen=True)
class Score:
    type: str  # the metric's name, one of METRIC_TYPES
    name: str  # how tables and cards show it
    value: float  # unrounded
    signature: str | None = None  # how it was computed (the BLEUs, ROUGE); None where there is nothing to say

    def as_entry(self) -> dict:
        """The score as an entry of a results file: `{"type", "name", "value", "signature"?}`."""
        entry = {"type": self.type, "name": self.name, "value": round(self.value, METRIC_TYPES[self.type].digits)}
        if self.signature is not None:
            entry["signature"] = self.signature
        return entry


def _translation(predictions: Sequence[str], references: Sequence[str], target_lang: str,
                 compound_split: bool = False) -> list[Score]:
    references = [[reference] for reference in references]
    sacrebleu = load_metric("sacrebleu", keep_in_memory=True).compute(predictions=predictions, references=references)
    tokenized_bleu = load_metric("tokenized_bleu", keep_in_memory=True)
    tokenized = tokenized_bleu.compute(predictions=predictions, references=references, lang=target_lang)
    scores = [
        Score("sacrebleu", "sacreBLEU", sacrebleu["score"], sacrebleu["signature"]),
        Score("tokenized_bleu", "BLEU (tokenized, lowercased)", tokenized["score"], tokenized["signature"]),
    ]
    if compound_split:
        split = tokenized_bleu.compute(predictions=predictions, references=references, lang=target_lang,
                                       lowercase=False, normalize=False, compound_split=True)
        scores.append(Score("tokenized_bleu_compound_split", "BLEU (tokenized, cased, compounds split)",
                            split["score"], split["signature"]))
    return scores


ROUGE_NAMES = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum"}


def _summarization(predictions: Sequence[str], references: Sequence[str]) -> list[Score]:
    scores = rouge_percent(predictions, references)
    signature = f"rouge-score:{version('rouge-score')}|stemmer:yes|f-measure|mean-over-examples"
    return [Score(key, name, scores[key], signature) for key, name in ROUGE_NAMES.items()]


def _text_classification(predictions, references, num_labels: int) -> list[Score]:
    accuracy = load_metric("accuracy", keep_in_memory=True).compute(predictions=predictions, references=references)
    average = "binary" if num_labels == 2 else "macro"
    f1 = load_metric("f1", keep_in_memory=True).compute(predictions=predictions, references=references, average=average)
    return [Score("accuracy", "Accuracy", float(accuracy["accuracy"])), Score("f1", f"F1 ({average})", float(f1["f1"]))]


def _token_classification(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> list[Score]:
    scores = load_metric("seqeval", keep_in_memory=True).compute(predictions=predictions, references=references)
    return [
        Score("entity_f1", "Entity F1 (seqeval-style)", scores["overall_f1"]),
        Score("entity_precision", "Entity precision", scores["overall_precision"]),
        Score("entity_recall", "Entity recall", scores["overall_recall"]),
        Score("accuracy", "Token accuracy", scores["overall_accuracy"]),
    ]


def compute_scores(
    task: str, predictions, references, *, target_lang: str = "en", num_labels: int | None = None,
    compound_split: bool = False,
) -> list[Score]:
    """The task's metrics (names.TASK_METRICS, in that order) of `predictions` against `references`, one of each
    per prediction:

    - translation: texts; sacreBLEU, and tokenized lowercased BLEU with Moses' rules for `target_lang`; with
      `compound_split`, then tokenized cased BLEU with hyphenated compounds split, as WMT14 en-de is scored
      (`tokenized_bleu_compound_split`, names.OPTIONAL_TASK_METRICS);
    - summarization: texts; ROUGE-1/2/L/Lsum F-measures in 0-100, Porter-stemmed, the mean over examples;
    - text-classification: label ids; accuracy, and F1 of label 1 where `num_labels` is 2, else macro-averaged;
    - token-classification: a tag sequence each (BIO names); `entity_f1`, `entity_precision` and
      `entity_recall`, and token accuracy."""
    if compound_split and task != "translation":
        raise ValueError(f"Compound splitting is a rule of translation BLEU; --task {task} is not scored with it.")
    if task == "translation":
        scores = _translation(list(predictions), list(references), target_lang, compound_split)
    elif task == "summarization":
        scores = _summarization(predictions, references)
    elif task == "text-classification":
        if num_labels is None:
            raise ValueError("Scoring text classification needs num_labels (binary or macro-averaged F1).")
        scores = _text_classification(predictions, references, num_labels)
    elif task == "token-classification":
        scores = _token_classification(predictions, references)
    else:
        raise ValueError(f"No metrics for task {task!r}; the tasks scored are {list(TASK_METRICS)}.")
    extra = OPTIONAL_TASK_METRICS[task] if compound_split else ()
    assert tuple(score.type for score in scores) == TASK_METRICS[task] + extra
    return scores


def score_values(scores: Sequence[Score]) -> dict[str, float]:
    """`{type: value}` of each score, unrounded: what a training log records."""
    return {score.type: score.value for score in scores}


__all__ = ["ROUGE_NAMES", "Score", "compute_scores", "score_values"]
