"""vaswani.tasks, the one place a task is declared: every module that names tasks reads them there, each task's model
class loads through its Auto class, and a checkpoint's task is read from its config."""

import typing

import pytest
import transformers

import vaswani
from vaswani.evaluation.metrics.names import TASK_METRICS
from vaswani.evaluation.run import EvaluationArguments
from vaswani.remote_code.configuration_vaswani import CUSTOM_PIPELINES, VaswaniConfig
from vaswani.tasks import FEATURE_EXTRACTION, GENERATION_TASKS, TASKS, architecture_task, auto_class_of, task_of


def test_every_module_reads_the_tasks_from_the_registry():
    assert list(TASKS) == ["translation", "summarization", "text-classification", "token-classification"]
    assert TASK_METRICS == {name: task.metrics for name, task in TASKS.items()}
    task_field = EvaluationArguments.__dataclass_fields__["task"]
    assert typing.get_args(task_field.type) == tuple(TASKS)
    assert set(GENERATION_TASKS) == {"translation", "summarization"} <= set(CUSTOM_PIPELINES)


@pytest.mark.parametrize("name", [*TASKS, FEATURE_EXTRACTION.name])
def test_each_tasks_model_class_is_what_its_auto_class_loads(name):
    task = TASKS.get(name, FEATURE_EXTRACTION)
    model_class = getattr(vaswani, task.architecture)
    assert getattr(transformers, task.auto_class)._model_mapping[VaswaniConfig] is model_class
    if name in TASKS:
        assert auto_class_of(name) is getattr(transformers, task.auto_class)


def test_a_class_serving_one_task_is_that_task_and_the_generating_one_is_read_from_its_config(tmp_path):
    assert architecture_task("VaswaniForTokenClassification") is TASKS["token-classification"]
    assert architecture_task("VaswaniModel") is FEATURE_EXTRACTION
    assert architecture_task("VaswaniForConditionalGeneration") is None
    declared = {"translation": {}, "summarization": {}, "text2text-generation": {}}
    seq2seq = {"model_type": "vaswani", "architectures": ["VaswaniForConditionalGeneration"],
               "custom_pipelines": declared}
    assert task_of({**seq2seq, "source_lang": "en", "target_lang": "de"}, tmp_path) == "translation"
    assert task_of(seq2seq, tmp_path) == "summarization"
    assert task_of({"architectures": ["VaswaniForTokenClassification"]}, tmp_path) == "token-classification"
    with pytest.raises(ValueError, match="none of which is a task of this project"):
        task_of({**seq2seq, "custom_pipelines": {"text2text-generation": {}}}, tmp_path)
    with pytest.raises(ValueError, match=r"'VaswaniModel', which serves none of this project's tasks; the task heads "
                                         r"are VaswaniForConditionalGeneration, VaswaniForSequenceClassification"):
        task_of({"architectures": ["VaswaniModel"]}, tmp_path)
