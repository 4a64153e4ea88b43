"""scripts/predict.py (`vaswani-predict`): a corpus in, one output line per input line out, in input order, with the
outputs of the checkpoint's pipeline; streamed in windows, decoded by workers, resumable, and refusing bad input
before any work."""

import io
import json
import os
import random
import re
import sys

import pytest
import torch

from helpers import PAIRS, REPO, command_in_process, run_main, save_spread_translator, spread_weights, tiny_config
from vaswani import VaswaniForConditionalGeneration, VaswaniForSequenceClassification, VaswaniForTokenClassification
from vaswani.pipelines import pipeline
from vaswani.prediction.batches import in_input_order, plan_batches, windows


pytestmark = pytest.mark.usefixtures("one_thread")
SCRIPT = REPO / "scripts" / "predict.py"
DECODING = ["--num_beams", "2", "--max_new_tokens", "8"]
# sentences of many lengths, shuffled, with a repeat: the order of the output must be the input's, not the batches'
SENTENCES = [en for en, _ in PAIRS] + [de for _, de in PAIRS] + ["A dog.", "Two men are walking down the street."]
random.Random(0).shuffle(SENTENCES)


def predict(argv) -> dict:
    return run_main("predict", [str(part) for part in argv])


@pytest.fixture(scope="module")
def translator(tokenizer, tmp_path_factory):
    """An en->de checkpoint with varied weights (its outputs differ from sentence to sentence)."""
    return save_spread_translator(tmp_path_factory.mktemp("translator"), tokenizer, num_beams=2, max_new_tokens=8)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "sentences.en"
    path.write_text("".join(text + "\n" for text in SENTENCES), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def one_by_one(translator):
    """What the translation pipeline gives for each sentence alone, with DECODING."""
    translate = pipeline("translation", model=str(translator))
    return [translate(text, num_beams=2, max_new_tokens=8)[0]["translation_text"] for text in SENTENCES]


def lines_of(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


# --- the plan ------------------------------------------------------------------------------------------------------


def test_a_window_is_cut_into_batches_longest_first_and_put_back_in_input_order():
    lengths = [3, 9, 1, 9, 5, 2, 7]
    batches = plan_batches(lengths, batch_size=3)
    assert batches == [[1, 3, 6], [4, 0, 5], [2]]
    by_tokens = plan_batches(lengths, batch_size=10, max_tokens=20)  # rows x the batch's longest <= 20
    assert by_tokens == [[1, 3], [6, 4], [0, 5, 2]]
    assert all(max(lengths[p] for p in batch) * len(batch) <= 20 for batch in by_tokens)
    outputs = [[f"out{p}" for p in batch] for batch in batches]
    assert in_input_order(batches, outputs, len(lengths)) == [f"out{p}" for p in range(len(lengths))]
    assert [len(window) for window in windows(iter(range(7)), 3)] == [3, 3, 1]


# --- translation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2], ids=["in this process", "two forked workers"])
def test_outputs_are_the_pipelines_in_input_order(translator, corpus, one_by_one, tmp_path, workers):
    output = tmp_path / "out.de"
    stats = predict(["--model", translator, "--input_file", corpus, "--output_file", output, "--read_batch_size", 7,
                     "--batch_size", 3, "--workers", workers, "--quiet", *DECODING])
    assert lines_of(output) == one_by_one
    assert stats["lines"] == len(SENTENCES) and stats["windows"] == 4
    assert not list(tmp_path.glob(".*")), "the work folder and the lock are gone"


def test_the_checkpoints_generation_config_decides_what_is_not_given(translator, corpus, one_by_one, tmp_path):
    output = tmp_path / "out.de"
    predict(["--model", translator, "--input_file", corpus, "--output_file", output, "--quiet"])
    assert lines_of(output) == one_by_one  # its generation config: beam 2, 8 new tokens


def test_batches_by_tokens_give_the_same_bytes(translator, corpus, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    predict(["--model", translator, "--input_file", corpus, "--output_file", first, "--quiet", *DECODING])
    predict(["--model", translator, "--input_file", corpus, "--output_file", second, "--quiet", "--batch_size", 100,
             "--max_tokens_per_batch", 40, "--read_batch_size", 5, *DECODING])
    assert first.read_bytes() == second.read_bytes()


def test_standard_input_to_standard_output_as_a_filter(translator, one_by_one, monkeypatch, capsys):
    stdin = io.TextIOWrapper(io.BytesIO("".join(text + "\n" for text in SENTENCES).encode()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    predict(["--model", translator, "--input_file", "-", "--output_file", "-", "--quiet", "--read_batch_size", 4,
             *DECODING])
    assert capsys.readouterr().out.split("\n")[:-1] == one_by_one


def test_empty_lines_keep_their_place_and_a_file_without_a_last_line_break_is_read_whole(translator, one_by_one,
                                                                                          tmp_path):
    corpus = tmp_path / "with_gaps.en"
    corpus.write_text(f"{SENTENCES[0]}\n\n   \n{SENTENCES[1]}\r\n{SENTENCES[2]}", encoding="utf-8")
    output = tmp_path / "out.de"
    predict(["--model", translator, "--input_file", corpus, "--output_file", output, "--quiet", *DECODING])
    assert lines_of(output) == [one_by_one[0], "", "", one_by_one[1], one_by_one[2]]


def test_a_split_of_a_hub_dataset_is_read_in_order_and_its_column_checked_first(translator, one_by_one, tmp_path,
                                                                               monkeypatch):
    import datasets

    from vaswani.data import loading

    asked = []

    def hub_split(name, split, config_name):  # the Hub, offline: the split it would give
        asked.append((name, split, config_name))
        return datasets.Dataset.from_dict({"id": list(range(len(SENTENCES))), "en": SENTENCES})

    monkeypatch.setattr(loading, "load_split", hub_split)
    output = tmp_path / "out.de"
    predict(["--model", translator, "--dataset_name", "someone/captions", "--dataset_config_name", "en-de",
             "--split", "validation", "--output_file", output, "--quiet", *DECODING])
    assert asked == [("someone/captions", "validation", "en-de")]
    assert lines_of(output) == one_by_one
    with pytest.raises(ValueError, match=r"Column 'text' is not in --dataset_name someone/captions \(validation\)"):
        predict(["--model", translator, "--dataset_name", "someone/captions", "--split", "validation",
                 "--text_column", "text", "--output_file", tmp_path / "other.de", *DECODING])


def test_an_empty_corpus_gives_an_empty_output_and_blank_json_lines_are_no_records(translator, one_by_one, tmp_path):
    empty = tmp_path / "empty.en"
    empty.write_bytes(b"")
    stats = predict(["--model", translator, "--input_file", empty, "--output_file", tmp_path / "empty.de", "--quiet"])
    assert (tmp_path / "empty.de").read_bytes() == b"" and stats["windows"] == 0
    records = tmp_path / "records.jsonl"
    records.write_text(f'{{"en": {json.dumps(SENTENCES[0])}}}\n\n{{"en": {json.dumps(SENTENCES[1])}}}\n  \n')
    predict(["--model", translator, "--input_file", records, "--output_file", tmp_path / "out.de", "--quiet",
             *DECODING])
    assert lines_of(tmp_path / "out.de") == one_by_one[:2]


def test_jsonl_records_with_several_outputs_and_their_scores(translator, tokenizer, corpus, tmp_path):
    output = tmp_path / "out.jsonl"
    predict(["--model", translator, "--input_file", corpus, "--output_file", output, "--quiet", "--output_format",
             "jsonl", "--num_beams", "3", "--num_return_sequences", "2", "--max_new_tokens", "8"])
    records = [json.loads(line) for line in lines_of(output)]
    translate = pipeline("translation", model=str(translator))
    expected = translate(SENTENCES[0], num_beams=3, num_return_sequences=2, max_new_tokens=8, return_tensors=True)
    assert [r["translation_text"] for r in records[0]] == [
        tokenizer.decode(e["translation_token_ids"], skip_special_tokens=True) for e in expected]
    # the score is the output's log-probability under the model, computed here by hand
    model = VaswaniForConditionalGeneration.from_pretrained(translator).eval()
    ids = expected[0]["translation_token_ids"]
    with torch.no_grad():
        logits = model(**tokenizer([SENTENCES[0]], return_tensors="pt"), decoder_input_ids=ids[None, :-1]).logits
    by_hand = logits.log_softmax(-1)[0].gather(-1, ids[1:, None]).sum().item()
    assert records[0][0]["score"] == pytest.approx(by_hand, abs=1e-4)
    assert len(records) == len(SENTENCES) and all(len(r) == 2 and r[0]["score"] < 0 for r in records)


def test_summarization_writes_one_line_per_document(translator, tmp_path):
    corpus = tmp_path / "dialogues.jsonl"
    corpus.write_text("".join(json.dumps({"dialogue": text, "id": i}) + "\n" for i, text in enumerate(SENTENCES)))
    output = tmp_path / "summaries.txt"
    predict(["--model", translator, "--task", "summarization", "--input_file", corpus, "--text_column", "dialogue",
             "--output_file", output, "--quiet", *DECODING])
    summarize = pipeline("summarization", model=str(translator))
    assert lines_of(output) == [summarize(text, num_beams=2, max_new_tokens=8)[0]["summary_text"] for text in SENTENCES]


# --- classification and tagging ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=2, id2label={0: "english", 1: "german"},
                         label2id={"english": 0, "german": 1})
    spread_weights(VaswaniForSequenceClassification(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_classifier_writes_its_labels_and_in_jsonl_their_scores(classifier, tmp_path):
    from transformers import pipeline as transformers_pipeline

    corpus = tmp_path / "texts.csv"
    corpus.write_text("id,sentence\n" + "".join(f'{i},"{text}"\n' for i, text in enumerate(SENTENCES)))
    expected = transformers_pipeline("text-classification", model=str(classifier))(SENTENCES)
    labels, scored = tmp_path / "labels.txt", tmp_path / "labels.jsonl"
    predict(["--model", classifier, "--input_file", corpus, "--text_column", "sentence", "--output_file", labels,
             "--quiet", "--workers", 2, "--batch_size", 4])
    assert lines_of(labels) == [result["label"] for result in expected]
    predict(["--model", classifier, "--input_file", corpus, "--text_column", "sentence", "--output_file", scored,
             "--quiet", "--output_format", "jsonl"])
    records = [json.loads(line) for line in lines_of(scored)]
    assert [r["label"] for r in records] == [result["label"] for result in expected]
    assert [r["score"] for r in records] == pytest.approx([result["score"] for result in expected], abs=1e-5)


def test_a_tagger_writes_entities_that_are_exact_spans_of_each_line(tokenizer, tmp_path):
    folder = tmp_path / "tagger"
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=len(labels), id2label=dict(enumerate(labels)),
                         label2id={label: i for i, label in enumerate(labels)})
    spread_weights(VaswaniForTokenClassification(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    corpus = tmp_path / "news.txt"
    corpus.write_text("".join(text + "\n" for text in SENTENCES[:8]) + "\n")
    output = tmp_path / "entities.jsonl"
    predict(["--model", folder, "--input_file", corpus, "--output_file", output, "--quiet"])
    rows = [json.loads(line) for line in lines_of(output)]
    expected = pipeline("token-classification", model=str(folder), aggregation_strategy="first")(SENTENCES[:8])
    assert len(rows) == 9 and rows[-1] == []
    assert [[e["word"] for e in row] for row in rows[:8]] == [[e["word"] for e in row] for row in expected]
    assert sum(map(len, rows)) > 0
    for text, row in zip(SENTENCES, rows):
        assert all(text[e["start"] : e["end"]] == e["word"] and set(e) == {"entity_group", "score", "word", "start",
                                                                          "end"} for e in row)


# --- nothing lost, nothing half written --------------------------------------------------------------------------


def fail_on_the_second_batch(monkeypatch):
    """Predictor.predict raising at its second call: a run that ends there (a crash, a kill) with one window done
    (one batch a window)."""
    from vaswani.prediction import tasks

    real, calls = tasks.Predictor.predict, []

    def failing(self, texts):
        calls.append(texts)
        if len(calls) == 2:
            raise RuntimeError("the machine went away")
        return real(self, texts)

    monkeypatch.setattr(tasks.Predictor, "predict", failing)
    return real


@pytest.mark.parametrize("leftovers", [False, True], ids=["windows done", "and what a kill -9 leaves"])
def test_a_run_cut_short_is_continued_to_the_same_bytes(translator, corpus, tmp_path, monkeypatch, leftovers):
    from vaswani.prediction import tasks

    whole = tmp_path / "whole.de"
    argv = ["--input_file", corpus, "--quiet", "--read_batch_size", 4, "--workers", 1, *DECODING]
    predict(["--model", translator, "--output_file", whole, *argv])
    output = tmp_path / "out.de"
    real = fail_on_the_second_batch(monkeypatch)
    with pytest.raises(RuntimeError, match="went away"):
        predict(["--model", translator, "--output_file", output, *argv])
    assert not output.exists(), "no output until it is complete"
    work = tmp_path / ".out.de.predict"
    assert sorted(path.name for path in work.glob("*.json") if path.stem.isdigit()) == ["000000000.json"]
    if leftovers:  # a window written but not its record, a window's temporary file, the output's
        (work / "000000001.out").write_text("half")
        (work / "000000002.out.123.tmp").write_text("partial")
        (work / "merged.partial").write_text("partial")
    monkeypatch.setattr(tasks.Predictor, "predict", real)
    stats = predict(["--model", translator, "--output_file", output, *argv])
    assert stats["resumed_windows"] == 1 and stats["lines"] == len(SENTENCES) - 4
    assert output.read_bytes() == whole.read_bytes()
    assert not work.exists()


def test_a_run_killed_after_publishing_is_recognised(translator, corpus, tmp_path, capsys):
    output = tmp_path / "out.de"
    argv = ["--model", translator, "--input_file", corpus, "--output_file", output, *DECODING]
    from vaswani.prediction import progress

    real = progress.shutil.rmtree
    progress.shutil.rmtree = lambda path, *a, **k: None  # killed right after the rename
    try:
        predict(argv)
    finally:
        progress.shutil.rmtree = real
    published = output.read_bytes()
    assert (tmp_path / ".out.de.predict").is_dir()
    capsys.readouterr()
    predict(argv)
    assert "is complete: an earlier run of this command finished it" in capsys.readouterr().err
    assert output.read_bytes() == published and not (tmp_path / ".out.de.predict").exists()


def test_an_unfinished_run_of_other_settings_is_refused_or_discarded(translator, corpus, tmp_path, monkeypatch):
    from vaswani.prediction import tasks

    output = tmp_path / "out.de"
    argv = ["--model", translator, "--input_file", corpus, "--output_file", output, "--quiet", *DECODING]
    real = fail_on_the_second_batch(monkeypatch)
    with pytest.raises(RuntimeError, match="went away"):
        predict([*argv, "--read_batch_size", 2])
    monkeypatch.setattr(tasks.Predictor, "predict", real)
    with pytest.raises(ValueError, match=r"an unfinished run with other settings is kept in .*\(read_batch_size 2 -> "
                                         r"4096\)\. Run that command again .*--overwrite_output_file"):
        predict(argv)
    assert (tmp_path / ".out.de.predict" / "000000000.json").is_file()
    predict([*argv, "--overwrite_output_file"])
    assert len(lines_of(output)) == len(SENTENCES)


def test_a_folder_of_that_name_that_the_command_did_not_write_is_left_alone(translator, corpus, tmp_path):
    output = tmp_path / "out.de"
    foreign = tmp_path / ".out.de.predict"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("the user's")
    with pytest.raises(ValueError, match=r"that this command did not write \(it has no run.json\); it is left alone"):
        predict(["--model", translator, "--input_file", corpus, "--output_file", output, "--overwrite_output_file",
                 *DECODING])
    assert (foreign / "mine.txt").read_text() == "the user's"


def test_an_existing_output_is_replaced_only_when_asked_keeping_its_permissions(translator, corpus, tmp_path):
    output = tmp_path / "out.de"
    output.write_text("mine\n")
    output.chmod(0o600)
    argv = ["--model", translator, "--input_file", corpus, "--output_file", output, "--quiet", *DECODING]
    with pytest.raises(FileExistsError, match="exists and is not a file this command writes"):
        predict(argv)
    assert output.read_text() == "mine\n"
    predict([*argv, "--overwrite_output_file"])
    assert len(lines_of(output)) == len(SENTENCES) and (output.stat().st_mode & 0o777) == 0o600


# --- bad input: one line each, before any work -------------------------------------------------------------------


def test_an_input_longer_than_the_model_reads_is_truncated_and_counted_or_refused(translator, tmp_path, capsys):
    corpus = tmp_path / "long.en"
    corpus.write_text(f"{SENTENCES[0]}\n{' '.join(['word'] * 400)}\n{SENTENCES[1]}\n")
    output = tmp_path / "out.de"
    stats = predict(["--model", translator, "--input_file", corpus, "--output_file", output, *DECODING])
    assert stats["truncated"] == 1 and len(lines_of(output)) == 3
    assert "1 inputs longer than the 128 tokens the model reads were truncated" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"long.en, line 2: \d+ tokens, longer than the 128 this model reads"):
        predict(["--model", translator, "--input_file", corpus, "--output_file", tmp_path / "strict.de", "--strict",
                 *DECODING])
    assert not (tmp_path / "strict.de").exists()


def test_invalid_utf8_names_its_line_or_is_replaced_and_counted(translator, tmp_path, capsys):
    corpus = tmp_path / "latin1.en"
    corpus.write_bytes(b"A man.\nA caf\xe9 by the sea.\nTwo dogs.\n")
    with pytest.raises(ValueError, match=r"latin1.en, line 2: not valid UTF-8 \(byte 0xe9 at column 6\).*--errors "
                                         "replace"):
        predict(["--model", translator, "--input_file", corpus, "--output_file", tmp_path / "a", *DECODING])
    stats = predict(["--model", translator, "--input_file", corpus, "--output_file", tmp_path / "b", "--errors",
                     "replace", *DECODING])
    assert stats["replaced"] == 1 and len(lines_of(tmp_path / "b")) == 3
    assert "1 lines held bytes that were not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("content, options, message", [
    (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", [], r"is a binary file \(it holds NUL bytes\)"),
    (b"id,text\n1,a\n", ["--text_column", "sentence"], r"no column 'sentence' in its header \(it has id, text\)"),
    (b'{"text": "a"}\n[1, 2]\n', ["--text_column", "text"], r"line 2: a JSON list, not a record"),
    (b'{"text": "a"}\n{"txt": "b"}\n', ["--text_column", "text"], r"line 2: no 'text' field \(it has txt\)"),
    (b'{"text": 3}\n', ["--text_column", "text"], r"line 1: 'text' holds a int, not text"),
    (b"[" * 100_000 + b"\n", ["--input_format", "jsonl", "--text_column", "text"], r"line 1: the JSON record is nested "
                                                                                    "too deeply"),
], ids=["binary", "csv column", "not a record", "jsonl field", "not text", "nested"])
def test_a_bad_corpus_is_refused_in_one_line(translator, tmp_path, content, options, message):
    suffix = ".csv" if content.startswith(b"id,") else ".jsonl" if content.startswith(b"{") else ".txt"
    corpus = tmp_path / f"corpus{suffix}"
    corpus.write_bytes(content)
    result = command_in_process(SCRIPT, ["--model", translator, "--input_file", corpus, "--output_file",
                                         tmp_path / "out", *options, *DECODING])
    # one line (beside transformers' "Loading weights" bar, where the checkpoint was loaded before the bad line)
    error_lines = [line for line in result.stderr.splitlines() if line.strip() and "Loading weights" not in line]
    assert result.returncode == 1 and len(error_lines) == 1, result.stderr
    assert error_lines[0].startswith("predict.py: error:") and re.search(message, error_lines[0])
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_the_input_or_a_folder_or_a_fifo_is_refused(translator, corpus, tmp_path):
    for output, message in [(corpus, "is --input_file"), (tmp_path, "is a folder"),
                            (translator / "config.json", "lies inside --model")]:
        result = command_in_process(SCRIPT, ["--model", translator, "--input_file", corpus, "--output_file", output])
        assert result.returncode == 1 and message in result.stderr, result.stderr
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = command_in_process(SCRIPT, ["--model", translator, "--input_file", fifo, "--output_file", tmp_path / "o"])
    assert result.returncode == 1 and "is a FIFO (named pipe), not a regular file" in result.stderr


def test_a_checkpoint_of_another_project_or_with_an_untrained_head_is_refused(translator, corpus, tmp_path):
    result = command_in_process(SCRIPT, ["--model", translator, "--task", "text-classification", "--input_file",
                                         corpus, "--output_file", tmp_path / "out"])
    assert result.returncode == 1 and "not fine-tuned for text-classification" in result.stderr
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    result = command_in_process(SCRIPT, ["--model", other, "--input_file", corpus, "--output_file", tmp_path / "out"])
    assert result.returncode == 1 and "holds a 'bert' model, not a model of this project" in result.stderr


@pytest.mark.parametrize("options, message", [
    (["--num_return_sequences", "2"], "--num_return_sequences 2: several outputs per input are written as JSON Lines"),
    (["--output_format", "jsonl", "--num_return_sequences", "3"], "--num_return_sequences 3 needs as many beams"),
    (["--num_beams", "1000"], "--num_beams must be at most 64"),
    (["--read_batch_size", "0"], "--read_batch_size must be a whole number >= 1"),
    (["--input_format", "csv"], "no column 'en' in its header"),
], ids=["several outputs as text", "more outputs than beams", "beams", "window", "csv without its column"])
def test_options_that_cannot_work_are_refused_before_any_work(translator, corpus, tmp_path, options, message):
    result = command_in_process(SCRIPT, ["--model", translator, "--input_file", corpus, "--output_file",
                                         tmp_path / "out", *options])
    assert result.returncode == 1 and message in result.stderr, result.stderr
