"""Checkpoints from elsewhere that must not load: a pickled weights file with a payload, JSON files nested or sized to
exhaust the parser, a tokenizer larger than the model's embedding table, a config whose weights do not fit in memory.
Each is refused before anything is parsed or allocated, by the classes (from_pretrained / from_config) and by every
command that loads a checkpoint, with a user error (one line from vaswani.cli.run_command) that names the file or the
fields, never a traceback, and no code from the file ever runs."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vaswani.remote_code.configuration_vaswani
import vaswani.remote_code.loading_checks
from helpers import (
    QUIET,
    REPO,
    command_in_process,
    load_script,
    save_seq2seq_model,
    tiny_config,
    write_jsonl,
)
from vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniTokenizer
from vaswani.pipelines import pipeline
from vaswani.training.arguments import TrainArguments, TrainDataArguments, TrainModelArguments
from vaswani.training.preparation import build_model


evaluate_model = load_script("evaluate_model")
export_onnx = load_script("export_onnx")
export_ctranslate2 = load_script("export_ctranslate2")
average_checkpoints = load_script("average_checkpoints")
push_to_hub = load_script("push_to_hub")
finetune_classification = load_script("finetune_classification")


class Payload:
    """Unpickled, it would create the file `marker` (it calls open(marker, "w")): the proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.fixture(scope="module")
def checkpoint(tokenizer, tmp_path_factory):
    """A sound en->de checkpoint, copied by each test before it damages the copy."""
    return save_seq2seq_model(
        tmp_path_factory.mktemp("sound"), tokenizer, source_lang="en", target_lang="de"
    )


@pytest.fixture
def copy_of(checkpoint, tmp_path):
    def copy(name="damaged"):
        return shutil.copytree(checkpoint, tmp_path / name)

    return copy


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "test.jsonl", [{"en": "A man is riding a horse.", "de": "Ein Mann reitet ein Pferd."}])


def command_loaders(checkpoint, data, tmp_path):
    """Every command that loads a checkpoint, as a function of the checkpoint folder."""
    out = tmp_path / "out"
    return {
        "evaluate_model": lambda folder: evaluate_model.main([
            "--model", str(folder), "--task", "translation", "--test_file", str(data), "--output_file",
            str(tmp_path / "results.json")]),
        "export_onnx": lambda folder: export_onnx.main(["--model", str(folder), "--output_dir", str(out)]),
        "export_ctranslate2": lambda folder: export_ctranslate2.main(["--model", str(folder), "--output_dir", str(out)]),
        "average_checkpoints": lambda folder: average_checkpoints.main([
            "--checkpoints", str(checkpoint), str(folder), "--output_dir", str(out)]),
        "push_to_hub": lambda folder: push_to_hub.main(["--model", str(folder), "--dry-run", "--output_dir",
                                                        str(out)]),
        "pipeline": lambda folder: pipeline("translation", model=str(folder)),
    }


def needs(*modules):
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (an optional extra)")


COMMANDS = [
    "evaluate_model",
    pytest.param("export_onnx", marks=needs("onnx", "onnxruntime")),
    pytest.param("export_ctranslate2", marks=needs("ctranslate2")),
    "average_checkpoints",
    "push_to_hub",
    "pipeline",
]


# --- pickled weights -------------------------------------------------------------------------------------------------


