"""scripts/evaluate_model.py: a checkpoint + a dataset split -> the results file, through the pipelines."""

import json
import re
import shutil

import pytest
import torch

from helpers import (
    NER_LABELS,
    PAIRS,
    QUIET,
    load_script,
    ner_rows,
    save_seq2seq_model,
    save_spread_translator,
    spread_weights,
    tiny_config,
    write_jsonl,
)
from transformers import pipeline as transformers_pipeline
import vaswani.evaluation.run
from vaswani import VaswaniForConditionalGeneration, VaswaniForSequenceClassification
from vaswani.evaluation.metrics import rouge_percent
from vaswani.pipelines import pipeline
from vaswani.training.checkpoints import write_averaging_record


pytestmark = pytest.mark.usefixtures("one_thread")
evaluate_model = load_script("evaluate_model")
DECODING = ["--num_beams", "2", "--length_penalty", "1.0", "--max_new_tokens", "12"]


@pytest.fixture(scope="module")
def seq2seq(tokenizer, tmp_path_factory):
    """An en->de checkpoint with varied weights (its outputs differ from sentence to sentence)."""
    return save_spread_translator(tmp_path_factory.mktemp("seq2seq"), tokenizer)


def outputs_one_by_one(task, folder, texts):
    """What the checkpoint generates for each text alone, with the decoding settings of DECODING."""
    generate = pipeline(task, model=str(folder))
    key = "translation_text" if task == "translation" else "summary_text"
    return [generate(text, num_beams=2, length_penalty=1.0, max_new_tokens=12)[0][key] for text in texts]


def check_schema(results, task, num_examples):
    assert results["task"] == task
    generated = {"diagnostics"} if task in ("translation", "summarization") else set()
    assert set(results) == {"model", "task", "dataset", "decoding", "metrics", "conventions", "time_seconds", "created",
                            *generated}
    assert set(results["dataset"]) == {"name", "config", "split", "columns", "num_examples"}
    assert results["dataset"]["num_examples"] == num_examples
    assert results["time_seconds"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", results["created"])
    for metric in results["metrics"]:
        assert {"type", "name", "value"} <= set(metric) and isinstance(metric["value"], float)


def test_translation_results_come_from_the_pipeline_with_the_given_decoding(seq2seq, tmp_path):
    sources = [en for en, _ in PAIRS]
    # references that are the model's own outputs: BLEU is 100 exactly when the script decodes as asked
    references = outputs_one_by_one("translation", seq2seq, sources)
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": s, "de": r} for s, r in zip(sources, references)])
    results = evaluate_model.main([
        "--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
        "--dataset_label", "bentrevett/multi30k", "--batch_size", "3", *DECODING,
    ])
    written = json.loads((seq2seq / "evaluation_results.json").read_text())
    assert written == results
    check_schema(results, "translation", len(PAIRS))
    assert results["dataset"] == {"name": "bentrevett/multi30k", "config": None, "split": "test",
                                  "columns": {"source": "en", "target": "de"}, "num_examples": len(PAIRS)}
    assert results["decoding"] == {"num_beams": 2, "length_penalty": 1.0, "max_new_tokens": 12}
    sacrebleu, tokenized_bleu = results["metrics"]
    assert (sacrebleu["type"], sacrebleu["name"], sacrebleu["value"]) == ("sacrebleu", "sacreBLEU", 100.0)
    assert sacrebleu["signature"].startswith("nrefs:1|case:mixed")
    assert (tokenized_bleu["type"], tokenized_bleu["name"], tokenized_bleu["value"]) == (
        "tokenized_bleu", "BLEU (tokenized, lowercased)", 100.0)
    assert "moses-tok:de" in tokenized_bleu["signature"]
    assert "beam 2" in results["conventions"]
    assert "weights: the model as given (no checkpoint averaging recorded in it)" in results["conventions"]


def test_a_local_test_file_is_recorded_under_its_label_or_its_path(seq2seq, tmp_path):
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:4]])
    common = ["--model", str(seq2seq), "--task", "translation", "--split", "test_2016_flickr", *DECODING]
    new = evaluate_model.main([*common, "--test_file", str(data), "--dataset_label", "bentrevett/multi30k",
                               "--max_eval_samples", "3", "--output_file", str(tmp_path / "new.json")])
    assert new["dataset"] == {
        "name": "bentrevett/multi30k", "config": None, "split": "test_2016_flickr",
        "columns": {"source": "en", "target": "de"}, "num_examples": 3}
    # without a label the file is named as given; a local file is not a Hub dataset
    unlabelled = evaluate_model.main([*common, "--test_file", str(data), "--output_file", str(tmp_path / "u.json")])
    assert unlabelled["dataset"]["name"] == str(data)
    with pytest.raises(ValueError, match=r"--dataset_name .*test\.jsonl is a local file, not a dataset on the Hub: "
                                         r"give local files with --validation_file\."):
        evaluate_model.main([*common, "--dataset_name", str(data), "--output_file", str(tmp_path / "x.json")])


