"""scripts/finetune_classification.py: Trainer fine-tuning for text classification, from scratch or from a seq2seq
checkpoint, with label checks, activation checkpointing, gradient accumulation, resume and 2 processes."""

import json
import re

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from finetune_helpers import count_calls, language_rows, run_two_processes, weights
from helpers import QUIET, load_script, save_seq2seq_model, write_jsonl
from vaswani.remote_code.modeling_vaswani import VaswaniFeedForward


pytestmark = pytest.mark.usefixtures("one_thread")
script = load_script("finetune_classification")


@pytest.fixture(scope="module")
def tokenizer_dir(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Language identification (English / German) with a labels.json beside the files, as the SST-2 copy has."""
    folder = tmp_path_factory.mktemp("language-id")
    write_jsonl(folder / "train.jsonl", language_rows())
    write_jsonl(folder / "validation.jsonl", language_rows())
    (folder / "labels.json").write_text(json.dumps(["english", "german"]))
    return folder


def scratch_args(tokenizer_dir, data, output_dir, *extra):
    return [
        "--preset", "tiny", "--tokenizer_name", str(tokenizer_dir), "--config_overrides", "dropout=0.0",
        "--train_file", str(data / "train.jsonl"), "--validation_file", str(data / "validation.jsonl"),
        "--output_dir", str(output_dir), "--per_device_train_batch_size", "4", *QUIET, *extra,
    ]


def test_from_scratch_learns_the_task_and_saves_a_usable_classifier(tokenizer_dir, data, tmp_path):
    results = script.main(scratch_args(
        tokenizer_dir, data, tmp_path, "--do_train", "--do_eval", "--max_steps", "40", "--learning_rate", "3e-3",
        "--save_strategy", "no",
    ))
    assert results["eval_accuracy"] >= 0.9 and results["eval_f1"] >= 0.9
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert model.config.id2label == {0: "english", 1: "german"}  # the names of labels.json
    classify = pipeline("text-classification", model=model, tokenizer=str(tmp_path))
    assert classify("Two dogs play in the snow.")[0]["label"] == "english"
    assert classify("Zwei Hunde spielen im Schnee.")[0]["label"] == "german"
    saved = json.loads((tmp_path / "all_results.json").read_text())
    assert saved["eval_accuracy"] == results["eval_accuracy"]


def test_the_runs_record_holds_its_data_options_and_one_split_has_one_source(tokenizer_dir, data, tmp_path):
    """The data options as the run's record (arguments.json) keeps them; a split given twice is refused."""
    arguments = scratch_args(tokenizer_dir, data, tmp_path, "--do_train", "--do_eval", "--max_steps", "1",
                             "--save_strategy", "no")
    results = script.main([*arguments, "--dataset_config_name", "unused"])
    assert "eval_accuracy" in results
    record = json.loads((tmp_path / "arguments.json").read_text())["data"]
    assert record["train_file"] == str(data / "train.jsonl") and record["validation_file"] == str(
        data / "validation.jsonl")
    assert record["dataset_config_name"] == "unused"
    elsewhere = scratch_args(tokenizer_dir, data, tmp_path / "elsewhere", "--do_train", "--max_steps", "1")
    with pytest.raises(ValueError, match=r"--train_file .*train\.jsonl and --dataset_name someone/sst2 both give the "
                                         r"data of one split"):
        script.main([*elsewhere, "--dataset_name", "someone/sst2"])
    # the same folder again: the run there is not replaced
    with pytest.raises(FileExistsError, match=f"--output_dir {tmp_path} already holds a run or a model "
                                              r"\(all_results.json, arguments.json, config.json, eval_results.json "
                                              r"and "):
        script.main(arguments)


def test_seq2seq_checkpoint_gives_its_encoder_decoder_and_a_new_head(tokenizer, data, tmp_path, caplog):
    checkpoint = save_seq2seq_model(tmp_path / "seq2seq", tokenizer)
    output = tmp_path / "out"
    # a learning rate of 0 leaves the weights as loaded, so the saved model shows what was reused
    results = script.main([
        "--model_name_or_path", str(checkpoint), "--train_file", str(data / "train.jsonl"), "--output_dir", str(output),
        "--do_train", "--max_steps", "1", "--learning_rate", "0", "--save_strategy", "no", *QUIET,
    ])
    report = results["loading_report"]
    assert report["new"] == ["classification_head.dense", "classification_head.out_proj"]
    assert report["unused"] == []
    assert "classification_head" in caplog.text
    before, after = weights(checkpoint), weights(output)
    for name in ("model.shared.weight", "model.encoder.layers.1.feed_forward.fc1.weight",
                 "model.decoder.layers.1.encoder_attn.v_proj.weight"):
        assert torch.equal(before[name], after[name]), name


def test_encoder_only_classifier_takes_a_seq2seq_checkpoints_encoder_and_classifies(tokenizer, data, tmp_path):
    """`--config_overrides is_encoder_decoder=False`: the encoder of a seq2seq checkpoint and a new head (half the
    weights of the BART-style classifier), trained, saved, reloaded by the Auto class and run by the pipeline."""
    checkpoint = save_seq2seq_model(tmp_path / "seq2seq", tokenizer)
    output = tmp_path / "out"
    results = script.main([
        "--model_name_or_path", str(checkpoint), "--config_overrides", "is_encoder_decoder=False,dropout=0.0",
        "--train_file", str(data / "train.jsonl"), "--validation_file", str(data / "validation.jsonl"),
        "--output_dir", str(output), "--do_train", "--do_eval", "--max_steps", "40", "--learning_rate", "3e-3",
        "--per_device_train_batch_size", "4", "--save_strategy", "no", *QUIET,
    ])
    report = results["loading_report"]
    assert report["new"] == ["classification_head.dense", "classification_head.out_proj"]
    assert report["unused"] == ["model.decoder.layers"]
    assert results["eval_accuracy"] >= 0.9
    saved = weights(output)
    assert not any(".decoder." in name for name in saved)
    model = AutoModelForSequenceClassification.from_pretrained(output)
    assert model.config.is_encoder_decoder is False and type(model.model).__name__ == "VaswaniEncoderModel"
    classify = pipeline("text-classification", model=model, tokenizer=str(output))
    assert classify("Two dogs play in the snow.")[0]["label"] == "english"
    assert classify("Zwei Hunde spielen im Schnee.")[0]["label"] == "german"
    batch = tokenizer(["Two dogs play in the snow.", "Zwei Hunde."], padding=True, return_tensors="pt")
    alone = tokenizer(["Zwei Hunde."], return_tensors="pt")
    with torch.no_grad():  # padding does not move the state read: the last real token's
        assert torch.allclose(model(**batch).logits[1], model(**alone).logits[0], atol=1e-5)
    with pytest.raises(ValueError, match=r"encoder-only \(config.is_encoder_decoder=False\): it takes no "
                                         r"decoder_input_ids"):
        model(**batch, decoder_input_ids=batch["input_ids"])


def test_string_labels_are_mapped_through_label2id(tokenizer_dir, tmp_path):
    # names in the label column; labels.json fixes the ids (german first), not the order they appear in
    write_jsonl(tmp_path / "data" / "train.jsonl", language_rows(english="english", german="german"))
    (tmp_path / "data" / "labels.json").write_text(json.dumps(["german", "english"]))
    results = script.main(scratch_args(
        tokenizer_dir, tmp_path / "data", tmp_path / "out", "--validation_file", str(tmp_path / "data" / "train.jsonl"),
        "--do_train", "--do_eval", "--max_steps", "40", "--learning_rate", "3e-3", "--save_strategy", "no",
    ))
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert model.config.label2id == {"german": 0, "english": 1}
    assert results["eval_accuracy"] >= 0.9
    logits = model(**_encode(tmp_path / "out", "Ein Mann reitet ein Pferd.")).logits
    assert model.config.id2label[int(logits.argmax())] == "german"


def _encode(folder, text):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)([text], return_tensors="pt")


