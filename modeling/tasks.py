"""The tasks this project's models serve, declared once: for each, the model class (its `architectures` entry) and the
Auto class that loads it, the pipeline that serves it, the metrics it is scored with, the model card's example, and how
a model folder's task is read from its config (`task_of`, `read_task`). Evaluation, prediction, the web demo,
publishing and the model cards all read it here.

A new task head is: its model class in remote_code/modeling_vaswani.py (registered in `vaswani/__init__.py`), its
pipeline where transformers has none (remote_code/pipeline_vaswani.py, declared in configuration_vaswani.py's
CUSTOM_PIPELINES), its metrics (evaluation/metrics), and one `Task` here.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import transformers

from .remote_code.configuration_vaswani import VaswaniConfig, check_regular_files
from .safe_loading import check_model_folder


@dataclass(frozen=True)
class Task:
    """One task: `name` is transformers' pipeline task (and the card's `pipeline_tag`)."""

    name: str
    architecture: str  # the model class, as a config's `architectures` names it
    auto_class: str  # the transformers Auto class that loads it
    metrics: tuple[str, ...]  # what it is scored with, in the order results files list them
    example: str  # the model card's widget text

    def load_class(self):
        """The Auto class itself (transformers.AutoModelForSeq2SeqLM, ...)."""
        return getattr(transformers, self.auto_class)


TASKS: dict[str, Task] = {task.name: task for task in (
    Task("translation", "VaswaniForConditionalGeneration", "AutoModelForSeq2SeqLM", ("sacrebleu", "tokenized_bleu"),
         "A man is riding a horse."),
    Task("summarization", "VaswaniForConditionalGeneration", "AutoModelForSeq2SeqLM",
         ("rouge1", "rouge2", "rougeL", "rougeLsum"),
         "Hi Tom, the meeting moved to Friday at 10 in room 4. Please bring the budget draft. Anna"),
    Task("text-classification", "VaswaniForSequenceClassification", "AutoModelForSequenceClassification",
         ("accuracy", "f1"), "A gripping, funny and beautifully acted film."),
    Task("token-classification", "VaswaniForTokenClassification", "AutoModelForTokenClassification",
         ("entity_f1", "entity_precision", "entity_recall", "accuracy"), "Angela Merkel visited Paris in July ."),
)}
# a bare encoder-decoder serves none of these: transformers' feature extraction (its card's example is the one of
# any task without its own)
FEATURE_EXTRACTION = Task("feature-extraction", "VaswaniModel", "AutoModel", (),
                          "A gripping, funny and beautifully acted film.")
GENERATION_TASKS = tuple(name for name, task in TASKS.items() if task.auto_class == "AutoModelForSeq2SeqLM")
# what every model class of this project serves: the tasks, and the bare model's
EVERY_TASK = (*TASKS.values(), FEATURE_EXTRACTION)


def auto_class_of(task: str):
    """The Auto class that loads a model for `task`."""
    return TASKS[task].load_class()


def architecture_task(architecture: str) -> Task | None:
    """The task a model class serves where it serves one only (a classifier, a tagger, the bare model); None for the
    generating model, whose task its config says (`task_of`)."""
    serving = [task for task in EVERY_TASK if task.architecture == architecture]
    return serving[0] if len(serving) == 1 else None


def auto_class_name(architecture: str) -> str:
    """The name of the Auto class that loads a model class (AutoModel for a class of no task here)."""
    return next((task.auto_class for task in EVERY_TASK if task.architecture == architecture), "AutoModel")


def task_of(config: dict, folder: Path, option: str = "--model") -> str:
    """A model's task, from its config.json (as a dict): its head (`architectures`) and, for a
    sequence-to-sequence model, its direction (`source_lang`, `target_lang`: translation) or else the pipelines it
    declares (`custom_pipelines`: summarization)."""
    architecture = (config.get("architectures") or [None])[0]
    only = architecture_task(architecture)
    if only is not None and only.name in TASKS:
        return only.name
    if architecture == TASKS["translation"].architecture:
        declared = config.get("custom_pipelines")
        declared = TASKS if declared is None else declared  # a config from before the pipelines were declared
        if config.get("source_lang") and config.get("target_lang") and "translation" in declared:
            return "translation"
        if "summarization" in declared:
            return "summarization"
        raise ValueError(
            f"{option} {folder}: its config declares the pipelines {sorted(declared)}, none of which is a task of this "
            "project (a translation model needs source_lang and target_lang in its config; a summarizer declares "
            "'summarization')."
        )
    served = sorted({task.architecture for task in TASKS.values()})
    raise ValueError(
        f"{option} {folder}: config.json names the model class {architecture!r}, which serves none of this project's "
        f"tasks; the task heads are {', '.join(served)}."
    )


def read_task(folder: Path, option: str = "--model") -> str:
    """Check that `folder` is a model of this project and return its task, before anything is loaded: one
    line (a ValueError or FileNotFoundError) naming the option, the folder and what is wrong."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{option} {folder}: no such folder; give a model folder of this project.")
    check_regular_files(folder)  # a FIFO named config.json is not "no config.json", and is never opened
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{option} {folder} is not a model folder: it has no config.json.")
    check_model_folder(folder)  # before any of its files is parsed
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{option} {folder}: config.json is not valid JSON ({error}).") from None
    if not isinstance(config, dict) or config.get("model_type") != VaswaniConfig.model_type:
        model_type = config.get("model_type") if isinstance(config, dict) else None
        raise ValueError(
            f"{option} {folder} holds a {model_type!r} model, not a model of this project (model_type "
            f"{VaswaniConfig.model_type!r})."
        )
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{option} {folder} has no tokenizer (tokenizer.json): save it beside the model with "
            "tokenizer.save_pretrained(folder)."
        )
    return task_of(config, folder, option)


__all__ = ["EVERY_TASK", "FEATURE_EXTRACTION", "GENERATION_TASKS", "TASKS", "Task", "architecture_task",
           "auto_class_name", "auto_class_of", "read_task", "task_of"]