def test_int8_weights_are_used_and_recorded(seq2seq, tmp_path):
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:3]])
    arguments = ["--model", str(seq2seq), "--task", "translation", "--validation_file", str(data), *DECODING]
    plain = evaluate_model.main([*arguments, "--output_file", str(tmp_path / "plain.json")])
    int8 = evaluate_model.main([*arguments, "--quantization", "int8", "--output_file", str(tmp_path / "int8.json")])
    assert "engine" not in plain["decoding"] and "decoded with" not in plain["conventions"]
    assert int8["decoding"] == {**plain["decoding"], "engine": "transformers", "quantization": "int8"}
    assert "decoded with transformers, int8 weights" in int8["conventions"]


def test_translation_decodes_through_the_cpu_decoding_loop_unless_told_not_to(seq2seq, tmp_path, monkeypatch):
    import vaswani.remote_code.cpu_decoding as cpu_decoding

    searches = []
    search = cpu_decoding.search
    monkeypatch.setattr(cpu_decoding, "search", lambda *args: searches.append(args) or search(*args))
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:6]])
    arguments = ["--model", str(seq2seq), "--task", "translation", "--validation_file", str(data), *DECODING,
                 "--batch_size", "3"]
    fast = evaluate_model.main([*arguments, "--output_file", str(tmp_path / "fast.json")])
    assert len(searches) == 2  # one per batch
    plain = evaluate_model.main([*arguments, "--cpu_decoding", "False", "--output_file", str(tmp_path / "plain.json")])
    assert len(searches) == 2
    assert fast["metrics"] == plain["metrics"] and fast["decoding"] == plain["decoding"]


def test_the_ctranslate2_engine_decodes_as_generate_does(seq2seq, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    sources = [en for en, _ in PAIRS]
    references = outputs_one_by_one("translation", seq2seq, sources)  # BLEU 100 only for the same outputs
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": s, "de": r} for s, r in zip(sources, references)])
    results = evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--validation_file", str(data),
                                   "--engine", "ctranslate2", "--output_file", str(tmp_path / "ct2.json"), *DECODING])
    assert results["decoding"] == {"num_beams": 2, "length_penalty": 1.0, "max_new_tokens": 12,
                                   "engine": "ctranslate2", "quantization": "none"}
    assert [metric["value"] for metric in results["metrics"]] == [100.0, 100.0]


def test_the_conventions_name_the_checkpoints_an_averaged_model_was_made_of(seq2seq, tmp_path):
    averaged = tmp_path / "averaged"
    shutil.copytree(seq2seq, averaged)
    write_averaging_record(averaged, [tmp_path / "run" / "checkpoints" / f"step-0000{s}00" / "model" for s in (98, 99)])
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:2]])
    results = evaluate_model.main(["--model", str(averaged), "--task", "translation", "--validation_file", str(data),
                                   "--output_file", str(tmp_path / "results.json"), *DECODING])
    assert results["conventions"].endswith(
        "weights: the mean of 2 checkpoints (updates 9,800, 9,900; scripts/average_checkpoints.py).")


