"""The pipelines, for use in a process where this package is imported.

A saved model needs nothing from here: it carries `pipeline_vaswani.py` and declares the tasks in its config, so
`transformers.pipeline("translation", model=DIR, trust_remote_code=True)` works anywhere, and a model object of this
project is served by `transformers.pipeline` as its folder is (its classes register the tasks: `pipeline_tasks.py`).
Here, the same classes built directly, and `pipeline`, which also builds them from a folder without
`trust_remote_code` (the installed package's code, not the folder's):

    from vaswani.pipelines import TranslationPipeline, pipeline

    translator = pipeline("translation", model="my-model")                   # transformers.pipeline, from the package
    translator = TranslationPipeline(model=model, tokenizer=tokenizer)        # a pipeline class built directly
"""

import json
from pathlib import Path

import transformers

from ..safe_loading import check_model_folder
from ..remote_code.pipeline_vaswani import (
    SummarizationPipeline,
    Text2TextGenerationPipeline,
    TokenClassificationPipeline,
    TranslationPipeline,
)


GENERATION_PIPELINE_CLASSES = {
    "translation": TranslationPipeline,
    "summarization": SummarizationPipeline,
    "text2text-generation": Text2TextGenerationPipeline,
}
PIPELINE_CLASSES = {**GENERATION_PIPELINE_CLASSES, "token-classification": TokenClassificationPipeline}


def pipeline(task: str | None = None, model=None, **kwargs) -> transformers.Pipeline:
    """`transformers.pipeline`, with "translation", "summarization", "text2text-generation" and
    "token-classification" served by this package's classes from a model folder (no `trust_remote_code` needed
    here); a model object is served as by `transformers.pipeline` itself, which its class told what it serves
    (`pipeline_tasks.py`). A generation task is refused, by name, for a model that does not declare it. Every
    other task, and every argument, goes to `transformers.pipeline` unchanged."""
    pipeline_class = PIPELINE_CLASSES.get(task)
    if pipeline_class is not None:
        if task in GENERATION_PIPELINE_CLASSES:
            check_serves(task, model)
        if isinstance(model, (str, Path)):
            kwargs.setdefault("pipeline_class", pipeline_class)
    return transformers.pipeline(task, model=model, **kwargs)


def check_serves(task: str, model) -> None:
    """A model (folder or model object) of this project declares in its config the pipelines its head serves
    (`custom_pipelines`): a classifier declares none, so it is never turned into a translator with a random decoder."""
    if isinstance(model, (str, Path)):
        check_model_folder(model)  # before any of its files is parsed
        config_file = Path(model) / "config.json"
        if not config_file.is_file():
            return  # a Hub id: transformers resolves it
        config = json.loads(config_file.read_text(encoding="utf-8"))
        name, declared, architectures = str(model), config.get("custom_pipelines"), config.get("architectures")
    elif model is not None and getattr(model, "config", None) is not None:
        name, declared = type(model).__name__, getattr(model.config, "custom_pipelines", None)
        architectures = [type(model).__name__]
    else:
        return
    if declared is not None and task not in declared:
        raise ValueError(
            f"{name} ({', '.join(architectures or ['unknown architecture'])}) does not serve the {task!r} pipeline: "
            f"it declares {sorted(declared) or 'none of the generation pipelines'}. Translation, summarization and "
            "text2text-generation need a VaswaniForConditionalGeneration model."
        )


__all__ = [
    "PIPELINE_CLASSES",
    "SummarizationPipeline",
    "Text2TextGenerationPipeline",
    "TokenClassificationPipeline",
    "TranslationPipeline",
    "pipeline",
]