@pytest.mark.parametrize(
    "bad_label, message",
    [(2, r"Label id 2 at row 3 of column 'label' in .*train.jsonl is outside the label set.*\['english', 'german'\]"),
     ("spanish", r"Label 'spanish' at row 3 .* is not in the label set.*\['english', 'german'\]"),
     (1.5, r"Label 1.5 \(float\) at row 3 .*labels must be ids \(int\) or names \(str\)")],
)
def test_label_outside_the_label_set_is_an_error(tokenizer_dir, data, tmp_path, bad_label, message):
    rows = language_rows()
    rows[3]["label"] = bad_label
    write_jsonl(tmp_path / "train.jsonl", rows)
    (tmp_path / "labels.json").write_text(json.dumps(["english", "german"]))
    with pytest.raises(ValueError, match=message):
        script.main(scratch_args(tokenizer_dir, tmp_path, tmp_path / "out", "--do_train", "--max_steps", "1"))


@pytest.mark.parametrize("content", ["", "[]"], ids=["empty-jsonl", "json-without-rows"])
def test_empty_evaluation_split_is_an_error(tokenizer_dir, data, tmp_path, content):
    suffix = ".jsonl" if not content else ".json"
    empty = tmp_path / f"validation{suffix}"
    empty.write_text(content)
    with pytest.raises(ValueError, match=r"(is empty|has no rows)"):
        script.main(scratch_args(tokenizer_dir, data, tmp_path / "out", "--validation_file", str(empty), "--do_eval"))