def plant_pickled_weights(folder, marker):
    """Replace the safetensors weights by a pytorch_model.bin whose unpickling would create `marker`."""
    (folder / "model.safetensors").unlink()
    torch.save({"model.shared.weight": Payload(marker)}, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


PICKLE_REFUSED = r"pytorch_model\.bin is refused: it holds pickled weights, which are never loaded"


@pytest.mark.parametrize("command", COMMANDS)
def test_pickled_weights_are_refused_by_every_command_and_nothing_in_them_runs(
    command, checkpoint, copy_of, data, tmp_path
):
    marker = tmp_path / "payload-ran"
    weights = plant_pickled_weights(copy_of(), marker)
    with pytest.raises(OSError, match=PICKLE_REFUSED) as refused:
        command_loaders(checkpoint, data, tmp_path)[command](weights.parent)
    assert str(weights) in str(refused.value) and "convert it to safetensors" in str(refused.value).lower()
    assert "weights_only" not in str(refused.value)
    assert not marker.exists()


# --- weights no run writes ---------------------------------------------------------------------------------------


def rewrite_weights(folder, change):
    """The folder's weights with `change(name, tensor)` applied to each tensor, saved again as safetensors."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    save_file({name: change(name, tensor) for name, tensor in weights.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    return folder / "model.safetensors"


WEIGHTS_NO_RUN_WRITES = {
    "all NaN": (lambda name, tensor: torch.full_like(tensor, float("nan")),
                r"holds NaN or infinite values in model\.\S+: the model would compute NaN"),
    "one infinity": (lambda name, tensor: tensor.clone().fill_(float("inf")) if name == "model.shared.weight"
                     else tensor, r"holds NaN or infinite values in model\.shared\.weight"),
    "int32": (lambda name, tensor: tensor.to(torch.int32), r"holds model\.\S+ as I32: a model's weights are floating "
              r"point \(F64, F32, F16, BF16\)"),
}


@pytest.mark.parametrize("damage", list(WEIGHTS_NO_RUN_WRITES))
@pytest.mark.parametrize("command", COMMANDS)
def test_weights_that_no_run_writes_are_refused_at_load_in_one_line(command, damage, checkpoint, copy_of, data,
                                                                      tmp_path):
    """Weights that are NaN, infinite or integers loaded without a word and evaluated to BLEU 0 ("the decoder is
    ignoring the encoder")."""
    change, refusal = WEIGHTS_NO_RUN_WRITES[damage]
    weights = rewrite_weights(copy_of(), change)
    with pytest.raises(OSError, match=refusal) as refused:
        command_loaders(checkpoint, data, tmp_path)[command](weights.parent)
    assert str(refused.value).startswith(f"The weights file {weights} holds ") and "\n" not in str(refused.value)


# --- folders transformers fails on in many lines ---------------------------------------------------------------


def edit_json(path, **changes):
    content = json.loads(path.read_text())
    content.update(changes)
    path.write_text(json.dumps(content))


def without_tokenizer_json(folder):
    (folder / "tokenizer.json").unlink()
    return r"(has tokenizer_config\.json but no tokenizer\.json|has no tokenizer \(tokenizer\.json\))"


def bert_model_type(folder):
    edit_json(folder / "config.json", model_type="bert")
    return r"config\.json: model_type is 'bert', but its auto_map names this project's classes"


def an_id_as_eos_token(folder):
    edit_json(folder / "tokenizer_config.json", eos_token=2)
    return r"tokenizer_config\.json: `eos_token` is 2; a special token is given as its text"


def weights_of_another_shape(folder):
    rewrite_weights(folder, lambda name, tensor: tensor[:10].half() if name == "model.shared.weight" else tensor.half())
    return r"model\.safetensors: model\.shared\.weight has the shape \[10, 32\], and config\.json makes it \[\d+, 32\]"


def truncated_tokenizer_json(folder):
    text = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(text[: len(text) // 2])
    return r"tokenizer\.json is not valid JSON \(.* line 1 column \d+ .*\): the file is truncated or damaged"


FAILING_IN_MANY_LINES = [without_tokenizer_json, bert_model_type, an_id_as_eos_token, weights_of_another_shape,
                         truncated_tokenizer_json]


@pytest.mark.parametrize("damage", FAILING_IN_MANY_LINES, ids=lambda damage: damage.__name__)
@pytest.mark.parametrize("command", [command for command in COMMANDS if command != "pipeline"])
def test_a_folder_transformers_fails_on_in_many_lines_is_named_in_one(command, damage, checkpoint, copy_of, data,
                                                                      tmp_path):
    """Each was a traceback of 5 to 79 lines (transformers' advice about sentencepiece or trust_remote_code, a
    TypeError about AddedToken, a size-mismatch report, a JSON error naming no file)."""
    folder = copy_of()
    refusal = damage(folder)
    with pytest.raises((ValueError, OSError)) as refused:
        command_loaders(checkpoint, data, tmp_path)[command](folder)
    message = str(refused.value)
    assert re.search(refusal, message) and str(folder) in message and "\n" not in message, message


def test_a_command_given_pickled_weights_says_so_in_one_line(copy_of, data, tmp_path):
    marker = tmp_path / "payload-ran"
    weights = plant_pickled_weights(copy_of(), marker)
    arguments = ["--model", weights.parent, "--task", "translation", "--test_file", data, "--output_file",
                 tmp_path / "results.json"]
    result = command_in_process(REPO / "scripts" / "evaluate_model.py", arguments)
    assert result.returncode == 1
    assert f"evaluate_model.py: error: {weights} is refused: it holds pickled weights" in result.stderr
    assert "Traceback" not in result.stderr and "weights_only" not in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("load", [VaswaniForConditionalGeneration.from_pretrained, AutoModelForSeq2SeqLM.from_pretrained])
def test_pickled_weights_are_refused_by_from_pretrained(load, copy_of, tmp_path):
    marker = tmp_path / "payload-ran"
    weights = plant_pickled_weights(copy_of(), marker)
    with pytest.raises(OSError, match=PICKLE_REFUSED):
        load(weights.parent)
    assert not marker.exists()


def trainer_checkpoint(folder):
    """A folder the fine-tuning scripts accept as a Trainer checkpoint to resume from."""
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    return folder


def resume_from(folder, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    return finetune_classification.main([
        "--model_name_or_path", str(folder), "--train_file", str(tmp_path / "train.jsonl"), "--output_dir",
        str(tmp_path / "run"), "--do_train", "--resume_from_checkpoint", str(folder), *QUIET,
    ])


def test_resuming_fine_tuning_from_pickled_weights_is_refused(copy_of, tmp_path):
    marker = tmp_path / "payload-ran"
    folder = trainer_checkpoint(plant_pickled_weights(copy_of(), marker).parent)
    with pytest.raises(OSError, match=PICKLE_REFUSED):
        resume_from(folder, tmp_path)
    assert not marker.exists()


def test_resuming_fine_tuning_from_an_optimizer_state_with_a_payload_is_refused(copy_of, tmp_path):
    """The Trainer's own states are pickles it loads with weights_only=True: one holding anything else is named,
    instead of torch's advice to load it with weights_only=False."""
    marker = tmp_path / "payload-ran"
    folder = trainer_checkpoint(copy_of())
    torch.save({"state": Payload(marker)}, folder / "optimizer.pt")
    with pytest.raises(ValueError, match=r"cannot be resumed from: optimizer\.pt: it holds objects other than tensors"):
        resume_from(folder, tmp_path)
    assert not marker.exists()


# --- JSON files nested or sized to exhaust the parser --------------------------------------------------------------


DEPTH = 200_000


def nest_deeply(path):
    """Add a value nested DEPTH levels deep to a JSON file: Python's json module recurses once per level."""
    content = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(content)[:-1] + ', "nested": ' + "[" * DEPTH + "]" * DEPTH + "}", encoding="utf-8")


JSON_FILES = ["config.json", "tokenizer_config.json", "tokenizer.json"]


@pytest.mark.parametrize("name", JSON_FILES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_deeply_nested_json_file_is_named_by_every_command(name, command, checkpoint, copy_of, data, tmp_path):
    folder = copy_of()
    nest_deeply(folder / name)
    with pytest.raises(ValueError, match=rf"{folder / name} is nested more than 100 levels deep"):
        command_loaders(checkpoint, data, tmp_path)[command](folder)


@pytest.mark.parametrize("name, load", [
    ("config.json", VaswaniConfig.from_pretrained),
    ("config.json", VaswaniForConditionalGeneration.from_pretrained),
    ("tokenizer_config.json", VaswaniTokenizer.from_pretrained),
    ("tokenizer.json", VaswaniTokenizer.from_pretrained),
    ("tokenizer.json", AutoTokenizer.from_pretrained),
])
def test_a_deeply_nested_json_file_is_named_by_the_classes(name, load, copy_of):
    folder = copy_of()
    nest_deeply(folder / name)
    with pytest.raises(ValueError, match=rf"{folder / name} is nested more than 100 levels deep"):
        load(folder)


def test_a_json_file_larger_than_any_checkpoint_holds_is_refused_before_it_is_read(copy_of, monkeypatch):
    folder = copy_of()
    monkeypatch.setattr(vaswani.remote_code.configuration_vaswani, "MAX_JSON_BYTES", 100)  # instead of writing 16 MiB
    with pytest.raises(ValueError, match=rf"{folder / 'config.json'} is [\d,]+ bytes, more than the 100 a "
                                         r"model's config.json may have"):
        VaswaniConfig.from_pretrained(folder)


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"merges": [["[", "{"], ["]]", "}"]], "a": "[[[[" * 1000, "b": {"c": [1]}})
    assert vaswani.remote_code.configuration_vaswani.json_nesting_depth(text) == 3


# --- a tokenizer that does not belong to the model, a config that does not ----------------------------------------


def test_evaluating_with_a_tokenizer_larger_than_the_embedding_table_is_refused(tokenizer, data, tmp_path):
    folder = tmp_path / "mismatched"
    VaswaniForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer) - 10, source_lang="en", target_lang="de")).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(ValueError, match=rf"The tokenizer has {len(tokenizer):,} tokens but the model's embedding "
                                         rf"table has {len(tokenizer) - 10:,} rows"):
        evaluate_model.main(["--model", str(folder), "--task", "translation", "--test_file", str(data),
                             "--output_file", str(tmp_path / "results.json")])


