"""scripts/finetune_seq2seq.py: Seq2SeqTrainer fine-tuning of a saved checkpoint for translation and summarization,
scored on generated text, on one process and on two, with activation checkpointing and resume."""

import json
import logging

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.generation import utils as generation_utils

from finetune_helpers import count_calls, run_two_processes, weights
from helpers import PAIRS, QUIET, load_script, save_seq2seq_model, tiny_config, write_jsonl
from vaswani import VaswaniForConditionalGeneration, VaswaniForTokenClassification
from vaswani.finetuning.seq2seq import encode_pairs
from vaswani.remote_code.modeling_vaswani import VaswaniFeedForward
from vaswani.pipelines import pipeline


pytestmark = pytest.mark.usefixtures("one_thread")
script = load_script("finetune_seq2seq")


@pytest.fixture(scope="module")
def checkpoint(tokenizer, tmp_path_factory):
    """A saved en->de model and its tokenizer: the "existing checkpoint" that fine-tuning starts from."""
    folder = tmp_path_factory.mktemp("multi30k-like")
    return save_seq2seq_model(folder, tokenizer, source_lang="en", target_lang="de")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # a "summary" here is the first three words of the sentence: short, and learnable by a tiny model
    rows = [{"en": en, "de": de, "document": en, "summary": " ".join(en.split()[:3])} for en, de in PAIRS]
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "pairs.jsonl", rows)


def translation_args(checkpoint, data, output_dir, *extra):
    return [
        "--task", "translation", "--model_name_or_path", str(checkpoint), "--source_column", "en",
        "--target_column", "de", "--train_file", str(data), "--validation_file", str(data),
        "--output_dir", str(output_dir), "--per_device_train_batch_size", "5", "--generation_max_length", "24",
        *QUIET, *extra,
    ]


def test_translation_fine_tuning_scores_generated_text(checkpoint, data, tmp_path):
    results = script.main(translation_args(
        checkpoint, data, tmp_path, "--do_train", "--do_eval", "--predict_with_generate", "--max_steps", "120",
        "--learning_rate", "3e-3", "--generation_num_beams", "2", "--save_strategy", "no",
    ))
    # the ten training pairs are the evaluation set: a model that learned them translates them back
    assert results["eval_sacrebleu"] > 50 and results["eval_tokenized_bleu"] > 50
    assert 3 <= results["eval_gen_len"] <= 24
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert (model.config.source_lang, model.config.target_lang) == ("en", "de")
    translate = pipeline("translation", model=str(tmp_path))
    outputs = translate([en for en, _ in PAIRS], num_beams=2, max_new_tokens=24)
    exact = sum(output["translation_text"] == de for output, (_, de) in zip(outputs, PAIRS))
    assert exact >= 5, outputs


def test_sources_carry_the_target_language_tag_as_the_pipeline_writes_them(tmp_path):
    from vaswani import VaswaniTokenizer

    texts = [text for pair in PAIRS for text in pair]
    tagged = VaswaniTokenizer.train_from_texts(texts, vocab_size=400, min_frequency=1, language_codes=["de", "fr"])
    batch = {"en": [PAIRS[0][0]], "de": [PAIRS[0][1]]}
    encoded = encode_pairs(batch, tagged, "en", "de", 64, 64, tgt_lang="de")
    assert encoded["input_ids"][0][0] == tagged.convert_tokens_to_ids(">>de<<")
    tagged.tgt_lang = None
    assert encoded["input_ids"][0][1:] == tagged(PAIRS[0][0])["input_ids"]
    # what the translation pipeline feeds the encoder for the same sentence
    translator = pipeline("translation", model=VaswaniForConditionalGeneration(
        tiny_config(vocab_size=len(tagged), target_lang="de")), tokenizer=tagged)
    assert translator.preprocess(PAIRS[0][0])["input_ids"][0].tolist() == encoded["input_ids"][0]
    assert encoded["labels"][0] == tagged(text_target=PAIRS[0][1])["input_ids"]