def test_nothing_to_do_and_missing_checkpoint_to_resume_are_errors(tokenizer_dir, data, tmp_path):
    with pytest.raises(ValueError, match="--do_train and/or --do_eval"):
        script.main(scratch_args(tokenizer_dir, data, tmp_path / "a"))
    with pytest.raises(ValueError, match="no checkpoint-\\* folder"):
        script.main(scratch_args(tokenizer_dir, data, tmp_path / "b", "--do_train", "--resume_from_checkpoint", "last"))


def test_a_warmup_longer_than_a_run_of_epochs_is_refused_before_the_first_update(tokenizer_dir, data, tmp_path):
    """The run's length is known once the data are: 20 rows in batches of 4, 2 epochs -> 10 updates. (A warmup
    beyond --max_steps is refused with the other options: tests/test_option_checks.py.)"""
    with pytest.raises(ValueError, match=re.escape("--warmup_steps 11 is longer than the run (10 updates, from "
                                                   "--num_train_epochs 2)")):
        script.main(scratch_args(tokenizer_dir, data, tmp_path / "long", "--do_train", "--num_train_epochs", "2",
                                 "--warmup_steps", "11", "--save_strategy", "no"))
    assert not (tmp_path / "long" / "model.safetensors").exists()
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "fits", "--do_train", "--num_train_epochs", "2",
                             "--warmup_steps", "10", "--save_strategy", "no"))
    assert (tmp_path / "fits" / "model.safetensors").is_file()


def test_activation_checkpointing_recomputes_layers_and_trains_the_same(tokenizer_dir, data, tmp_path, monkeypatch):
    feed_forward = count_calls(monkeypatch, VaswaniFeedForward)
    counts = {}
    for name, extra in (("plain", []), ("checkpointed", ["--activation_checkpointing", "true"])):
        feed_forward["calls"] = 0
        script.main(scratch_args(tokenizer_dir, data, tmp_path / name, "--do_train", "--max_steps", "3",
                                 "--save_strategy", "no", *extra))
        counts[name] = feed_forward["calls"]
    # 3 steps through 2 encoder + 2 decoder layers; backward runs each checkpointed layer again
    assert counts == {"plain": 3 * 4, "checkpointed": 2 * 3 * 4}
    plain, checkpointed = weights(tmp_path / "plain"), weights(tmp_path / "checkpointed")
    for name in plain:
        torch.testing.assert_close(plain[name], checkpointed[name], rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_gives_the_gradient_of_the_whole_batch(tokenizer_dir, data, tmp_path):
    # plain SGD without clipping: a loss scaled by the accumulation steps would show in the weights at once
    common = ["--do_train", "--max_steps", "2", "--optim", "sgd", "--learning_rate", "0.1", "--max_grad_norm", "0",
              "--save_strategy", "no", "--train_sampling_strategy", "sequential"]
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "whole", *common))
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "accumulated", *common,
                             "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2"))
    whole, accumulated = weights(tmp_path / "whole"), weights(tmp_path / "accumulated")
    for name in whole:
        torch.testing.assert_close(whole[name], accumulated[name], rtol=1e-4, atol=1e-6)