@pytest.mark.parametrize("field, value", [("pad_token_id", 100_000), ("layer_norm_eps", "Infinity")])
def test_a_config_json_with_a_value_the_model_cannot_use_is_named_on_loading(field, value, copy_of, data, tmp_path):
    folder = copy_of()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config)[:-1] + f', "{field}": {value}' + "}")
    with pytest.raises(ValueError, match=f"`{field}`"):
        evaluate_model.main(["--model", str(folder), "--task", "translation", "--test_file", str(data),
                             "--output_file", str(tmp_path / "results.json")])


# --- weights that do not fit in memory -------------------------------------------------------------------------------


NOT_ENOUGH = r"This config's weights need about [\d.]+ KB \([\d,]+ parameters in float32\), more than the 1\.0 KB of " \
             r"memory available on cpu: lower d_model, encoder_layers / decoder_layers"


@pytest.fixture
def little_memory(monkeypatch):
    """A machine with 1 KB free: the tiny model (about 300 KB of weights) does not fit."""
    monkeypatch.setattr(vaswani.remote_code.loading_checks, "available_memory", lambda device: 1_000)


def test_weights_that_do_not_fit_are_refused_by_from_pretrained(checkpoint, little_memory):
    with pytest.raises(ValueError, match=NOT_ENOUGH):
        AutoModelForSeq2SeqLM.from_pretrained(checkpoint)


