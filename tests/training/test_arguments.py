"""vaswani.training.arguments: an experiment config file overridden by the command line, the training data named on
the command line, and the options a checkpoint fixes."""

import pytest

from helpers import REPO
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


@pytest.mark.parametrize("option", ["torch_compile", "cuda_graphs"])
def test_a_checkpoint_from_before_an_option_that_pads_batches_resumes_only_without_it(option):
    """--torch_compile and --cuda_graphs pad the batches to a few shapes: other batches. A checkpoint written before
    the option existed trained on unpadded batches, so it continues without it and is refused with it."""
    from vaswani.training.arguments import options_changed_on_resume

    older = {"dropout": 0.1}  # the option not recorded
    assert options_changed_on_resume(older, {"dropout": 0.1, option: False}) == []
    assert options_changed_on_resume(older, {"dropout": 0.1, option: True}) == [f"--{option} False -> True"]


def test_best_metric_takes_the_names_the_logs_and_results_files_use_and_refuses_the_retired_bleu():
    """--best_metric names a score as metrics.jsonl logs it; `bleu`, which meant sacreBLEU here and tokenized BLEU in
    results files, is refused in one line naming both, not taken as either."""
    from vaswani.training.arguments import best_metric_name

    for name in ("sacrebleu", "tokenized_bleu", "loss"):
        data, _, args = parse_arguments(["--best_metric", name])
        assert best_metric_name(data, args) == name
    assert best_metric_name(*[parse_arguments([])[i] for i in (0, 2)]) == "sacrebleu"  # auto, for translation
    with pytest.raises(ValueError, match=r"^--best_metric bleu: `bleu` is a retired metric name \(it meant sacrebleu in "
                                         r"training and tokenized_bleu in results files and recipes\): use sacrebleu "
                                         r"or tokenized_bleu\.$"):
        parse_arguments(["--best_metric", "bleu"])
    with pytest.raises(ValueError, match=r"--best_metric rougeL is not scored for --task translation; it may be one "
                                         r"of \['auto', 'loss', 'sacrebleu', 'tokenized_bleu'\]"):
        parse_arguments(["--best_metric", "rougeL"])
    with pytest.raises(ValueError, match=r"--best_metric tokenized_bleu is not scored for --task summarization"):
        parse_arguments(["--best_metric", "tokenized_bleu", "--task", "summarization"])
