"""vaswani.training.seq2seq_data: the training pairs from local files, the Hub or the experiment configs' datasets
(columns mapped, tokenization cached between runs, empty and too-long pairs counted, a broken file named with its
line), and BPE-dropout's new segmentation of the training pairs every epoch."""

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from helpers import REPO, needs_shared_data, write_jsonl
from training_helpers import metrics_records, run_in_process, tiny_argv
from vaswani.training.arguments import TrainDataArguments, parse_arguments
from vaswani.training.batching import TokenBudgetBatches
from vaswani.training.seq2seq_data import BpeDropoutEpochs, bpe_dropout_tokenizer, load_raw_splits, prepare_data

pytestmark = pytest.mark.usefixtures("one_thread")


# --- data: loading, column mapping, tokenization, filtering ---------------------------------------------------------


def test_local_pairs_are_mapped_tokenized_and_filtered_with_counts(tmp_path, tokenizer):
    rows = [{"document": f"A man is riding horse number {i}.", "summary": f"Ein Mann reitet Pferd {i}."}
            for i in range(10)]
    rows += [{"document": "   ", "summary": "Leer."}, {"document": "Empty target.", "summary": ""}]
    rows += [{"document": "word " * 60, "summary": "Zu lang."}]
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    validation_file = write_jsonl(tmp_path / "validation.jsonl", rows[:4])
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(validation_file),
                              source_column="document", target_column="summary", max_source_length=40,
                              max_target_length=40)
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)

    report = prepared.reports[0]
    assert (report.rows, report.empty, report.too_long, report.kept) == (13, 2, 1, 10)
    assert "13 pairs -> 10 kept (2 empty dropped, 1 dropped as longer than 40/40" in report.describe(data)
    first = prepared.train[0]
    assert first["input_ids"] == tokenizer(rows[0]["document"])["input_ids"]
    assert first["labels"] == tokenizer(text_target=rows[0]["summary"])["input_ids"]
    assert first["source_length"] == len(first["input_ids"])
    assert prepared.validation[0]["target_text"] == rows[0]["summary"]  # the references for BLEU/ROUGE

    truncating = TrainDataArguments(**{**data.__dict__, "too_long": "truncate"})
    prepared = prepare_data(*load_raw_splits(truncating, tmp_path, seed=0), tokenizer, truncating)
    report = prepared.reports[0]
    assert (report.empty, report.truncated, report.kept) == (2, 1, 11)
    longest = max(prepared.train["source_length"])
    assert longest == 40 and prepared.train[10]["input_ids"][-1] == tokenizer.eos_token_id


def test_tokenization_is_cached_between_runs(tmp_path, tokenizer):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"Sentence {i}.", "de": f"Satz {i}."} for i in range(20)])
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file))
    first = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train
    cache = Path(first.cache_files[0]["filename"])
    written = cache.stat().st_mtime_ns
    second = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train
    assert Path(second.cache_files[0]["filename"]) == cache
    assert cache.stat().st_mtime_ns == written, "the second run must reuse the tokenized cache, not rewrite it"


def test_a_dotted_column_reads_inside_a_dict_column(tmp_path, tokenizer):
    rows = [{"translation": {"en": f"A dog {i}.", "de": f"Ein Hund {i}."}} for i in range(6)]
    train_file = write_jsonl(tmp_path / "wmt.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file),
                         source_column="translation.en", target_column="translation.de")
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)
    assert prepared.validation["target_text"][:2] == ["Ein Hund 0.", "Ein Hund 1."]


