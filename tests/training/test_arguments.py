"""vaswani.training.arguments: an experiment config file overridden by the command line, the training data named on
the command line, the options' old names (with a warning), and the options a checkpoint fixes."""

import re

import pytest

from helpers import REPO, write_jsonl
from vaswani.cli import parse_config_overrides
from vaswani.training.arguments import load_config_file, parse_arguments

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_config_file_is_overridden_by_the_command_line(tmp_path):
    config = tmp_path / "experiment.yaml"
    config.write_text("max_steps: 10\ndropout: 0.3\nconfig_overrides: {encoder_layers: 1, layer_norm_position: pre}\n"
                      "source_column: document\n")
    data, model_args, args = parse_arguments(["--config", str(config), "--max_steps", "20"])
    assert (args.max_steps, model_args.dropout, data.source_column) == (20, 0.3, "document")
    assert model_args.config_overrides == "encoder_layers=1,layer_norm_position=pre"  # as the command line gives them
    _, model_args, _ = parse_arguments(["--config", str(config), "--config_overrides", "encoder_layers=3"])
    assert parse_config_overrides(model_args.config_overrides) == {"encoder_layers": 3}

    config.write_text("max_step: 10\n")
    with pytest.raises(ValueError, match=r"unknown option 'max_step'; did you mean 'max_steps'\?"):
        load_config_file(str(config))
    with pytest.raises(ValueError, match=r"--config_overrides: 'layers' is not of the form key=value"):
        parse_arguments(["--config_overrides", "layers"])
    with pytest.raises(ValueError, match=r"Set dropout with --dropout, not inside --config_overrides"):
        parse_arguments(["--config_overrides", "d_model=64,dropout=0.3"])


def test_training_data_named_on_the_command_line_replace_the_configs(tmp_path, monkeypatch):
    config = tmp_path / "experiment.yaml"
    config.write_text("train_file: data/train.jsonl\nvalidation_file: data/validation.jsonl\n")
    data, _, _ = parse_arguments(["--config", str(config), "--dataset_name", "bentrevett/multi30k"])
    assert (data.train_file, data.dataset_name) == (None, "bentrevett/multi30k")
    assert data.validation_file == "data/validation.jsonl"  # the validation file stays, as the config comments say
    monkeypatch.chdir(REPO)
    data, _, _ = parse_arguments(["--config", "scripts/configs/quickstart.yaml", "--train_file", "mine.jsonl"])
    assert (data.train_file, data.dataset_name) == ("mine.jsonl", None)
    assert parse_arguments([])[0].dataset_name == "synthetic"  # neither: the toy task, as before


def test_an_old_style_config_and_command_line_still_work_with_a_warning_each(tmp_path, capsys):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(8)])
    config = tmp_path / "old.yaml"
    config.write_text(f"dataset: {train_file}\nvalidation_dataset: {train_file}\nmax_eval_examples: 3\n"
                      "model_overrides: {encoder_layers: 1, layer_norm_position: pre}\n")
    data, model_args, _ = parse_arguments(["--config", str(config), "--max_train_examples", "5",
                                           "--dataset_config", "de-en"])
    assert (data.train_file, data.dataset_name, data.validation_file) == (str(train_file), None, str(train_file))
    assert (data.max_train_samples, data.max_eval_samples, data.dataset_config_name) == (5, 3, "de-en")
    assert parse_config_overrides(model_args.config_overrides) == {"encoder_layers": 1, "layer_norm_position": "pre"}
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        "train.py: warning: --max_train_examples is deprecated (removed in the next release); use --max_train_samples",
        "train.py: warning: --dataset_config is deprecated (removed in the next release); use --dataset_config_name",
        f"train.py: warning: dataset (in {config}) is deprecated (removed in the next release); use train_file",
        f"train.py: warning: validation_dataset (in {config}) is deprecated (removed in the next release); use "
        "validation_file",
        f"train.py: warning: max_eval_examples (in {config}) is deprecated (removed in the next release); use "
        "max_eval_samples",
        f"train.py: warning: model_overrides (in {config}) is deprecated (removed in the next release); use "
        "config_overrides encoder_layers=1,layer_norm_position=pre",
    ]
    data, model_args, _ = parse_arguments(["--dataset", "synthetic", "--model_overrides", '{"d_model": 64}'])
    assert (data.dataset_name, model_args.config_overrides) == ("synthetic", "d_model=64")
    assert capsys.readouterr().err.splitlines() == [
        "train.py: warning: --dataset is deprecated (removed in the next release); use --dataset_name",
        "train.py: warning: --model_overrides is deprecated (removed in the next release); use --config_overrides "
        "d_model=64",
    ]
    with pytest.raises(ValueError, match=r"--model_overrides must be a JSON object"):
        parse_arguments(["--model_overrides", "{layers: 2"])
    config.write_text(f"dataset: {train_file}\ntrain_file: other.jsonl\n")
    with pytest.raises(ValueError, match=rf"dataset: {re.escape(str(train_file))} in .*old.yaml and train_file: "
                                         r"other.jsonl in .*old.yaml would both set train_file"):
        parse_arguments(["--config", str(config)])


def test_a_checkpoint_from_before_torch_compile_resumes_only_without_it():
    """--torch_compile pads the batches to a few shapes: other batches. A checkpoint written before the option existed
    trained on unpadded batches, so it continues without it and is refused with it."""
    from vaswani.training.arguments import options_changed_on_resume

    older = {"dropout": 0.1}  # no torch_compile recorded
    assert options_changed_on_resume(older, {"dropout": 0.1, "torch_compile": False}) == []
    assert options_changed_on_resume(older, {"dropout": 0.1, "torch_compile": True}) == ["--torch_compile False -> True"]
