"""The pipeline tasks a model of this project serves, registered with `transformers.pipeline` so that a model *object*
is served as its folder is.

From a folder, `transformers.pipeline(task, model=DIR, trust_remote_code=True)` finds the task in the folder's config
(`custom_pipelines`) and takes its class from the folder's own `pipeline_vaswani.py`. Given a model object,
transformers looks only at its own registry, where transformers 5 has no translation, summarization or
text2text-generation (it raises KeyError: "removed"), and where token-classification is its own pipeline, which
guesses this tokenizer's words ("AngelaMerkel"). So building a model of this project registers, for every task its
config declares, `ServedPipeline`: a stand-in that builds, for a model of this project, the class a folder would give
(the installed package's `vaswani.pipelines`, or the folder's own file for a model of the folder's class), and
for a model of any other project what transformers itself does (its token-classification pipeline; KeyError for the
removed tasks). The registry is transformers' `PIPELINE_REGISTRY`, the one `PIPELINE_REGISTRY.register_pipeline`
writes; the removed tasks are taken out of `REMOVED_TASKS`, which would otherwise refuse them first.

This file is copied into every saved model and imported there on its own, so it imports only the standard
library, transformers and pipeline_vaswani.py beside it (when a pipeline is built).
"""

import importlib

import transformers
from transformers import pipelines as transformers_pipelines


# What transformers' registry held for a task before this module replaced it (token-classification: its own class).
_TRANSFORMERS_ENTRIES: dict[str, dict] = {}
# transformers' message for a task it removed, kept to answer a model of another project as transformers would
_REMOVED_MESSAGES: dict[str, str] = {}


class ServedPipeline:
    """What `transformers.pipeline(task, model=<object>)` builds for a task registered here (see the module
    docstring). transformers reads the `_load_*` flags to know what to load beside the model: the tokenizer only."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def __new__(cls, model, task: str, **kwargs):
        if getattr(getattr(model, "config", None), "model_type", None) != "vaswani":
            return _transformers_pipeline(model, task, **kwargs)
        return pipeline_class_of(model, task)(model=model, task=task, **kwargs)


def pipeline_class_of(model, task: str) -> type:
    """The class `transformers.pipeline(task, model=FOLDER, trust_remote_code=True)` would build for `model`'s folder:
    the one its config declares for `task`, from the pipeline file beside this one: the installed package's for a
    model of the package's class, the folder's own for a model of the folder's code."""
    declared = getattr(model.config, "custom_pipelines", None) or {}
    entry = declared.get(task) or declared.get(_canonical(task))
    if entry is None:
        own = sorted(declared) or "no pipeline of its own (text-classification is transformers' own)"
        made_as = ", ".join(getattr(model.config, "architectures", None) or [type(model).__name__])
        raise ValueError(
            f"This model ({made_as}) does not serve the {task!r} pipeline: its config declares {own}. Translation, "
            "summarization and text2text-generation need a VaswaniForConditionalGeneration, token-classification a "
            "VaswaniForTokenClassification."
        )
    module_name, class_name = entry["impl"].rsplit(".", 1)
    # the pipeline file beside this one (the package's, or the model's), imported when a pipeline is built, not
    # with the model; written `from .module import`, the form transformers follows when it copies a model's code
    # into its module cache
    from .pipeline_vaswani import (
        SummarizationPipeline,
        Text2TextGenerationPipeline,
        TokenClassificationPipeline,
        TranslationPipeline,
    )

    classes = {pipeline.__name__: pipeline for pipeline in (
        SummarizationPipeline, Text2TextGenerationPipeline, TokenClassificationPipeline, TranslationPipeline)}
    if module_name != "pipeline_vaswani" or class_name not in classes:
        raise ValueError(f"The config's pipeline {entry['impl']!r} for {task!r} is not one of this project's "
                         f"({', '.join(f'pipeline_vaswani.{name}' for name in sorted(classes))}).")
    return classes[class_name]


def _canonical(task: str) -> str:
    """A task's own name for one of its aliases in transformers ("ner": token-classification)."""
    return getattr(transformers_pipelines, "TASK_ALIASES", {}).get(task, task)


def _transformers_pipeline(model, task: str, **kwargs):
    """What transformers itself gives a model of another project for `task`."""
    original = _TRANSFORMERS_ENTRIES.get(_canonical(task))
    if original is not None:
        impl = original["impl"]
        if isinstance(impl, str):  # transformers 5 names its classes by their dotted path, imported when used
            module_name, class_name = impl.rsplit(".", 1)
            impl = getattr(importlib.import_module(module_name), class_name)
        return impl(model=model, task=task, **kwargs)
    raise KeyError(
        _REMOVED_MESSAGES.get(task.split("_")[0] if task.startswith("translation_") else task)
        or f"The task {task} is served by this project's pipelines for its own models only."
    )


def register_pipeline_tasks(config) -> None:
    """Register `ServedPipeline` for every task in `config.custom_pipelines` (see the module docstring). Called when
    a model of this project is built; registering a task again changes nothing."""
    registry = getattr(transformers_pipelines, "PIPELINE_REGISTRY", None)
    removed = getattr(transformers_pipelines, "REMOVED_TASKS", None)
    if registry is None or not isinstance(getattr(registry, "supported_tasks", None), dict):
        return  # a transformers without the registry this relies on: pipelines from folders still work
    for task, declaration in (getattr(config, "custom_pipelines", None) or {}).items():
        base = "translation" if task.startswith("translation_") else task
        if isinstance(removed, dict) and base in removed:
            _REMOVED_MESSAGES[base] = (
                f"The task {base} has been removed from transformers. {removed.pop(base)}"
            )
        current = registry.supported_tasks.get(task)
        if current is not None and getattr(current.get("impl"), "__name__", None) == ServedPipeline.__name__:
            continue  # registered already (by this copy of the file or another model's: they do the same)
        if current is not None:
            _TRANSFORMERS_ENTRIES.setdefault(task, current)
        model_classes = tuple(getattr(transformers, name) for name in (declaration.get("pt") or ()))
        registry.supported_tasks[task] = {
            **(current or {}),
            "impl": ServedPipeline,
            "pt": model_classes or (current or {}).get("pt", ()),
            "type": declaration.get("type", "text"),
        }


__all__ = ["ServedPipeline", "pipeline_class_of", "register_pipeline_tasks"]