def test_transformers_translation_format_is_read_by_the_languages(tmp_path, tokenizer):
    """Rows as transformers' run_translation reads them: --source_lang/--target_lang name the keys of `translation`
    (here de->en, against the flat columns' defaults en/de); a whole run trains on them."""
    rows = [{"translation": {"en": f"A dog runs {i}.", "de": f"Ein Hund rennt {i}."}} for i in range(40)]
    train_file = write_jsonl(tmp_path / "run_translation.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file), source_lang="de",
                              target_lang="en")
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)
    assert prepared.validation["source_text"][:2] == ["Ein Hund rennt 0.", "Ein Hund rennt 1."]
    assert prepared.validation["target_text"][:2] == ["A dog runs 0.", "A dog runs 1."]
    with pytest.raises(ValueError, match=r"no key 'fr'; its keys are \['en', 'de'\]. --source_lang/--target_lang"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), source_lang="fr", target_lang="en"), tmp_path, 0)

    output_dir = tmp_path / "run"
    run_in_process(tiny_argv(output_dir, train_file=train_file, validation_file=train_file, source_lang="de",
                             target_lang="en", max_steps=2, eval_steps=2, save_steps=2))
    config = json.loads((output_dir / "best" / "config.json").read_text())
    assert (config["source_lang"], config["target_lang"]) == ("de", "en")


def test_a_hub_dataset_is_asked_for_by_name_config_and_split(tmp_path, monkeypatch):
    import datasets

    asked = []

    def load_dataset(name, config=None, split=None, **kwargs):
        asked.append((name, config, split))
        return datasets.Dataset.from_list([{"en": "A dog.", "de": "Ein Hund."}] * 3)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    data = TrainDataArguments(dataset_name="someone/parallel-corpus", dataset_config_name="en-de",
                              validation_split="dev")
    train, validation = load_raw_splits(data, tmp_path, seed=0)
    assert asked == [("someone/parallel-corpus", "en-de", "train"), ("someone/parallel-corpus", "en-de", "dev")]
    assert len(train) == len(validation) == 3


def test_a_local_file_without_validation_holds_out_pairs(tmp_path):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(300)])
    train, validation = load_raw_splits(TrainDataArguments(train_file=str(train_file)), tmp_path, seed=0)
    assert (len(train), len(validation)) == (297, 3)
    assert not set(train["en"]) & set(validation["en"])


def test_missing_column_error_names_it_and_lists_the_columns(tmp_path):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"english": "a", "german": "b"}] * 3)
    with pytest.raises(ValueError, match=r"Column 'en' is not in .*train.jsonl.*\['english', 'german'\]"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), validation_file=str(train_file)), tmp_path, 0)


@pytest.mark.parametrize("rows, columns, message", [
    ([{"en": "a", "de": "b"}, {"en": "c", "de": 5}], ("en", "de"),
     r"train.jsonl, row 2: `de` holds an integer \(5\), not text"),
    ([{"en": "a", "de": "b"}] * 2 + [{"en": ["c"], "de": "d"}], ("en", "de"),
     r"train.jsonl, row 3: `en` holds a list \(\['c'\]\), not text"),
    ([{"translation": {"en": "a", "de": "b"}}, {"translation": {"en": "c", "de": 7.5}}],
     ("translation.en", "translation.de"), r"train.jsonl, row 2: `translation.de` holds a number \(7.5\), not text"),
], ids=["integer", "list", "number in a dict column"])
def test_a_text_column_holding_a_number_or_a_list_is_named_with_its_row(tmp_path, rows, columns, message):
    """Not counted as an empty pair and dropped, as it was: the file is wrong, and the row says where."""
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file),
                              source_column=columns[0], target_column=columns[1])
    with pytest.raises(ValueError, match=message):
        load_raw_splits(data, tmp_path, 0)


def test_an_empty_dataset_is_an_error(tmp_path, tokenizer):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.jsonl is empty"):
        load_raw_splits(TrainDataArguments(train_file=str(empty)), tmp_path, 0)
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"en": "", "de": "x"}, {"en": "y", "de": " "}])
    data = TrainDataArguments(train_file=str(blank), validation_file=str(blank))
    with pytest.raises(ValueError, match=r"No usable pair is left in the train: 2 pairs -> 0 kept \(2 empty"):
        prepare_data(*load_raw_splits(data, tmp_path, 0), tokenizer, data)


