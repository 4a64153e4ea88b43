"""The numeric options of train.py, evaluate_model.py and the three fine-tuning scripts, checked where they are parsed
(the promises table of scripts/training.md): a value out of range, of the wrong type or not finite ends the command in
one line that names the option, the value and what is allowed, before any model is built and before anything is
written to the output folder; among them every run that would train no update. The checks run before any loading, so each case takes milliseconds."""

import json
import re

import pytest

from helpers import load_script


SCRIPTS = {name: load_script(name) for name in (
    "train", "evaluate_model", "finetune_classification", "finetune_seq2seq", "finetune_token_classification",
)}
FINE_TUNING = ("finetune_classification", "finetune_seq2seq", "finetune_token_classification")


def base_argv(script: str, output: str) -> list[str]:
    """A call of `script` that would get past its option checks to loading (every input is missing: nothing gets
    that far without failing loudly), writing to `output`."""
    if script == "train":
        return ["--output_dir", output, "--train_file", "missing.jsonl"]
    if script == "evaluate_model":
        return ["--model", "missing-model", "--task", "translation", "--validation_file", "missing.jsonl",
                "--output_file", f"{output}/results.json"]
    return ["--model_name_or_path", "missing-model", "--train_file", "missing.jsonl", "--output_dir", output,
            "--do_train"]