def test_weights_that_do_not_fit_are_refused_by_from_config(little_memory):
    with pytest.raises(ValueError, match=NOT_ENOUGH):
        AutoModelForSeq2SeqLM.from_config(tiny_config())


def test_weights_that_do_not_fit_are_refused_before_training(tokenizer, little_memory):
    with pytest.raises(ValueError, match=NOT_ENOUGH):
        build_model(TrainModelArguments(preset="tiny"), TrainDataArguments(max_source_length=64, max_target_length=64),
                    TrainArguments(eval_max_new_tokens=32), tokenizer)


@pytest.mark.parametrize("overrides", [
    {}, {"tie_word_embeddings": False}, {"position_embedding_type": "learned"}, {"position_embedding_type": "relative"},
])
def test_the_estimate_of_the_weights_is_within_ten_percent(overrides):
    config = VaswaniConfig.from_preset("small", **overrides)
    with torch.device("meta"):  # counted, not allocated
        parameters = VaswaniForConditionalGeneration(config).num_parameters()
    assert 0.9 < config.estimated_parameters() / parameters < 1.1


def test_the_memory_check_reads_the_machines_free_memory(checkpoint):
    available = vaswani.remote_code.loading_checks.available_memory(torch.device("cpu"))
    assert available is None or available > 0
    assert vaswani.remote_code.loading_checks.available_memory(torch.device("meta")) is None
    AutoModelForSeq2SeqLM.from_pretrained(checkpoint)  # a tiny model fits