def test_resume_from_a_trainer_checkpoint_continues_the_same_run(tokenizer_dir, data, tmp_path, monkeypatch):
    common = ["--do_train", "--save_strategy", "steps", "--save_steps", "2", "--lr_scheduler_type", "constant",
              "--learning_rate", "3e-3"]
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "straight", *common, "--max_steps", "4"))
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "resumed", *common, "--max_steps", "2"))

    feed_forward = count_calls(monkeypatch, VaswaniFeedForward)
    script.main(scratch_args(tokenizer_dir, data, tmp_path / "resumed", *common, "--max_steps", "4",
                             "--resume_from_checkpoint", "last"))
    assert feed_forward["calls"] == 2 * 4  # steps 3 and 4 only, through 2 encoder + 2 decoder layers
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    for name in straight:
        torch.testing.assert_close(straight[name], resumed[name], rtol=1e-5, atol=1e-6)
    state = json.loads((tmp_path / "resumed" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


def test_two_processes_with_accelerate_launch(tokenizer_dir, data, tmp_path):
    output = run_two_processes(
        "finetune_classification",
        scratch_args(tokenizer_dir, data, tmp_path, "--do_train", "--do_eval", "--max_steps", "3",
                     "--save_strategy", "no", "--activation_checkpointing", "true"),
        launcher="accelerate",
    )
    train = json.loads((tmp_path / "train_results.json").read_text())
    assert train["num_processes"] == 2, output[-3000:]
    evaluation = json.loads((tmp_path / "eval_results.json").read_text())
    assert 0.0 <= evaluation["eval_accuracy"] <= 1.0
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path).config.num_labels == 2


def test_a_fine_tuned_folder_points_only_to_this_projects_code(tokenizer, data, tmp_path, caplog):
    """A checkpoint whose config and tokenizer config point to a planted module: the fine-tuned folder and its
    checkpoints keep only the entries this project writes, each dropped one named in a warning."""
    from vaswani.remote_code.configuration_vaswani import AUTO_MAP

    checkpoint = save_seq2seq_model(tmp_path / "planted", tokenizer)
    config = json.loads((checkpoint / "config.json").read_text())
    config["auto_map"]["AutoModelForSequenceClassification"] = "evil.Model"
    config["auto_map"]["AutoModelForCausalLM"] = "someone/else--evil.Model"
    (checkpoint / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["evil.Tokenizer", None], "AutoModel": "evil.Model"}
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    output = tmp_path / "out"
    script.main([
        "--model_name_or_path", str(checkpoint), "--train_file", str(data / "train.jsonl"), "--output_dir", str(output),
        "--do_train", "--max_steps", "1", "--save_steps", "1", *QUIET,
    ])
    for folder in (output, output / "checkpoint-1"):
        assert json.loads((folder / "config.json").read_text())["auto_map"] == json.loads(json.dumps(AUTO_MAP))
        assert json.loads((folder / "tokenizer_config.json").read_text())["auto_map"] == {
            "AutoTokenizer": ["tokenization_vaswani.VaswaniTokenizer", None]}
    for entry in ("auto_map AutoModelForSequenceClassification -> 'evil.Model'",
                  "auto_map AutoModelForCausalLM -> 'someone/else--evil.Model'", "auto_map AutoModel -> 'evil.Model'"):
        assert f"{checkpoint}: dropped {entry}" in caplog.text


def test_resuming_a_finished_run_or_an_absurd_progress_is_refused_and_nothing_changes(tokenizer_dir, data, tmp_path):
    """Resumed from a finished run, the Trainer trained one update at learning rate 0 and overwrote the results
    with it; resumed from a trainer_state.json at update 1e9, it trained nothing and saved the old checkpoint as the
    final model; both with exit status 0."""
    from helpers import snapshot

    run = tmp_path / "run"
    common = ["--do_train", "--save_strategy", "steps", "--save_steps", "2"]
    script.main(scratch_args(tokenizer_dir, data, run, *common, "--max_steps", "2"))
    before = snapshot(run)
    with pytest.raises(ValueError, match=r"checkpoint-2 is at update 2, and --max_steps 2 leaves nothing to train: "
                                         "the run is finished"):
        script.main(scratch_args(tokenizer_dir, data, run, *common, "--max_steps", "2", "--resume_from_checkpoint",
                                 "last"))
    with pytest.raises(ValueError, match=r"the run is at update 2, and --num_train_epochs 0.1 makes it 1 updates "
                                         "long: the run is finished"):
        script.main(scratch_args(tokenizer_dir, data, run, *common, "--num_train_epochs", "0.1",
                                 "--resume_from_checkpoint", "last"))
    state_file = run / "checkpoint-2" / "trainer_state.json"
    saved = state_file.read_text()
    state_file.write_text(json.dumps({**json.loads(saved), "global_step": 10**9}))
    with pytest.raises(ValueError, match=r"trainer_state.json's global_step 1000000000 is beyond its run's own "
                                         "max_steps 2: not a checkpoint a run wrote"):
        script.main(scratch_args(tokenizer_dir, data, run, *common, "--max_steps", "4", "--resume_from_checkpoint",
                                 "last"))
    state_file.write_text(saved)
    assert {key: value for key, value in snapshot(run).items() if key != ".run.lock"} == {
        key: value for key, value in before.items() if key != ".run.lock"}


def test_sigterm_while_the_run_is_set_up_exits_75_with_its_line(tokenizer_dir, data, tmp_path, monkeypatch):
    """A stop signal before the first update (here while the data are loaded) ends the run at once, nothing being
    trained: one line and status 75, so that a job requeued on it starts again (it was 143, and no line)."""
    import os
    import signal

    import vaswani.finetuning.classification as classification
    from helpers import REPO, command_in_process

    load_splits = classification.load_splits

    def load_then_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return load_splits(*args, **kwargs)

    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1)}
    monkeypatch.setattr(classification, "load_splits", load_then_signal)
    try:
        done = command_in_process(REPO / "scripts" / "finetune_classification.py",
                                  scratch_args(tokenizer_dir, data, tmp_path / "run", "--do_train", "--max_steps", "2"))
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert done.returncode == 75
    assert done.stderr.strip().splitlines()[-1].startswith(
        "finetune_classification.py: stopped by SIGTERM while the run was being set up, before its first update: "
        "nothing was trained, so nothing is lost")
    assert not (tmp_path / "run" / "config.json").exists()