def test_a_broken_file_is_reported_with_its_file_and_line(tmp_path):
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(b'{"en": "a", "de": "b"}\n{"en": "caf\xe9", "de": "b"}\n')
    with pytest.raises(ValueError, match=r"latin1\.jsonl, line 2: not valid UTF-8"):
        run_in_process(tiny_argv(tmp_path / "out", train_file=str(not_utf8)))

    not_json = tmp_path / "broken.jsonl"
    not_json.write_text('{"en": "a", "de": "b"}\n{"en": "a", "de": "b"}\n{"en": "a" "de": "b"}\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 3: not valid JSON"):
        load_raw_splits(TrainDataArguments(train_file=str(not_json)), tmp_path, 0)


def test_the_training_data_come_from_one_source_named_by_its_option(tmp_path, monkeypatch):
    import datasets

    def no_hub(*args, **kwargs):
        raise AssertionError(f"the Hub was asked for {args}")

    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(4)])
    monkeypatch.setattr(datasets, "load_dataset", no_hub)  # every error comes before any loading
    with pytest.raises(ValueError, match=rf"--dataset_name {re.escape(str(train_file))} is a local file, not a "
                                         r"dataset on the Hub: give local files with --train_file\."):
        load_raw_splits(TrainDataArguments(dataset_name=str(train_file)), tmp_path, 0)
    with pytest.raises(FileNotFoundError, match=r"--train_file .*missing\.jsonl: no such file\.$"):
        load_raw_splits(TrainDataArguments(train_file=str(tmp_path / "missing.jsonl")), tmp_path, 0)
    with pytest.raises(ValueError, match=rf"--train_file {re.escape(str(train_file))} and --dataset_name "
                                         r"someone/corpus both give the data of one split"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), dataset_name="someone/corpus"), tmp_path, 0)
    with pytest.raises(FileNotFoundError, match=r"--validation_file .*valid\.jsonl: no such file"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), validation_file=str(tmp_path / "valid.jsonl")),
                        tmp_path, 0)


@needs_shared_data
@pytest.mark.parametrize("config", ["multi30k_en_de", "multi30k_de_en", "aeslc", "samsum"])
def test_experiment_configs_load_their_real_datasets(config, tmp_path, tokenizer, monkeypatch):
    monkeypatch.chdir(REPO)  # the configs name ../shared/data relative to the repository root
    data, model, training = parse_arguments(["--config", f"scripts/configs/{config}.yaml", "--max_train_samples", "40",
                                             "--max_steps", "3", "--cooldown_steps", "0"])
    assert training.max_steps == 3 and training.cooldown_steps == 0  # the command line overrides the file
    train_raw, validation_raw = load_raw_splits(data, tmp_path, seed=0)
    prepared = prepare_data(train_raw, validation_raw.select(range(20)), tokenizer, data)
    assert prepared.reports[0].rows == 40 and len(prepared.train) > 0
    assert prepared.validation["target_text"][0] == validation_raw[0][data.target_column]


# --- BPE-dropout --------------------------------------------------------------------------------------------------


def bpe_dropout_pairs(tmp_path, tokenizer, **options):
    words = "man woman child dog horse street beach mountain playing riding walking looking jumping".split()
    rows = [{"en": f"A {words[i % 13]} is {words[(3 * i) % 13]} near the {words[(5 * i) % 13]} number {i}.",
             "de": f"Ein {words[(7 * i) % 13]} ist {words[i % 13]} am {words[(2 * i) % 13]} Nummer {i}."}
            for i in range(40)]
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file), bpe_dropout=0.1, **options)
    return data, prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train