def test_summarization_results_are_rouge_of_the_pipeline_outputs(seq2seq, tmp_path):
    documents = [en for en, _ in PAIRS]
    summaries = [" ".join(document.split()[:3]) for document in documents]
    rows = [{"document": d, "summary": s} for d, s in zip(documents, summaries)]
    data = write_jsonl(tmp_path / "validation.jsonl", rows)
    results = evaluate_model.main(["--model", str(seq2seq), "--task", "summarization", "--validation_file", str(data),
                                   "--output_file", str(tmp_path / "results.json"), "--batch_size", "4", *DECODING])
    check_schema(results, "summarization", len(PAIRS))
    expected = rouge_percent(outputs_one_by_one("summarization", seq2seq, documents), summaries)
    assert [m["type"] for m in results["metrics"]] == ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    assert [m["value"] for m in results["metrics"]] == [round(expected[m["type"]], 2) for m in results["metrics"]]
    assert json.loads((tmp_path / "results.json").read_text())["metrics"] == results["metrics"]


def test_no_repeat_ngram_size_reaches_generate_and_the_results(seq2seq, tmp_path):
    documents = [en for en, _ in PAIRS]
    references = [" ".join(document.split()[:3]) for document in documents]
    data = write_jsonl(tmp_path / "validation.jsonl", [{"document": d, "summary": r} for d, r in zip(documents, references)])
    results = evaluate_model.main(["--model", str(seq2seq), "--task", "summarization", "--validation_file", str(data),
                                   "--output_file", str(tmp_path / "results.json"), "--no_repeat_ngram_size", "1",
                                   *DECODING])
    assert results["decoding"]["no_repeat_ngram_size"] == 1 and "no repeated 1-grams" in results["conventions"]
    summarize = pipeline("summarization", model=str(seq2seq))
    settings = dict(num_beams=2, length_penalty=1.0, max_new_tokens=12, no_repeat_ngram_size=1)
    outputs = [summarize(d, **settings)[0]["summary_text"] for d in documents]
    for document in documents:  # no token twice in an output
        ids = summarize(document, return_tensors=True, **settings)[0]["summary_token_ids"].tolist()
        assert len(set(ids)) == len(ids)
    expected = rouge_percent(outputs, references)
    assert results["metrics"][0]["value"] == round(expected["rouge1"], 2)


def test_outputs_that_do_not_depend_on_the_input_are_reported_with_a_warning(seq2seq, tmp_path, capsys):
    rows = [{"document": en, "summary": de} for en, de in PAIRS]
    data = write_jsonl(tmp_path / "validation.jsonl", rows)
    options = ["--task", "summarization", "--validation_file", str(data), "--diagnostic_examples", "4", *DECODING]
    reads = evaluate_model.main(["--model", str(seq2seq), "--output_file", str(tmp_path / "reads.json"), *options])
    assert reads["diagnostics"]["output_diversity"]["distinct_outputs"] >= 5
    assert "warning" not in reads["diagnostics"] and "WARNING" not in capsys.readouterr().err

    deaf = VaswaniForConditionalGeneration.from_pretrained(seq2seq)
    with torch.no_grad():  # every cross-attention outputs zero: the decoder cannot see the source
        for layer in deaf.model.decoder.layers:
            layer.encoder_attn.out_proj.weight.zero_()
            layer.encoder_attn.out_proj.bias.zero_()
    shutil.copytree(seq2seq, tmp_path / "deaf")
    deaf.save_pretrained(tmp_path / "deaf")
    results = evaluate_model.main(["--model", str(tmp_path / "deaf"), *options])
    diagnostics = results["diagnostics"]
    assert diagnostics["output_diversity"]["distinct_outputs"] == 1
    assert diagnostics["output_diversity"]["distinct_inputs"] == len(PAIRS)
    assert diagnostics["warning"].startswith("The outputs do not depend on the input: 1 distinct output(s) for 10")
    captured = capsys.readouterr()
    assert "WARNING: The outputs do not depend on the input" in captured.err
    assert "1 distinct outputs for 10 distinct inputs" in captured.out
    layers = diagnostics["encoder_layers"]
    assert [layer["layer"] for layer in layers] == list(range(deaf.config.encoder_layers))
    assert all(0 < layer["attention_entropy"] <= layer["uniform_entropy"] for layer in layers)
    assert json.loads((tmp_path / "deaf" / "evaluation_results.json").read_text())["diagnostics"] == diagnostics