# --- a tokenizer's merges, bounded by its vocabulary ------------------------------------------------------------


def test_merges_beyond_the_vocabulary_are_refused_before_the_tokenizer_is_built(copy_of, data, tmp_path, monkeypatch):
    """A tokenizer.json of 149 MB, its 91 merges repeated to 10 million, took 98 s and 7.6 GB to load: more merges
    than tokens, or a merge of pieces the vocabulary lacks, is refused by name before the tokenizers library builds
    anything; so is a file the memory left could not build."""
    folder = copy_of()
    path = folder / "tokenizer.json"
    content = json.loads(path.read_text())
    merges, vocabulary = content["model"]["merges"], content["model"]["vocab"]
    assert merges, "the test tokenizer must have merges"
    repeated = {**content, "model": {**content["model"], "merges": merges * (len(vocabulary) // len(merges) + 1)}}
    path.write_text(json.dumps(repeated))
    built = []
    monkeypatch.setattr(vaswani.remote_code.tokenization_vaswani.Tokenizer, "from_file",
                        lambda *args: built.append(args))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: its BPE model has [\d,]+ merges for a "
                                         rf"vocabulary of {len(vocabulary):,} tokens"):
        VaswaniTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match="merges for a vocabulary of"):  # and through a command
        command_loaders(folder, data, tmp_path)["evaluate_model"](folder)
    unknown = {**content, "model": {**content["model"], "merges": [*merges[:3], ["no-such", "piece"]]}}
    path.write_text(json.dumps(unknown))
    with pytest.raises(ValueError, match=r"BPE merge 3 \("):
        VaswaniTokenizer.from_pretrained(folder)
    path.write_text(json.dumps(content))
    monkeypatch.setattr(vaswani.remote_code.loading_checks, "cpu_memory_available", lambda: path.stat().st_size * 10)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} \([\d,]+ bytes\) would take about [\d,]+ bytes of "
                                         "memory to build, more than the"):
        VaswaniTokenizer.from_pretrained(folder)
    assert not built


# --- files that are not regular files (issue 67) -----------------------------------------------------------------


UNBLOCKER = """
import os, sys, time
while True:  # until killed
    try:
        os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader yet (ENXIO)
        pass
    time.sleep(0.05)
"""


@contextmanager
def unblocked(fifo):
    """Open `fifo` for writing (and close it) whenever a reader waits on it, until the block ends: a command that
    opens it reads an empty file and fails some other way, instead of waiting forever. From another process: a
    reader blocked in a library that holds the interpreter's lock (safetensors) would stop a thread of this one."""
    process = subprocess.Popen([sys.executable, "-c", UNBLOCKER, str(fifo)])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def make_fifo(path):
    path.unlink()
    os.mkfifo(path)
    return "a FIFO \\(named pipe\\)"


