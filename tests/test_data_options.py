"""The data and override options of every script: the names of transformers' example scripts (`--train_file`,
`--validation_file`, `--dataset_name`, `--max_train_samples`, `--config_overrides`), each split from one source, and
the spellings of the last release still read, with one warning each (vaswani.cli.OLD_OPTIONS).

train.py's options and config files are tested in training/test_arguments.py, its checkpoints in
training/test_checkpoints.py, evaluate_model.py's and the fine-tuning scripts' runs in their own files; the model
card's reading of old records in test_push_to_hub.py."""

import re
from types import SimpleNamespace

import datasets
import pytest

from helpers import load_script, write_jsonl
from vaswani.cli import OLD_OPTIONS, format_config_overrides, modern_argv, parse_config_overrides
from vaswani.data import data_source, evaluated_source
from vaswani.finetuning import DataArguments, load_splits


DEPRECATED = "is deprecated (removed in the next release); use"


def warnings(capsys) -> list[str]:
    """The warning lines on stderr (datasets' progress bars go there too)."""
    return [line for line in capsys.readouterr().err.splitlines() if ": warning: " in line]


# --- the rewrite of the last release's options ----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--max_examples", "3"], ["--max_examples=3"], ["--max-examples", "3"],
                                  ["--max-examples=3"]])
def test_every_spelling_of_an_old_option_is_rewritten_with_one_warning(argv, capsys):
    assert modern_argv([*argv, "--split", "test"], OLD_OPTIONS["evaluation"], "evaluate_model.py") == [
        "--max_eval_samples", "3", "--split", "test"]
    assert warnings(capsys) == [f"evaluate_model.py: warning: --max_examples {DEPRECATED} --max_eval_samples"]


def test_the_replacement_of_a_data_option_depends_on_its_value(capsys):
    train_py = OLD_OPTIONS["train.py"]
    assert modern_argv(["--dataset", "data/train.jsonl"], train_py, "train.py") == ["--train_file", "data/train.jsonl"]
    assert modern_argv(["--dataset", "bentrevett/multi30k"], train_py, "train.py") == [
        "--dataset_name", "bentrevett/multi30k"]
    assert modern_argv(["--dataset", "synthetic"], train_py, "train.py") == ["--dataset_name", "synthetic"]
    assert modern_argv(["--model_overrides", '{"d_model": 128, "layer_norm_position": "pre"}'], train_py,
                       "train.py") == ["--config_overrides", "d_model=128,layer_norm_position=pre"]
    assert warnings(capsys) == [
        f"train.py: warning: --dataset {DEPRECATED} --train_file",
        f"train.py: warning: --dataset {DEPRECATED} --dataset_name",
        f"train.py: warning: --dataset {DEPRECATED} --dataset_name",
        f"train.py: warning: --model_overrides {DEPRECATED} --config_overrides d_model=128,layer_norm_position=pre",
    ]
    fine_tuning = OLD_OPTIONS["fine-tuning"]
    assert modern_argv(["--train_data", "a.csv", "--validation_data", "b.csv", "--dataset_config", "en"], fine_tuning,
                       "finetune_seq2seq.py") == [
        "--train_file", "a.csv", "--validation_file", "b.csv", "--dataset_config_name", "en"]
    # a Hub dataset for both splits is one --dataset_name
    assert modern_argv(["--train_data", "knkarthick/samsum", "--validation_data", "knkarthick/samsum"], fine_tuning,
                       "finetune_seq2seq.py") == ["--dataset_name", "knkarthick/samsum"] * 2


def test_evaluate_models_dataset_name_is_the_old_recorded_name_only_beside_dataset(capsys):
    evaluation = OLD_OPTIONS["evaluation"]
    assert modern_argv(["--dataset", "test.jsonl", "--dataset_name", "bentrevett/multi30k"], evaluation, "e.py") == [
        "--validation_file", "test.jsonl", "--dataset_label", "bentrevett/multi30k"]
    assert warnings(capsys) == [f"e.py: warning: --dataset {DEPRECATED} --validation_file",
                                f"e.py: warning: --dataset_name beside --dataset {DEPRECATED} --dataset_label"]
    assert modern_argv(["--dataset_name", "bentrevett/multi30k"], evaluation, "e.py") == [
        "--dataset_name", "bentrevett/multi30k"]
    assert warnings(capsys) == []  # today's meaning: the Hub dataset