@pytest.fixture(scope="module")
def classifier(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=2, id2label={0: "english", 1: "german"},
                         label2id={"english": 0, "german": 1})
    spread_weights(VaswaniForSequenceClassification(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_text_classification_accuracy_through_the_pipeline(classifier, tmp_path):
    texts = [text for pair in PAIRS for text in pair]
    predicted = [out["label"] for out in transformers_pipeline("text-classification", model=str(classifier))(texts)]
    # the first 14 gold labels agree with the model, the last 6 do not; labels given as names
    gold = predicted[:14] + [{"english": "german", "german": "english"}[label] for label in predicted[14:]]
    data = write_jsonl(tmp_path / "validation.jsonl", [{"text": t, "label": g} for t, g in zip(texts, gold)])
    results = evaluate_model.main(["--model", str(classifier), "--task", "text-classification",
                                   "--validation_file", str(data),
                                   "--output_file", str(tmp_path / "results.json")])
    check_schema(results, "text-classification", 20)
    accuracy = results["metrics"][0]
    assert (accuracy["type"], accuracy["value"]) == ("accuracy", 0.7)
    assert results["decoding"] == {}


def test_token_classification_entity_f1_through_the_pipeline(tokenizer, tmp_path):
    finetune = load_script("finetune_token_classification")
    folder = tmp_path / "tagger"
    write_jsonl(tmp_path / "data" / "train.jsonl", ner_rows())
    (tmp_path / "data" / "labels.json").write_text(json.dumps(NER_LABELS))
    checkpoint = save_seq2seq_model(tmp_path / "seq2seq", tokenizer)
    finetune.main(["--model_name_or_path", str(checkpoint), "--train_file", str(tmp_path / "data" / "train.jsonl"),
                   "--output_dir", str(folder), "--do_train", "--max_steps", "80", "--learning_rate", "5e-3",
                   "--per_device_train_batch_size", "5", "--save_strategy", "no", *QUIET])
    # gold tags as ids this time: they are mapped through the checkpoint's labels
    rows = [{**row, "ner_tags": [NER_LABELS.index(tag) for tag in row["ner_tags"]]} for row in ner_rows()]
    data = write_jsonl(tmp_path / "validation.jsonl", rows)
    results = evaluate_model.main(["--model", str(folder), "--task", "token-classification",
                                   "--validation_file", str(data),
                                   "--aggregation_strategy", "average"])
    check_schema(results, "token-classification", len(rows))
    assert results["decoding"] == {"aggregation_strategy": "average"}
    entity_f1 = results["metrics"][0]
    assert (entity_f1["type"], entity_f1["value"]) == ("entity_f1", 1.0)


def test_checkpoint_not_fine_tuned_for_the_task_is_refused(seq2seq, tmp_path):
    data = write_jsonl(tmp_path / "validation.jsonl", ner_rows())
    with pytest.raises(ValueError, match=r"not fine-tuned for token-classification: it has no weights for classifier"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "token-classification", "--validation_file", str(data),
                             "--output_file", str(tmp_path / "results.json")])
    assert not (tmp_path / "results.json").exists()


def test_empty_evaluation_split_is_an_error(seq2seq, tmp_path):
    (tmp_path / "test.csv").write_text("en,de\n")
    with pytest.raises(ValueError, match=r"The evaluation split .*test.csv has no rows"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation",
                             "--validation_file", str(tmp_path / "test.csv"),
                             "--output_file", str(tmp_path / "results.json")])


