"""The names of the metrics the project reports: one name a meaning, written the same wherever a number is kept or
chosen by name: training's `metrics.jsonl` and summary, the fine-tuning scripts' logs (with the Trainer's `eval_`
before it), the results files of scripts/evaluate_model.py, the recipes' `metrics` and `goal`, the model cards'
metadata, and train.py's --best_metric.

A name an older version wrote with two meanings is retired, not guessed at: `retired_metric` says what it meant and
which names replace it, and `RENAME_COMMAND` rewrites the files that hold it to what it meant in each. A name that
keeps one meaning but an older version also wrote for another task's score (`f1`, text classification's, was token
classification's entity F1) is retired for that task only.
"""

from dataclasses import dataclass

from ...tasks import TASKS


@dataclass(frozen=True)
class MetricType:
    meaning: str
    scale: int  # 100 (BLEU, ROUGE: 0-100) or 1 (the others: 0-1)

    @property
    def digits(self) -> int:
        """The digits a results file keeps: two of a 0-100 score, four of a 0-1 one."""
        return 2 if self.scale == 100 else 4


METRIC_TYPES = {
    "sacrebleu": MetricType("sacreBLEU: BLEU of the detokenized, cased output against the raw references", 100),
    "tokenized_bleu": MetricType("BLEU of lowercased, Moses-tokenized text, as papers report it", 100),
    "tokenized_bleu_compound_split": MetricType(
        "BLEU of cased, Moses-tokenized text with hyphenated compounds split (a-b -> a ##AT##-##AT## b), as WMT14 "
        "English-German is scored in the papers (tensor2tensor's get_ende_bleu.sh)", 100),
    "rouge1": MetricType("ROUGE-1 F-measure, Porter-stemmed, the mean over examples", 100),
    "rouge2": MetricType("ROUGE-2 F-measure, Porter-stemmed, the mean over examples", 100),
    "rougeL": MetricType("ROUGE-L F-measure, Porter-stemmed, the mean over examples", 100),
    "rougeLsum": MetricType("ROUGE-Lsum F-measure (summaries cut into sentences at line breaks)", 100),
    "accuracy": MetricType("the share of labels (text classification) or words (tagging) predicted right", 1),
    "f1": MetricType("F1 of label 1 with two labels, else macro-averaged (text classification)", 1),
    "entity_f1": MetricType("entity-level F1, an entity counting when its type, first and last word match, as "
                            "conlleval counts (tagging)", 1),
    "entity_precision": MetricType("entity-level precision (tagging)", 1),
    "entity_recall": MetricType("entity-level recall (tagging)", 1),
}

# What each task is scored with, in the order results files list it (vaswani.evaluation.metrics.compute_scores): the
# task registry's (vaswani.tasks)
TASK_METRICS = {name: task.metrics for name, task in TASKS.items()}

# What a task may be scored with besides, when asked (scripts/evaluate_model.py --compound_split), listed after them.
OPTIONAL_TASK_METRICS = {"translation": ("tokenized_bleu_compound_split",)}

# Names an older version wrote, by what they meant where: {name: {where it was written: the name it is now}}.
RETIRED_NAMES = {
    "bleu": {
        "training": "sacrebleu",  # metrics.jsonl, --best_metric, a training summary's best_metric
        "results": "tokenized_bleu",  # results files, the recipes' metrics and goal, model cards
    },
}

# Names an older version wrote for one task's scores, retired for that task only: {task: {name: the name it is now}}.
RETIRED_TASK_NAMES = {
    "token-classification": {"f1": "entity_f1", "precision": "entity_precision", "recall": "entity_recall"},
}

# the repository's command that rewrites the retired names in the files an older version wrote
RENAME_COMMAND = "python scripts/tools/results_table.py --rename_metrics"


def renamed_metric(name: str, where: str, task: str | None = None) -> str | None:
    """The name a retired `name` is now where it was written (`where`: "training" or "results") for `task`, or None
    where it is not retired there."""
    if name in RETIRED_TASK_NAMES.get(task, {}):
        return RETIRED_TASK_NAMES[task][name]
    return RETIRED_NAMES[name][where] if name in RETIRED_NAMES else None


def retired_metric(name: str, task: str | None = None) -> str | None:
    """Why `name` is no longer a metric name (of `task`, where given) and which names replace it (for a one-line
    error), or None where it is not retired."""
    if name in RETIRED_TASK_NAMES.get(task, {}):
        renamed = RETIRED_TASK_NAMES[task][name]
        return f"`{name}` is a retired metric name of {task} (it meant {renamed}): use {renamed}"
    if name not in RETIRED_NAMES:
        return None
    meant = RETIRED_NAMES[name]
    return (f"`{name}` is a retired metric name (it meant {meant['training']} in training and {meant['results']} in "
            f"results files and recipes): use {' or '.join(sorted(set(meant.values())))}")


__all__ = [
    "METRIC_TYPES", "MetricType", "OPTIONAL_TASK_METRICS", "RENAME_COMMAND", "RETIRED_NAMES", "RETIRED_TASK_NAMES",
    "TASK_METRICS", "renamed_metric", "retired_metric",
]