def with_option(arguments: list[str], option: str, value: str) -> list[str]:
    """`arguments` with `option` given `value` (in place of the value it had)."""
    changed = list(arguments)
    changed[changed.index(option) + 1] = value
    return changed


def test_resuming_with_other_data_or_another_base_model_is_refused(tokenizer_dir, data, tmp_path):
    """`--resume_from_checkpoint last` with another --train_file or --model_name_or_path was accepted, and
    arguments.json (and so the model card) named only the last command's inputs: each checkpoint records the run's
    options, and a resume that changes what it trains on is refused in one line; the validation data may change."""
    run = tmp_path / "run"
    common = ["--do_train", "--save_strategy", "steps", "--save_steps", "2"]
    script.main(scratch_args(tokenizer_dir, data, run, *common, "--max_steps", "2"))
    record = json.loads((run / "checkpoint-2" / "arguments.json").read_text())
    assert record["data"]["train_file"] == str(data / "train.jsonl") and record["model"]["preset"] == "tiny"
    resumed = scratch_args(tokenizer_dir, data, run, *common, "--max_steps", "4", "--resume_from_checkpoint", "last")
    other = write_jsonl(tmp_path / "other.jsonl", language_rows(english=1, german=0))
    where = re.escape(f"--resume_from_checkpoint {run / 'checkpoint-2'}: these options differ from those of the run")
    with pytest.raises(ValueError, match=rf"^{where} it continues \(what was -> what is\): --train_file "
                                         rf"'{re.escape(str(data / 'train.jsonl'))}' -> '{re.escape(str(other))}'\. "):
        script.main(with_option(resumed, "--train_file", str(other)))
    base = save_seq2seq_model(tmp_path / "base", AutoTokenizer.from_pretrained(tokenizer_dir))
    another_base = [item for item in resumed if item not in ("--preset", "tiny")] + ["--model_name_or_path", str(base)]
    with pytest.raises(ValueError, match=rf"--model_name_or_path None -> '{re.escape(str(base))}'; --preset 'tiny' "
                                         "-> None"):
        script.main(another_base)
    # the same inputs resume, another validation file too; the run's record names them
    script.main(with_option(resumed, "--validation_file", str(other)))
    final = json.loads((run / "arguments.json").read_text())
    assert final["data"]["train_file"] == str(data / "train.jsonl")