def test_summarization_reports_rouge(checkpoint, data, tmp_path):
    results = script.main([
        "--task", "summarization", "--model_name_or_path", str(checkpoint), "--train_file", str(data),
        "--validation_file", str(data), "--output_dir", str(tmp_path), "--do_train", "--do_eval",
        "--predict_with_generate", "--max_steps", "60", "--learning_rate", "3e-3", "--save_strategy", "no",
        "--per_device_train_batch_size", "5", "--max_target_length", "8", "--max_source_length", "16", *QUIET,
    ])
    for key in ("eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum"):
        assert 0 <= results[key] <= 100
    assert results["eval_rouge1"] > 50
    assert results["eval_gen_len"] <= 8  # --max_target_length bounds the generated summaries too
    # the saved tokenizer truncates documents as training did, for the summarization pipeline
    assert AutoTokenizer.from_pretrained(tmp_path).model_max_length == 16
    # the run's options as JSON beside the model, for its card
    record = json.loads((tmp_path / "arguments.json").read_text())
    assert record["script"] and record["data"]["train_file"] == str(data) and record["task"]["task"] == "summarization"
    assert record["model"]["model_name_or_path"] == str(checkpoint) and record["training"]["max_steps"] == 60
    assert "eval_sacrebleu" not in results
    assert results["eval_distinct_inputs"] == len(PAIRS) and results["eval_distinct_outputs"] >= 5


def test_evaluating_during_training_leaves_the_saved_generation_config_as_it_was(checkpoint, data, tmp_path):
    """Seq2SeqTrainer's evaluation fills the model's generation config with transformers' defaults (max_length=20):
    saved so, every generate() with max_new_tokens warned that both limits were set."""
    before = json.loads((checkpoint / "generation_config.json").read_text())
    script.main([
        "--task", "summarization", "--model_name_or_path", str(checkpoint), "--train_file", str(data),
        "--validation_file", str(data), "--output_dir", str(tmp_path), "--do_train", "--do_eval",
        "--predict_with_generate", "--max_steps", "4", "--eval_strategy", "steps", "--eval_steps", "2",
        "--save_strategy", "steps", "--save_steps", "2", "--per_device_train_batch_size", "5",
        "--max_target_length", "8", "--max_source_length", "16", *QUIET,
    ])
    for folder in (tmp_path, tmp_path / "checkpoint-4"):
        saved = json.loads((folder / "generation_config.json").read_text())
        assert "max_length" not in saved
        assert {k: v for k, v in saved.items() if k != "transformers_version"} == {
            k: v for k, v in before.items() if k != "transformers_version"}


def test_evaluation_during_training_keeps_to_the_models_own_max_new_tokens(checkpoint, data, tmp_path, monkeypatch):
    """A checkpoint whose generation config sets max_new_tokens (a shipped one does) is evaluated without the
    Trainer adding a max_length beside it: generate() warned "Both `max_new_tokens` and `max_length`" every batch."""
    folder = tmp_path / "with_max_new_tokens"
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
    model.generation_config.max_new_tokens = 6
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(folder)
    warned = []
    monkeypatch.setattr(generation_utils.logger, "warning", lambda message, *args, **kwargs: warned.append(message))
    results = script.main([
        "--task", "summarization", "--model_name_or_path", str(folder), "--train_file", str(data),
        "--validation_file", str(data), "--output_dir", str(tmp_path / "out"), "--do_train", "--do_eval",
        "--predict_with_generate", "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "1",
        "--save_strategy", "no", "--per_device_train_batch_size", "5", "--max_target_length", "12", *QUIET,
    ])
    assert "eval_rouge1" in results
    assert not [message for message in warned if "seem to have been set" in str(message)]
    assert results["eval_gen_len"] <= 6 + 1  # the model's limit, not the 12 of --max_target_length