def test_label_outside_the_checkpoint_labels_is_an_error(classifier, tmp_path):
    data = write_jsonl(tmp_path / "validation.jsonl", [{"text": "Ein Mann.", "label": "german"},
                                                        {"text": "A man.", "label": "french"}])
    with pytest.raises(ValueError, match=r"Label 'french' at row 1 of .*validation.jsonl is not in the label set"):
        evaluate_model.main(["--model", str(classifier), "--task", "text-classification",
                             "--validation_file", str(data),
                             "--output_file", str(tmp_path / "results.json")])


def test_ctranslate2_is_for_generation_tasks_only(seq2seq):
    with pytest.raises(ValueError, match="--engine ctranslate2 translates and summarizes; --task text-classification"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "text-classification",
                             "--validation_file", "unused.jsonl",
                             "--engine", "ctranslate2"])


def test_an_aggregation_without_grouped_entities_is_an_error(seq2seq):
    # the numeric options: tests/test_option_checks.py
    with pytest.raises(ValueError, match="scoring needs grouped entities"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--validation_file", "unused.jsonl",
                             "--aggregation_strategy", "none"])


@pytest.mark.parametrize("value, message", [
    (5, r"pairs.jsonl, row 2: `de` holds an integer \(5\), not text"),
    (["Ein", "Mann."], r"pairs.jsonl, row 2: `de` holds a list \(\['Ein', 'Mann.'\]\), not text"),
], ids=["integer", "list"])
def test_a_text_column_holding_a_number_or_a_list_is_named_with_its_row(seq2seq, tmp_path, value, message):
    rows = [{"en": en, "de": de} for en, de in PAIRS[:3]]
    rows[1]["de"] = value
    with pytest.raises(ValueError, match=message):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation",
                             "--validation_file", str(write_jsonl(tmp_path / "pairs.jsonl", rows)),
                             "--output_file", str(tmp_path / "results.json")])
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("source, target, warned", [
    ("de", "en", True), ("en", "en", True), ("de", "de", True), ("en", "de", False), ("text", "reference", False),
])
def test_columns_that_contradict_the_models_languages_are_warned_about(seq2seq, tmp_path, capsys, source, target,
                                                                       warned):
    """The en->de model scored with the German column as its source would be scored translating de->en; a column
    named after no language says nothing about the direction."""
    rows = [{"en": en, "de": de, "text": en, "reference": de} for en, de in PAIRS[:2]]
    evaluate_model.main(["--model", str(seq2seq), "--task", "translation",
                         "--validation_file", str(write_jsonl(tmp_path / "pairs.jsonl", rows)),
                         "--source_column", source, "--target_column", target, "--output_file",
                         str(tmp_path / "results.json"), "--num_beams", "1", "--max_new_tokens", "4",
                         "--diagnostic_examples", "0"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if "contradict" in line]
    expected = (f"WARNING: --source_column {source} and --target_column {target} contradict the model's direction, "
                "en -> de (source_lang / target_lang in its config.json)")
    assert [line.startswith(expected) for line in warnings] == ([True] if warned else [])


def test_a_folder_given_as_the_data_file_is_called_a_folder(seq2seq, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text('{"en": "A man.", "de": "Ein Mann."}\n')
    with pytest.raises(ValueError, match=r"Data file .*data is a folder; give the file itself \(it holds test.jsonl\)"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation",
                             "--validation_file", str(tmp_path / "data"),
                             "--source_column", "en", "--target_column", "de", "--output_file", str(tmp_path / "r.json")])


# --- what the results record, and the inputs checked before any work (issue 67) ------------------------------------


def test_greedy_decoding_records_no_length_penalty(seq2seq, tmp_path):
    """`--num_beams 1` recorded `length_penalty 0.6`, which greedy decoding never applied (and push_to_hub copied it
    into the generation config): a results file records only the decoding settings applied."""
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:2]])
    results = evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                                   "--num_beams", "1", "--length_penalty", "0.6", "--max_new_tokens", "6",
                                   "--diagnostic_examples", "0", "--output_file", str(tmp_path / "results.json")])
    assert results["decoding"] == {"num_beams": 1, "max_new_tokens": 6}
    assert "length penalty" not in results["conventions"] and "greedy (beam 1)" in results["conventions"]
    beam = evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                                "--num_beams", "2", "--length_penalty", "0.6", "--max_new_tokens", "6",
                                "--diagnostic_examples", "0", "--output_file", str(tmp_path / "beam.json")])
    assert beam["decoding"] == {"num_beams": 2, "length_penalty": 0.6, "max_new_tokens": 6}


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fail the test if the evaluation gets as far as loading the checkpoint."""
    def load(args):
        raise AssertionError("the checkpoint was loaded: the output was not checked first")

    monkeypatch.setattr(vaswani.evaluation.run, "_load_model", load)


def test_an_output_name_too_long_with_its_temporary_name_is_refused_before_the_evaluation(seq2seq, tmp_path,
                                                                                          nothing_loaded):
    """A valid 245-character name: the results file is written under a temporary name 26 characters longer first,
    which the file system refused after the whole evaluation, in a message naming the temporary file."""
    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:2]])
    name = "r" * 240 + ".json"
    with pytest.raises(ValueError, match=rf"^--output_file {re.escape(str(tmp_path / name))}: its name is 245 bytes "
                                         r"long, and the temporary name .* more than the 255 this file system "
                                         r"allows\. Give a name of at most 223 bytes; nothing was done\.$"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                             "--output_file", str(tmp_path / name)])


def test_an_output_on_a_read_only_file_system_is_refused_before_the_evaluation(seq2seq, tmp_path, monkeypatch,
                                                                               nothing_loaded):
    import os

    import vaswani.output_checks

    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:2]])
    read_only = tmp_path / "mounted"
    read_only.mkdir()
    statvfs = os.statvfs

    class ReadOnly:
        def __init__(self, real):
            self.f_flag, self.f_bavail, self.f_frsize = real.f_flag | os.ST_RDONLY, real.f_bavail, real.f_frsize

    monkeypatch.setattr(vaswani.output_checks.os, "statvfs",
                        lambda path: ReadOnly(statvfs(path)) if str(path) == str(read_only) else statvfs(path))
    with pytest.raises(PermissionError, match=rf"--output_file {re.escape(str(read_only))}/results\.json: "
                                              rf"{re.escape(str(read_only))} is on a read-only file system"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                             "--output_file", str(read_only / "results.json")])


def test_a_full_disk_is_refused_before_the_evaluation(seq2seq, tmp_path, monkeypatch, nothing_loaded):
    import shutil as shutil_module
    from collections import namedtuple

    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:2]])
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10**9, 10**9 - 100, 100))
    with pytest.raises(OSError, match=r"the disk of .* has 100 bytes free, and the output needs at least 65\.5 KB"):
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                             "--output_file", str(tmp_path / "results.json")])


def test_more_beams_than_the_memory_holds_are_refused_in_one_line_before_decoding(seq2seq, tmp_path, monkeypatch):
    """`--num_beams 100000` made a shipped model ask for 40-160 GB, and the allocator's traceback came after the
    model and the data were loaded and decoding began."""
    import vaswani.remote_code.loading_checks

    data = write_jsonl(tmp_path / "test.jsonl", [{"en": en, "de": de} for en, de in PAIRS[:3]])
    monkeypatch.setattr(vaswani.remote_code.loading_checks, "available_memory", lambda device: 2**30)  # 1 GiB free
    generated = []
    monkeypatch.setattr(VaswaniForConditionalGeneration, "_cpu_decoding", lambda self: generated.append(1))
    with pytest.raises(ValueError, match=r"^Generating 300,000 sequences at once \(--batch_size 3 x --num_beams "
                                         r"100000\), up to 128 tokens each .* needs at least [\d.]+ GB of memory, more "
                                         r"than the 1\.1 GB available on cpu: lower num_beams") as refused:
        evaluate_model.main(["--model", str(seq2seq), "--task", "translation", "--test_file", str(data),
                             "--num_beams", "100000", "--output_file", str(tmp_path / "results.json")])
    assert "\n" not in str(refused.value) and not generated
    assert not (tmp_path / "results.json").exists()