def test_bpe_dropout_segments_the_training_pairs_anew_every_epoch(tmp_path, tokenizer):
    data, train = bpe_dropout_pairs(tmp_path, tokenizer)
    texts = train[:]  # columns as lists
    usual = tokenizer(texts["source_text"])["input_ids"]
    epochs = BpeDropoutEpochs(train, tokenizer, data, SimpleNamespace(is_main_process=True))
    first, again, second = epochs.segment(0)["input_ids"], epochs.segment(0)["input_ids"], epochs.segment(1)
    assert first == again  # drawn once an epoch: the batches and their rows come from the same draw
    assert first != usual and second["input_ids"] != first
    assert sum(map(len, first)) > sum(map(len, usual))  # merges skipped: finer pieces, more of them
    # the same text in other pieces, and the end-of-sequence token still last
    assert tokenizer.batch_decode(second["labels"], skip_special_tokens=True) == texts["target_text"]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in second["input_ids"])
    assert epochs.lengths(1) == ([len(ids) for ids in second["input_ids"]], [len(ids) for ids in second["labels"]])
    assert epochs.rows(1, [3, 0]) == {"input_ids": [second["input_ids"][3], second["input_ids"][0]],
                                      "labels": [second["labels"][3], second["labels"][0]]}
    # the tokenizer the model is saved with still segments as usual
    assert tokenizer.backend_tokenizer.model.dropout is None
    assert tokenizer(texts["source_text"])["input_ids"] == usual


def test_bpe_dropout_pairs_are_cut_at_the_limits_and_batched_by_their_own_lengths(tmp_path, tokenizer):
    data, train = bpe_dropout_pairs(tmp_path, tokenizer, max_source_length=20, max_target_length=20)
    epochs = BpeDropoutEpochs(train, tokenizer, data, SimpleNamespace(is_main_process=True))
    draws = [epochs.lengths(epoch) for epoch in range(5)]
    assert all(max(source) <= 20 and max(target) <= 20 for source, target in draws)
    # some pairs were longer in finer pieces, and were cut (in one draw in ~40, no target is: hence five draws)
    assert any(max(source) == 20 for source, _ in draws) and any(max(target) == 20 for _, target in draws)
    source, target = epochs.lengths(0)
    batches = TokenBudgetBatches(train["source_length"], train["target_length"], max_tokens=60, seed=0,
                                 epoch_lengths=epochs.lengths)
    for batch in batches.batches(0):
        assert max(source[i] for i in batch) * len(batch) <= 60 and max(target[i] for i in batch) * len(batch) <= 60
    assert sorted(i for batch in batches.all_batches(0) for i in batch) == list(range(len(train)))


def test_bpe_dropout_refuses_a_probability_outside_0_to_1_and_a_tokenizer_without_bpe():
    for value in ("1", "-0.1"):
        with pytest.raises(ValueError, match=rf"--bpe_dropout must be a finite number >= 0 and < 1 .*; got {value}"):
            parse_arguments(["--bpe_dropout", value])
    word_level = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")))
    with pytest.raises(ValueError, match="--bpe_dropout needs a BPE tokenizer; this one's subword model is WordLevel"):
        bpe_dropout_tokenizer(word_level, 0.1)


def test_a_run_with_bpe_dropout_and_split_punctuation_trains_and_saves_the_tokenizer_it_learned(tmp_path):
    outcome = run_in_process(tiny_argv(tmp_path, bpe_dropout=0.1, split_punctuation=True, max_steps=4, eval_steps=4,
                                       save_steps=4))
    losses = [r["loss"] for r in metrics_records(tmp_path) if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses)
    assert outcome.summary["steps"] == 4
    saved = json.loads((tmp_path / "last" / "tokenizer.json").read_text())
    assert saved["model"]["dropout"] is None  # segments as usual: the dropout was for training only
    # (Split and the second Metaspace: the word-start alignment of the offsets, tokenization_vaswani.word_splitters)
    assert [step["type"] for step in saved["pre_tokenizer"]["pretokenizers"]] == ["Metaspace", "Split", "Metaspace",
                                                                                  "Punctuation"]