@pytest.mark.parametrize("family, argv, message", [
    ("fine-tuning", ["--train_data", "a/b", "--validation_data", "c/d"],
     "--train_data a/b and --validation_data c/d would both set --dataset_name, to 'a/b' and 'c/d'"),
    ("train.py", ["--train_file", "mine.jsonl", "--dataset", "other.jsonl"],
     "--train_file mine.jsonl and --dataset other.jsonl would both set --train_file"),
    ("train_tokenizer.py", ["--dataset_config", "en", "--dataset_config_name=de"],
     "--dataset_config en and --dataset_config_name de would both set --dataset_config_name"),
])
def test_a_rewrite_that_gives_one_option_two_values_is_an_error_naming_both(family, argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        modern_argv(argv, OLD_OPTIONS[family], "x.py")


def test_only_the_first_process_of_a_launch_warns(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert modern_argv(["--max_examples", "3"], OLD_OPTIONS["train_tokenizer.py"], "t.py") == [
        "--max_train_samples", "3"]
    assert warnings(capsys) == []


def test_config_overrides_are_written_as_they_read_back():
    overrides = {"d_model": 128, "layer_norm_position": "pre", "dropout": 0.1, "tie": True, "name": "true",
                 "eos": None}
    text = format_config_overrides(overrides)
    assert text == 'd_model=128,layer_norm_position=pre,dropout=0.1,tie=true,name="true",eos=null'
    assert parse_config_overrides(text) == overrides
    with pytest.raises(ValueError, match="cannot be one of key=value pairs"):
        format_config_overrides({"eos_token_id": [1, 2]})


# --- one source per split -------------------------------------------------------------------------------------------


def test_a_split_comes_from_one_source_and_each_option_is_checked(tmp_path):
    local = write_jsonl(tmp_path / "train.jsonl", [{"text": "a"}])
    assert data_source(str(local), None) == str(local)
    assert data_source(None, "someone/corpus") == "someone/corpus"
    assert data_source(None, None) is None
    with pytest.raises(ValueError, match=rf"--dataset_name {re.escape(str(local))} is a local file, not a dataset on "
                                         r"the Hub: give local files with --validation_file\."):
        data_source(None, str(local), "--validation_file")
    with pytest.raises(ValueError, match=r"--dataset_name data/missing\.jsonl is a file path, not a dataset"):
        data_source(None, "data/missing.jsonl")
    with pytest.raises(FileNotFoundError, match=r"--train_file someone/corpus: no such file \(a dataset on the Hub is "
                                                r"given with --dataset_name\)\."):
        data_source("someone/corpus", None)
    with pytest.raises(FileNotFoundError, match=r"--train_file missing\.jsonl: no such file\.$"):
        data_source(f"{local},missing.jsonl", None)  # each of several files
    with pytest.raises(ValueError, match=r"--train_file .*train\.jsonl and --dataset_name someone/corpus both give "
                                         r"the data of one split"):
        data_source(str(local), "someone/corpus")
    with pytest.raises(ValueError, match=r"--do_train needs data: local files with --train_file, or a dataset on the "
                                         r"Hub with --dataset_name\."):
        data_source(None, None, needed_by="--do_train")


def test_the_evaluation_scripts_split_defaults_to_validation_or_test(tmp_path):
    local = str(write_jsonl(tmp_path / "test.jsonl", [{"text": "a"}]))
    assert evaluated_source(local, None, None, None) == (local, "validation")
    assert evaluated_source(None, local, None, None) == (local, "test")
    assert evaluated_source(None, local, None, "test_2016_flickr") == (local, "test_2016_flickr")
    assert evaluated_source(None, None, "someone/corpus", None) == ("someone/corpus", "validation")
    with pytest.raises(ValueError, match="--validation_file .* and --test_file .*: give the one split to evaluate"):
        evaluated_source(local, local, None, None)
    with pytest.raises(ValueError, match=r"--test_file .*test\.jsonl and --dataset_name someone/corpus both give"):
        evaluated_source(None, local, "someone/corpus", None)
    with pytest.raises(ValueError, match="Give the data to evaluate: local files with --validation_file or "
                                         "--test_file, or a dataset on the Hub with --dataset_name"):
        evaluated_source(None, None, None, "test")


def test_the_fine_tuning_splits_each_come_from_one_source(tmp_path, monkeypatch):
    rows = [{"text": f"row {i}", "label": i % 2} for i in range(4)]
    train, validation = write_jsonl(tmp_path / "train.jsonl", rows), write_jsonl(tmp_path / "valid.jsonl", rows[:2])
    asked = []

    def load_split(source, split, config):  # what each split was asked of
        asked.append((source, split, config))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr("vaswani.finetuning.splits.load_split", load_split)

    def splits(train_and_eval=(True, True), **data):
        return load_splits(DataArguments(**data), SimpleNamespace(do_train=train_and_eval[0],
                                                                  do_eval=train_and_eval[1]), ["text", "label"])

    loaded = splits(train_file=str(train), validation_file=str(validation))
    assert (loaded.train_source, loaded.evaluation_source) == (str(train), str(validation))
    # a Hub dataset gives both splits, or the training split beside a validation file
    loaded = splits(dataset_name="stanfordnlp/sst2", dataset_config_name="default")
    assert loaded.evaluation_source == "stanfordnlp/sst2 (split 'validation')"
    assert asked[-2:] == [("stanfordnlp/sst2", "train", "default"), ("stanfordnlp/sst2", "validation", "default")]
    loaded = splits(dataset_name="stanfordnlp/sst2", validation_file=str(validation))
    assert loaded.evaluation_source == str(validation)
    with pytest.raises(ValueError, match=r"--train_file .* and --dataset_name stanfordnlp/sst2 both give the data"):
        splits(train_file=str(train), dataset_name="stanfordnlp/sst2")
    with pytest.raises(ValueError, match=r"--validation_file .* and --dataset_name stanfordnlp/sst2 both give"):
        splits((False, True), validation_file=str(validation), dataset_name="stanfordnlp/sst2")
    with pytest.raises(ValueError, match=r"--do_eval needs data: local files with --validation_file"):
        splits(train_file=str(train))
    with pytest.raises(ValueError, match=rf"--dataset_name {re.escape(str(train))} is a local file, not a dataset on "
                                         r"the Hub: give local files with --train_file\."):
        splits((True, False), dataset_name=str(train))


# --- the scripts, called as before and as now -------------------------------------------------------------------------

DIALOGUES = [{"document": f"Anna: Hi {name}!\nBen: Are you coming to the party at {hour}?\nAnna: Yes, with Tom.",
              "summary": f"Anna comes to the party at {hour}."} for name, hour in [("Kim", "8"), ("Tom", "9"),
                                                                                   ("Eva", "10"), ("Max", "11")]]


def run_old_and_new(script, old, new, capsys):
    """Run the script as the last release was called and as it is called now; return both results and the warnings
    of the old call."""
    before = load_script(script).main(old)
    old_warnings = warnings(capsys)
    after = load_script(script).main(new)
    assert warnings(capsys) == [], "today's spelling warns of nothing"
    return before, after, old_warnings


def test_extractive_baseline_old_and_new_spellings_write_the_same_results(tmp_path, capsys):
    data = str(write_jsonl(tmp_path / "validation.jsonl", DIALOGUES))
    common = ["--method", "first_lines", "--count", "1", "--output_file", str(tmp_path / "r.json")]
    before, after, old_warnings = run_old_and_new(
        "extractive_baseline",
        ["--dataset", data, "--dataset_name", "knkarthick/samsum", "--max_examples", "3", *common],
        ["--validation_file", data, "--dataset_label", "knkarthick/samsum", "--max_eval_samples", "3", *common],
        capsys,
    )
    assert before["dataset"] == after["dataset"] == {
        "name": "knkarthick/samsum", "config": None, "split": "validation",
        "columns": {"source": "document", "target": "summary"}, "num_examples": 3}
    assert before["metrics"] == after["metrics"]
    assert old_warnings == [
        f"extractive_baseline.py: warning: --dataset {DEPRECATED} --validation_file",
        f"extractive_baseline.py: warning: --dataset_name beside --dataset {DEPRECATED} --dataset_label",
        f"extractive_baseline.py: warning: --max_examples {DEPRECATED} --max_eval_samples",
    ]


def test_train_tokenizer_old_and_new_spellings_learn_the_same_vocabulary(tmp_path, capsys):
    data = str(write_jsonl(tmp_path / "train.jsonl", DIALOGUES))
    common = ["--columns", "document", "summary", "--vocab_size", "300", "--min_frequency", "1"]
    before, after, old_warnings = run_old_and_new(
        "train_tokenizer",
        ["--dataset", data, "--max_examples", "2", *common, "--output_dir", str(tmp_path / "old")],
        ["--train_file", data, "--max_train_samples", "2", *common, "--output_dir", str(tmp_path / "new")],
        capsys,
    )
    assert before.get_vocab() == after.get_vocab()
    assert old_warnings == [f"train_tokenizer.py: warning: --dataset {DEPRECATED} --train_file",
                            f"train_tokenizer.py: warning: --max_examples {DEPRECATED} --max_train_samples"]


def test_make_pseudo_summaries_old_and_new_spellings_write_the_same_pairs(tmp_path, capsys):
    data = str(write_jsonl(tmp_path / "train.jsonl", DIALOGUES))
    common = ["--method", "longest_lines", "--count", "1", "--validation_size", "1"]
    before, after, old_warnings = run_old_and_new(
        "make_pseudo_summaries",
        ["--dataset", data, *common, "--output_dir", str(tmp_path / "old")],
        ["--train_file", data, *common, "--output_dir", str(tmp_path / "new")],
        capsys,
    )
    assert before == after == {"documents": 4, "train": 3, "validation": 1, "left_out": 0}
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / "old" / name).read_text() == (tmp_path / "new" / name).read_text()
    assert old_warnings == [f"make_pseudo_summaries.py: warning: --dataset {DEPRECATED} --train_file"]


@pytest.mark.parametrize("script, argv, error, message", [
    ("train_tokenizer", ["--dataset_name", "{data}", "--columns", "document", "--output_dir", "{out}"], ValueError,
     "--dataset_name {data} is a local file, not a dataset on the Hub: give local files with --train_file."),
    ("train_tokenizer", ["--train_file", "{missing}", "--columns", "document", "--output_dir", "{out}"],
     FileNotFoundError, "--train_file {missing}: no such file."),
    ("make_pseudo_summaries", ["--train_file", "{data}", "--dataset_name", "someone/emails", "--output_dir", "{out}"],
     ValueError, "--train_file {data} and --dataset_name someone/emails both give the data of one split"),
    ("make_pseudo_summaries", ["--output_dir", "{out}"], ValueError,
     "Making pairs needs data: local files with --train_file, or a dataset on the Hub with --dataset_name."),
    ("extractive_baseline", ["--validation_file", "{data}", "--test_file", "{data}", "--method", "first_lines",
                             "--output_file", "{out}"], ValueError,
     "--validation_file {data} and --test_file {data}: give the one split to evaluate."),
    ("extractive_baseline", ["--dataset", "a/b", "--dataset_name", "c/d", "--dataset_label", "e", "--method",
                             "first_lines", "--output_file", "{out}"], ValueError,
     "--dataset_name c/d and --dataset_label e would both set --dataset_label"),
])
def test_the_scripts_say_which_option_is_wrong(tmp_path, script, argv, error, message):
    names = {"data": str(write_jsonl(tmp_path / "data.jsonl", DIALOGUES)), "missing": str(tmp_path / "no.jsonl"),
             "out": str(tmp_path / "out")}
    with pytest.raises(error, match=re.escape(message.format(**names))):
        load_script(script).main([part.format(**names) for part in argv])
    assert not (tmp_path / "out").exists()