def make_loop(path):
    path.unlink()
    path.symlink_to(path.name)
    return "a loop of symbolic links"


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_checkpoint_file_that_is_a_fifo_is_named_and_never_opened(name, command, checkpoint, copy_of, data,
                                                                     tmp_path):
    """A FIFO named model.safetensors blocked evaluate_model and the pipelines forever in open(); one named
    config.json or tokenizer.json gave "Unrecognized model" or "no tokenizer.json"."""
    folder = copy_of()
    path = folder / name
    described = make_fifo(path)
    with unblocked(path), pytest.raises(OSError, match=rf"^{re.escape(str(path))} is {described}, not a regular "
                                                       r"file: a model's files are read only as regular files"):
        command_loaders(checkpoint, data, tmp_path)[command](folder)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json"])
def test_a_checkpoint_file_that_is_a_loop_of_links_is_named(name, checkpoint, copy_of, data, tmp_path):
    """(The commands that write compare the folder with their output first: vaswani.output_paths.)"""
    folder = copy_of()
    path = folder / name
    described = make_loop(path)
    with pytest.raises(OSError, match=rf"^{re.escape(str(path))} is {described}, not a regular file"):
        command_loaders(checkpoint, data, tmp_path)["pipeline"](folder)


@pytest.mark.parametrize("load", [VaswaniForConditionalGeneration.from_pretrained, AutoTokenizer.from_pretrained,
                                  VaswaniTokenizer.from_pretrained])
def test_the_classes_refuse_a_fifo_in_the_folder(load, copy_of):
    folder = copy_of()
    make_fifo(folder / "model.safetensors")
    with unblocked(folder / "model.safetensors"), pytest.raises(OSError, match="is a FIFO"):
        load(folder)


# --- a tokenizer whose regular expressions backtrack without end (issue 67) -----------------------------------------


def with_pre_tokenizer_regex(folder, pattern):
    """Put a Split on `pattern` first in the folder's pre-tokenizer."""
    path = folder / "tokenizer.json"
    content = json.loads(path.read_text())
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    content["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, content["pre_tokenizer"]]}
    path.write_text(json.dumps(content))
    return path


@pytest.mark.parametrize("pattern, refusal", [
    ("(a+)+$", r"repeats a group that itself repeats \('\(a\+\)'\), which can take exponential time"),
    ("(?:\\w*\\s?)*x", r"repeats a group that itself repeats"),
    ("(a|a)*$", r"a regular expression of its steps \('\(a\|a\)\*\$', .*\) fails on the 65-character text"),
], ids=["nested-plus", "nested-star", "overlapping-alternatives"])
def test_a_catastrophic_regex_in_a_tokenizer_is_refused_at_load(pattern, refusal, checkpoint, copy_of, data,
                                                                  tmp_path):
    """`(a+)+$` was accepted, and a 25-character text then panicked the tokenizer (in the web demo that request
    never got an answer)."""
    folder = copy_of()
    path = with_pre_tokenizer_regex(folder, pattern)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: .*{refusal}"):
        AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match=refusal) as refused:  # and a command, in one line
        command_loaders(checkpoint, data, tmp_path)["evaluate_model"](folder)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("pattern", [
    # GPT-2's and Llama 3's pre-tokenizers, and the project's own
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "\r?\n", "\u2581(?=[\\s\\S])", "(?>a+)+", "(ab){2}c+", "[(a+)]+",
])
def test_regexes_of_real_tokenizers_pass(pattern, copy_of):
    folder = copy_of()
    with_pre_tokenizer_regex(folder, pattern)
    AutoTokenizer.from_pretrained(folder)("A man is riding a horse, 25 times.")


def test_the_shipped_tokenizers_pass_the_regex_check_in_milliseconds():
    import time

    from vaswani.remote_code.tokenization_vaswani import check_regexes

    for path in sorted((REPO / "results").glob("*/model/tokenizer.json")):
        content = json.loads(path.read_text())
        started = time.perf_counter()
        check_regexes(path, content)
        assert time.perf_counter() - started < 0.5, path