def test_outputs_that_do_not_depend_on_the_input_are_counted_and_warned_about(checkpoint, tmp_path, caplog):
    # one summary for every document: the model learns to write it without reading the document
    rows = [{"document": en, "summary": "A summary."} for en, _ in PAIRS]
    data = write_jsonl(tmp_path / "same.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        results = script.main([
            "--task", "summarization", "--model_name_or_path", str(checkpoint), "--train_file", str(data),
            "--validation_file", str(data), "--output_dir", str(tmp_path / "out"), "--do_train", "--do_eval",
            "--predict_with_generate", "--max_steps", "30", "--learning_rate", "3e-3", "--save_strategy", "no",
            "--per_device_train_batch_size", "5", "--max_target_length", "8", *QUIET,
        ])
    assert (results["eval_distinct_outputs"], results["eval_distinct_inputs"]) == (1, len(PAIRS))
    assert "The outputs do not depend on the input: 1 distinct output(s) for 10 distinct inputs" in caplog.text


def test_without_predict_with_generate_evaluation_is_the_loss(checkpoint, data, tmp_path):
    results = script.main(translation_args(checkpoint, data, tmp_path, "--do_eval"))
    assert "eval_loss" in results and "eval_sacrebleu" not in results


def test_resume_continues_the_same_run(checkpoint, data, tmp_path, monkeypatch):
    common = ["--do_train", "--save_strategy", "steps", "--save_steps", "2", "--lr_scheduler_type", "constant",
              "--learning_rate", "3e-3", "--per_device_train_batch_size", "2"]
    script.main(translation_args(checkpoint, data, tmp_path / "straight", *common, "--max_steps", "4"))
    script.main(translation_args(checkpoint, data, tmp_path / "resumed", *common, "--max_steps", "2"))
    feed_forward = count_calls(monkeypatch, VaswaniFeedForward)
    script.main(translation_args(checkpoint, data, tmp_path / "resumed", *common, "--max_steps", "4",
                                 "--resume_from_checkpoint", str(tmp_path / "resumed" / "checkpoint-2")))
    assert feed_forward["calls"] == 2 * 4  # only steps 3 and 4 ran, through 2 encoder + 2 decoder layers
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    for name in straight:
        torch.testing.assert_close(straight[name], resumed[name], rtol=1e-5, atol=1e-6)


def test_resume_from_a_folder_that_is_no_trainer_checkpoint_is_an_error(checkpoint, data, tmp_path):
    with pytest.raises(ValueError, match="not a Trainer checkpoint"):
        script.main(translation_args(checkpoint, data, tmp_path, "--do_train", "--resume_from_checkpoint",
                                     str(checkpoint)))


def test_encoder_only_checkpoint_reports_the_new_decoder(tokenizer, data, tmp_path):
    tagger = tmp_path / "tagger"
    VaswaniForTokenClassification(tiny_config(vocab_size=len(tokenizer), num_labels=3)).save_pretrained(tagger)
    tokenizer.save_pretrained(tagger)
    results = script.main(translation_args(tagger, data, tmp_path / "out", "--do_train", "--max_steps", "1",
                                           "--save_strategy", "no"))
    report = results["loading_report"]
    assert report["new"] == ["model.decoder.layers"]
    assert report["unused"] == ["classifier"]


def test_translation_without_columns_is_an_error(checkpoint, data, tmp_path):
    with pytest.raises(ValueError, match="--source_column and --target_column"):
        script.main(["--task", "translation", "--model_name_or_path", str(checkpoint), "--train_file", str(data),
                     "--output_dir", str(tmp_path), "--do_train"])