# (script, the bad options, what the one-line message says)
CASES = [
    # train.py: a run of no update, clipping turned off by a negative or NaN limit, patience of no evaluation
    ("train", ["--max_epochs", "0"], "--max_epochs must be a whole number >= 1, or unset"),
    ("train", ["--max_epochs", "-2"], "--max_epochs must be a whole number >= 1, or unset"),
    ("train", ["--max_train_samples", "0"], "--max_train_samples must be a whole number >= 1, or unset; got 0."),
    ("train", ["--max_grad_norm", "-1"], "--max_grad_norm must be a finite number >= 0 (0 turns clipping off); got "
                                         "-1.0."),
    ("train", ["--max_grad_norm", "nan"], "--max_grad_norm must be a finite number >= 0 (0 turns clipping off); got "
                                          "nan."),
    ("train", ["--early_stopping_patience", "0"], "--early_stopping_patience must be a whole number >= 1, or unset"),
    # train.py: what torch's optimizer, numpy's seeding and datasets would refuse without naming the option
    ("train", ["--learning_rate", "nan"], "--learning_rate must be a finite number > 0, or unset"),
    ("train", ["--adam_beta1", "1.5"], "--adam_beta1 must be a finite number >= 0 and < 1; got 1.5."),
    ("train", ["--adam_beta2", "-0.1"], "--adam_beta2 must be a finite number >= 0 and < 1; got -0.1."),
    ("train", ["--weight_decay", "-1"], "--weight_decay must be a finite number >= 0; got -1.0."),
    ("train", ["--adam_epsilon", "-1"], "--adam_epsilon must be a finite number > 0; got -1.0."),
    ("train", ["--seed", "-1"], "--seed must be a whole number >= 0 and <= 4294967295; got -1."),
    ("train", ["--preprocessing_num_workers", "-1"], "--preprocessing_num_workers must be a whole number >= 1"),
    ("train", ["--eval_length_penalty", "inf"], "--eval_length_penalty must be a finite number; got inf."),
    ("train", ["--dropout", "1.5"], "--dropout must be a finite number >= 0 and < 1; got 1.5."),
    # evaluate_model.py: a NaN length penalty was written into the results file
    ("evaluate_model", ["--length_penalty", "nan"], "--length_penalty must be a finite number; got nan."),
    ("evaluate_model", ["--num_beams", "0"], "--num_beams must be a whole number >= 1; got 0."),
    ("evaluate_model", ["--max_new_tokens", "-1"], "--max_new_tokens must be a whole number >= 1; got -1."),
    ("evaluate_model", ["--batch_size", "0"], "--batch_size must be a whole number >= 1; got 0."),
    ("evaluate_model", ["--max_eval_samples", "0"], "--max_eval_samples must be a whole number >= 1, or unset"),
    ("evaluate_model", ["--no_repeat_ngram_size", "0"], "--no_repeat_ngram_size must be a whole number >= 1"),
    ("evaluate_model", ["--diagnostic_examples", "-1"], "--diagnostic_examples must be a whole number >= 0"),
    # the fine-tuning scripts: a run of no update (a random head saved), and what failed later with a traceback
    *[(script, options, message) for script in FINE_TUNING for options, message in [
        (["--num_train_epochs", "-1", "--max_steps", "-1"], "--num_train_epochs -1 with --max_steps -1 would train no "
                                                            "update"),
        (["--max_steps", "0"], "--max_steps must be a whole number >= 1, or -1"),
        (["--max_grad_norm", "-1"], "--max_grad_norm must be a finite number >= 0 (0 turns clipping off); got -1.0."),
        (["--max_grad_norm", "nan"], "--max_grad_norm must be a finite number >= 0 (0 turns clipping off); got nan."),
        (["--warmup_steps", "1e20", "--max_steps", "5"], "--warmup_steps 1e+20 is longer than the run (5 updates"),
        (["--warmup_steps", "2.5"], "--warmup_steps must be a whole number of updates, or a fraction of the run"),
        (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be a whole number >= 1; got 0."),
        (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be a whole number >= 1; got 0."),
        (["--learning_rate", "nan"], "--learning_rate must be a finite number >= 0; got nan."),
        (["--adam_beta1", "1.5"], "--adam_beta1 must be a finite number >= 0 and < 1; got 1.5."),
        (["--weight_decay", "-1"], "--weight_decay must be a finite number >= 0; got -1.0."),
        (["--adam_epsilon", "-1"], "--adam_epsilon must be a finite number > 0; got -1.0."),
        (["--seed", "-1"], "--seed must be a whole number >= 0 and <= 4294967295; got -1."),
        (["--max_train_samples", "0"], "--max_train_samples must be a whole number >= 1, or unset"),
        (["--num_train_epochs", "inf"], "--num_train_epochs must be a finite number; got inf."),
        # 0 never saved until the end (a kill lost the run), a negative count never evaluated
        (["--save_steps", "0"], "--save_steps must be a finite number > 0 (updates, or a fraction of the run below "
                                "1); got 0.0."),
        (["--eval_steps", "-1"], "--eval_steps must be a finite number > 0, or unset (updates, or a fraction of the "
                                 "run below 1); got -1.0."),
    ]],
    # a vocabulary the tokenizers trainer cannot allocate aborted the process (SIGABRT, a 56-line Rust backtrace)
    ("train", ["--vocab_size", "1000000000000"], "--vocab_size must be a whole number >= 1 and <= 16777216; got "
                                                 "1000000000000."),
    ("finetune_classification", ["--max_length", "0"], "--max_length must be a whole number >= 1; got 0."),
    ("finetune_classification", ["--max_length", "-5"], "--max_length must be a whole number >= 1; got -5."),
    ("finetune_token_classification", ["--max_length", "0"], "--max_length must be a whole number >= 1; got 0."),
    ("finetune_seq2seq", ["--max_source_length", "-5"], "--max_source_length must be a whole number >= 1; got -5."),
    ("finetune_seq2seq", ["--max_target_length", "0"], "--max_target_length must be a whole number >= 1; got 0."),
]


@pytest.mark.parametrize("script, options, message", CASES,
                         ids=[f"{script}{''.join(' ' + option for option in options)}" for script, options, _ in CASES])
def test_a_bad_number_is_one_line_naming_the_option_before_anything_is_written(tmp_path, script, options, message):
    output = tmp_path / "out"
    with pytest.raises(ValueError) as raised:
        SCRIPTS[script].main(base_argv(script, str(output)) + options)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert not output.exists()


@pytest.mark.parametrize("values, message", [
    ({"warmup_steps": 1e20}, "--warmup_steps must be a whole number >= 1; got 1e+20."),
    ({"max_steps": 2000.0}, "--max_steps must be a whole number >= 1; got 2000.0."),
    ({"max_epochs": True}, "--max_epochs must be a whole number >= 1, or unset"),
    ({"max_steps": None}, "--max_steps must be a whole number >= 1; got None."),
    ({"learning_rate": float("nan")}, "--learning_rate must be a finite number > 0, or unset"),
])
def test_a_config_files_numbers_are_held_to_their_options_type_and_range(tmp_path, values, message):
    """A config file's values reach the options as they are (the parser converts only strings): a float where a
    count belongs, a boolean, a null or NaN (JSON's `NaN`) are named like a bad command-line value."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(values))
    with pytest.raises(ValueError, match=re.escape(message)):
        SCRIPTS["train"].main(["--config", str(config), *base_argv("train", str(tmp_path / "out"))])
    assert not (tmp_path / "out").exists()


def test_train_tokenizers_numbers_are_checked_before_the_data_are_read(tmp_path):
    with pytest.raises(ValueError, match=r"^--vocab_size must be a whole number >= 1 and <= 16777216; got "
                                         r"1000000000000\.$"):
        load_script("train_tokenizer").main(["--train_file", "missing.jsonl", "--columns", "en", "--output_dir",
                                             str(tmp_path / "out"), "--vocab_size", "1000000000000"])
    assert not (tmp_path / "out").exists()


def test_a_length_beyond_the_models_positions_is_refused_before_the_tokenizer_is_learned(tmp_path, monkeypatch):
    """It was refused only once the tokenizer was learned from the training data: minutes on a large corpus."""
    from helpers import PAIRS, write_jsonl
    from vaswani.training import preparation

    data = write_jsonl(tmp_path / "train.jsonl", [{"en": en, "de": de} for en, de in PAIRS])
    monkeypatch.setattr(preparation.VaswaniTokenizer, "train_from_texts", lambda *args, **kwargs: pytest.fail(
        "the tokenizer was learned before the lengths were checked"))
    with pytest.raises(ValueError, match=r"^--max_source_length is 256, beyond the model's max_position_embeddings="
                                         r"128; lower it"):
        SCRIPTS["train"].main(["--train_file", str(data), "--output_dir", str(tmp_path / "out"), "--preset", "tiny"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("options, message", [
    (["--length_penalty", "nan"], "--length_penalty must be a finite number; got nan."),
    (["--length_penalty", "inf"], "--length_penalty must be a finite number; got inf."),
    (["--num_beams", "0"], "--num_beams must be a whole number >= 1; got 0."),
    (["--max_new_tokens", "-3"], "--max_new_tokens must be a whole number >= 1; got -3."),
])
def test_attention_heatmaps_numbers_are_checked_before_the_model_is_read(tmp_path, options, message):
    """`--length_penalty nan` was accepted (and decoded without a word)."""
    with pytest.raises(ValueError) as raised:
        load_script("attention_heatmap").main(["--model", "missing-model", "--text", "A man.", "--output_file",
                                               str(tmp_path / "out.png"), *options])
    assert str(raised.value) == message
