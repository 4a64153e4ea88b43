"""The data and override options of every script: the names of transformers' example scripts (`--train_file`,
`--validation_file`, `--dataset_name`, `--max_train_samples`, `--config_overrides`), each split from one source.

train.py's options and config files are tested in training/test_arguments.py, its checkpoints in
training/test_checkpoints.py, evaluate_model.py's and the fine-tuning scripts' runs in their own files."""

import re
from types import SimpleNamespace

import datasets
import pytest

from helpers import write_jsonl
from vaswani.cli import format_config_overrides, parse_config_overrides
from vaswani.data.arguments import TrainingDataArguments
from vaswani.data.loading import data_source, evaluated_source
from vaswani.data.splits import load_splits


# --- config overrides -----------------------------------------------------------------------------------------------


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
    # each of several files, saying how the option was split (issue 67: the split went unsaid)
    with pytest.raises(FileNotFoundError, match=r"--train_file missing\.jsonl: no such file \(--train_file .*,"
                                                r"missing\.jsonl is read as 2 files separated by commas: \[.*\]\)\.$"):
        data_source(f"{local},missing.jsonl", None)
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

    monkeypatch.setattr("vaswani.data.splits.load_split", load_split)

    def splits(train_and_eval=(True, True), **data):
        return load_splits(TrainingDataArguments(**data), SimpleNamespace(do_train=train_and_eval[0],
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


# --- data files the loader would misread ----------------------------------------------------------------------------


CSV_FILES = {
    # a quote left open: the loader joined the row with the next one, one pair fewer and the counts looked normal
    "a quote left open": ('en,de\n"A man,Ein Mann\nTwo dogs",Zwei Hunde\nA girl,Ein Mädchen\n',
                          r"lines 2-3: one row runs over 2 lines \(a quote left open\?\)"),
    "a column named twice": ("en,en\nA man,Ein Mann\n", "line 1: the column 'en' is named twice in the header"),
    "a row of three values": ("en,de\nA man,Ein Mann,extra\n", r"line 2: 3 values for the 2 columns \['en', 'de'\]"),
    "text after a closing quote": ('en,de\n"A man" rides,Ein Mann\n', r"line 2: not valid CSV \("),
}


@pytest.mark.parametrize("name", list(CSV_FILES))
def test_a_malformed_csv_row_is_refused_with_its_file_and_line(name, tmp_path):
    from vaswani.data.loading import load_split

    text, refusal = CSV_FILES[name]
    path = tmp_path / "train.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}, {refusal}") as refused:
        load_split(str(path))
    assert "\n" not in str(refused.value)


def test_a_well_formed_csv_file_loads(tmp_path):
    from vaswani.data.loading import load_split

    path = tmp_path / "train.csv"
    path.write_text('en,de\n"A man, riding",Ein Mann\nTwo dogs,Zwei Hunde\n', encoding="utf-8")
    assert load_split(str(path))["en"] == ["A man, riding", "Two dogs"]


def test_a_data_path_that_is_not_a_regular_file_is_named_as_such(tmp_path):
    """/dev/zero was said not to exist; read, it would never end."""
    import os

    from vaswani.data.loading import load_split

    fifo = tmp_path / "pairs.jsonl"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), r"a FIFO \(named pipe\)")):
        with pytest.raises(ValueError, match=f"^Data file {re.escape(path)} is {kind}, not a regular file"):
            load_split(path)