def test_transformers_translation_format_is_read_by_the_languages(checkpoint, data, tmp_path):
    """Rows as transformers' run_translation reads them, `{"translation": {"en": ..., "de": ...}}`, with
    --source_lang/--target_lang naming the keys: evaluated as the same pairs in flat columns are, and trained on."""
    nested = write_jsonl(tmp_path / "nested.jsonl", [{"translation": {"en": en, "de": de}} for en, de in PAIRS])

    def evaluation_loss(file, source_lang, target_lang, output_dir):
        return script.main([
            "--task", "translation", "--model_name_or_path", str(checkpoint), "--source_lang", source_lang,
            "--target_lang", target_lang, "--validation_file", str(file), "--output_dir", str(tmp_path / output_dir),
            "--do_eval", *QUIET,
        ])["eval_loss"]

    flat = evaluation_loss(data, "en", "de", "flat")
    assert evaluation_loss(nested, "en", "de", "nested") == pytest.approx(flat, rel=1e-6)
    assert evaluation_loss(nested, "de", "en", "reversed") != pytest.approx(flat, rel=1e-3)
    with pytest.raises(ValueError, match=r"no key 'fr'; its keys are \['en', 'de'\]"):
        evaluation_loss(nested, "fr", "de", "french")
    script.main([
        "--task", "translation", "--model_name_or_path", str(checkpoint), "--source_lang", "en", "--target_lang",
        "de", "--train_file", str(nested), "--output_dir", str(tmp_path / "trained"), "--do_train", "--max_steps", "1",
        "--per_device_train_batch_size", "5", *QUIET,
    ])
    assert (tmp_path / "trained" / "model.safetensors").is_file()


def test_several_processes_without_a_process_group_is_an_error(checkpoint, data, tmp_path, monkeypatch):
    # what torchrun sets; without --use_cpu on a machine without GPUs, each process would train alone
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="--use_cpu true"):
        script.main(translation_args(checkpoint, data, tmp_path, "--do_train"))


def test_two_processes_with_torchrun_and_activation_checkpointing(checkpoint, data, tmp_path):
    output = run_two_processes("finetune_seq2seq", translation_args(
        checkpoint, data, tmp_path, "--do_train", "--do_eval", "--predict_with_generate", "--max_steps", "4",
        "--per_device_train_batch_size", "2", "--activation_checkpointing", "true", "--save_steps", "2",
        "--generation_num_beams", "2",
    ))
    train = json.loads((tmp_path / "train_results.json").read_text())
    assert train["num_processes"] == 2, output[-3000:]
    evaluation = json.loads((tmp_path / "eval_results.json").read_text())
    assert {"eval_sacrebleu", "eval_tokenized_bleu", "eval_gen_len"} <= set(evaluation)
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and (tmp_path / "checkpoint-4").is_dir()
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path).config.target_lang == "de"


@pytest.mark.parametrize("value, message", [
    (None, r"pairs.jsonl, row 2: `de` is null \(empty\); every row needs a value"),
    ("\ud800", r"pairs.jsonl, line 2: `de` is not valid text \(surrogates not allowed: '\\ud800'\)"),
    (5, r"pairs.jsonl, row 2: `de` holds an integer \(5\), not text"),
    (["Ein", "Mann."], r"pairs.jsonl, row 2: `de` holds a list \(\['Ein', 'Mann.'\]\), not text"),
], ids=["null", "lone surrogate", "integer", "list"])
def test_a_row_without_usable_text_is_named(checkpoint, tmp_path, value, message):
    rows = [{"en": en, "de": de} for en, de in PAIRS]
    rows[1]["de"] = value
    bad = tmp_path / "pairs.jsonl"  # JSON's escapes: a lone surrogate cannot be written as UTF-8
    bad.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        script.main(translation_args(checkpoint, bad, tmp_path / "out", "--do_train", "--max_steps", "1"))


def test_empty_pairs_are_dropped_and_counted_as_train_py_does(checkpoint, tmp_path, caplog):
    rows = [{"en": en, "de": de} for en, de in PAIRS] + [{"en": "   ", "de": "Leer."}, {"en": "Empty.", "de": ""}]
    pairs = write_jsonl(tmp_path / "pairs.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        script.main(translation_args(checkpoint, pairs, tmp_path / "out", "--do_train", "--max_steps", "1",
                                     "--save_strategy", "no"))
    assert "dropped 2 of 12 pairs with an empty `en` or `de`" in caplog.text
