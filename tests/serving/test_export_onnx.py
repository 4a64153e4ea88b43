"""The ONNX export and its decoding (vaswani.serving.onnx_export and onnx_generation, scripts/export_onnx.py):
onnxruntime's decoding with the encoder graph and the decoder graph with a cache gives the tokens of
`generate(do_sample=False)`, token for token, greedy (with logits within 1e-4 of PyTorch's) and beam search with the
same settings, for the shipped en->de model (sinusoidal positions, post-LayerNorm) on real sentences and for a tiny
pre-LayerNorm model with learned positions; what cannot be exported is refused.

onnx, onnxscript and onnxruntime are optional dependencies (`pip install 'vaswani-transformer[onnx]'`): without
them these tests skip.
"""

import json
import re
import shutil
import sys

import numpy as np
import pytest
import torch

from helpers import PAIRS, REPO, command_in_process, english_sentences, load_script, tiny_config

SKIP_REASON = (
    "is an optional dependency (pip install 'vaswani-transformer[onnx]'); the ONNX export cannot be tested without it"
)
pytest.importorskip("onnx", reason=f"onnx {SKIP_REASON}")
pytest.importorskip("onnxscript", reason=f"onnxscript (the dynamo exporter's ONNX writer) {SKIP_REASON}")
pytest.importorskip("onnxruntime", reason=f"onnxruntime {SKIP_REASON}")

from vaswani import VaswaniForConditionalGeneration, VaswaniForSequenceClassification  # noqa: E402
from vaswani.output_paths import OutputFolder  # noqa: E402
from vaswani.serving.onnx_export import export_to_onnx  # noqa: E402
from vaswani.serving.onnx_generation import OnnxGenerator, onnx_greedy_generate  # noqa: E402

export_onnx = load_script("export_onnx")


SHIPPED = REPO / "results" / "multi30k_en_de" / "model"
needs_shipped_model = pytest.mark.skipif(
    not (SHIPPED / "model.safetensors").is_file(), reason=f"needs the shipped model in {SHIPPED}"
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """PyTorch on one thread, as onnxruntime is run here: small models gain nothing from more, and on a machine that
    other work keeps busy, threads waiting for each other make a second-long test take a minute."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def assert_greedy_matches_generate(model, tokenizer, folder, texts, max_new_tokens, logit_steps):
    """Token ids equal (padding included) and the logits of the first `logit_steps` steps within 1e-4."""
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(
            **batch,
            num_beams=1,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            output_logits=True,
            return_dict_in_generate=True,
        )
    generator = OnnxGenerator(folder, num_threads=1)
    ids, logits = generator.generate(
        batch["input_ids"].numpy(), batch["attention_mask"].numpy(), max_new_tokens, return_logits=True, num_beams=1
    )
    assert ids.tolist() == expected.sequences.tolist()
    for step in range(min(logit_steps, len(logits))):
        decoding = ~(ids[:, 1 : step + 1] == tokenizer.eos_token_id).any(1)  # the inputs that have not ended
        assert np.isnan(logits[step][~decoding]).all() and not np.isnan(logits[step][decoding]).any()
        np.testing.assert_allclose(logits[step][decoding], expected.logits[step].numpy()[decoding], atol=1e-4, rtol=0)
    return ids


# ---------------------------------------------------------------------------------------------------------------
# The shipped en->de model: relative positions, d_model 128
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return export_to_onnx(SHIPPED, tmp_path_factory.mktemp("onnx") / "multi30k_en_de")


@needs_shipped_model
def test_the_export_writes_both_graphs_the_tokenizer_and_the_configs(shipped):
    import onnx

    names = {path.name for path in shipped.iterdir()}
    assert {"encoder.onnx", "decoder.onnx", "tokenizer.json", "config.json", "generation_config.json"} <= names
    decoder = onnx.load(str(shipped / "decoder.onnx"))
    inputs = {
        value.name: [dim.dim_param or dim.dim_value for dim in value.type.tensor_type.shape.dim]
        for value in decoder.graph.input
    }
    assert inputs["input_ids"] == ["batch", "decoder_sequence"]
    assert inputs["past_key_values.3.decoder.key"] == ["batch", 4, "past_sequence", 32]
    assert inputs["past_key_values.3.encoder.value"] == ["batch", 4, "encoder_sequence", 32]
    outputs = [value.name for value in decoder.graph.output]
    assert outputs[:3] == ["logits", "present.0.decoder.key", "present.0.decoder.value"] and len(outputs) == 1 + 2 * 4
    assert decoder.opset_import[0].version == 20


@needs_shipped_model
def test_shipped_model_greedy_tokens_equal_generate(shipped):
    from transformers import AutoTokenizer

    model = VaswaniForConditionalGeneration.from_pretrained(SHIPPED).eval()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    texts = english_sentences(16)
    ids = assert_greedy_matches_generate(model, tokenizer, shipped, texts, max_new_tokens=60, logit_steps=4)
    assert ids.shape[1] > 8 and len(set(ids[0].tolist())) > 5  # real translations, not a repeated token
    # texts in, texts out: the same tokens, decoded
    translations = OnnxGenerator(shipped, num_threads=1)(texts[:3], num_beams=1)
    assert translations == tokenizer.batch_decode(ids[:3], skip_special_tokens=True)


@needs_shipped_model
@pytest.mark.parametrize(
    "settings",
    [
        {},  # the checkpoint's generation config: 5 beams, length penalty 1.0, up to 80 new tokens
        {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_new_tokens": 40},
        {"num_beams": 3, "num_return_sequences": 2, "no_repeat_ngram_size": 2, "min_new_tokens": 12},
    ],
)
def test_shipped_model_beam_search_tokens_equal_generate(shipped, settings):
    from transformers import AutoTokenizer

    model = VaswaniForConditionalGeneration.from_pretrained(SHIPPED).eval()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    batch = tokenizer(english_sentences(16), return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(**batch, **settings)
    generator = OnnxGenerator(shipped, num_threads=1)
    max_new_tokens = settings.pop("max_new_tokens", None)
    ids = generator.generate(batch["input_ids"].numpy(), batch["attention_mask"].numpy(), max_new_tokens, **settings)
    assert ids.tolist() == expected.tolist()


@needs_shipped_model
def test_several_new_tokens_in_one_decoder_call_equal_the_full_forward(shipped):
    """The causal mask and the relative-position biases of a step that feeds several tokens (past of length 0, then
    a past of 3 tokens and 4 more)."""
    from transformers import AutoTokenizer

    model = VaswaniForConditionalGeneration.from_pretrained(SHIPPED).eval()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    source = tokenizer(english_sentences(3), return_tensors="pt", padding=True)
    targets = ["Ein Mann reitet ein Pferd .", "Zwei Hunde", "Ein Mädchen liest"]
    target = tokenizer(targets, return_tensors="pt", padding=True)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(target["input_ids"])[:, :7]
    with torch.no_grad():
        expected = model(**source, decoder_input_ids=decoder_input_ids).logits.numpy()

    generator = OnnxGenerator(shipped, num_threads=1)
    mask = source["attention_mask"].numpy()
    _, *cross_cache = generator.encode(source["input_ids"].numpy(), mask)
    self_cache = generator.empty_cache(3)
    for start, stop in ((0, 3), (3, 7)):
        logits, self_cache = generator.decode(decoder_input_ids[:, start:stop].numpy(), mask, self_cache, cross_cache)
        np.testing.assert_allclose(logits, expected[:, start:stop], atol=1e-4, rtol=0)
        assert self_cache[0].shape == (3, generator.heads, stop, generator.head_dim)


# ---------------------------------------------------------------------------------------------------------------
# A tiny pre-LayerNorm model with learned positions
# ---------------------------------------------------------------------------------------------------------------


def copying_model(tokenizer, **overrides) -> VaswaniForConditionalGeneration:
    """A tiny model trained for a moment (30 steps, well under a second on one thread) to copy its input. With random
    weights (`spread_weights`) a pre-LN model repeats one token, which would leave the cache nothing to do."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the function fixture `one_torch_thread`
    try:
        torch.manual_seed(0)
        model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **overrides))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        batch = tokenizer([source for source, _ in PAIRS], return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        for _ in range(30):
            model(**batch, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(previous_threads)
    return model.eval()


@pytest.fixture(scope="module")
def tiny(tokenizer, tmp_path_factory):
    """A tiny pre-LN, learned-positions checkpoint and its export. The export replaces an earlier command's folder
    (its manifest lists a stale file), with overwrite_output_dir=True (see
    test_overwrite_output_dir_replaces_the_folder)."""
    root = tmp_path_factory.mktemp("tiny")
    model = copying_model(tokenizer, layer_norm_position="pre", position_embedding_type="learned")
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    output = root / "onnx"
    with OutputFolder(output, {}) as earlier, earlier.publish() as folder:  # an earlier export, with a file this
        (folder / "stale.json").write_text("{}")  # one does not write
    export_to_onnx(root / "model", output, overwrite_output_dir=True)
    return model, root / "model", output


def test_tiny_pre_norm_learned_positions_greedy_tokens_equal_generate(tiny, tokenizer):
    model, _, folder = tiny
    texts = [source for source, _ in PAIRS[:6]]
    ids = assert_greedy_matches_generate(model, tokenizer, folder, texts, max_new_tokens=12, logit_steps=12)
    assert ids.shape[0] == 6 and all(len(set(row[1:].tolist())) > 5 for row in ids)  # varied: not one token repeated
    # token ids in (padded with the pad token), token ids out
    padded = tokenizer(texts, return_tensors="np", padding=True)["input_ids"]
    assert onnx_greedy_generate(folder, padded, max_new_tokens=12, num_threads=1).tolist() == ids.tolist()


def test_overwrite_output_dir_replaces_the_folder(tiny):
    _, _, folder = tiny
    assert not (folder / "stale.json").exists() and (folder / "decoder.onnx").is_file()


def test_the_generation_configs_beam_settings_are_the_defaults(tiny, tokenizer, tmp_path):
    """A folder whose generation config asks for beams, a length penalty and no repeated 2-grams (as the shipped
    summarizer's does) decodes as `generate` with its defaults."""
    model, _, folder = tiny
    copy = shutil.copytree(folder, tmp_path / "copy")
    settings = json.loads((copy / "generation_config.json").read_text())
    beam_settings = {"num_beams": 3, "length_penalty": 1.5, "no_repeat_ngram_size": 2, "max_new_tokens": 12}
    (copy / "generation_config.json").write_text(json.dumps({**settings, **beam_settings}))
    texts = [source for source, _ in PAIRS[:6]]
    with torch.no_grad():
        expected = model.generate(**tokenizer(texts, return_tensors="pt", padding=True), **beam_settings)
    generator = OnnxGenerator(copy, num_threads=1)
    assert generator(texts) == tokenizer.batch_decode(expected, skip_special_tokens=True)
    search = generator.search_settings()
    assert (search.num_beams, search.length_penalty, search.no_repeat_ngram_size, search.max_length) == (3, 1.5, 2, 13)


def test_a_generation_config_with_options_onnx_cannot_follow_is_refused(tiny, tmp_path):
    _, _, folder = tiny
    copy = shutil.copytree(folder, tmp_path / "copy")
    settings = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**settings, "repetition_penalty": 1.2}))
    with pytest.raises(ValueError, match="repetition_penalty=1.2, which the ONNX decoder does not implement"):
        OnnxGenerator(copy, num_threads=1)


def test_inputs_and_targets_longer_than_the_position_table_are_refused(tiny, tokenizer):
    _, _, folder = tiny
    generator = OnnxGenerator(folder, num_threads=1)
    too_long = np.full((1, 129), 5, dtype=np.int64)
    with pytest.raises(ValueError, match="The input is 129 tokens long, but this model accepts at most max_position"):
        generator.generate(too_long, max_new_tokens=3)
    generator.eos_token_ids = []  # never ends: the target reaches the end of the learned position table
    source = tokenizer(["A man is riding a horse."], return_tensors="np")
    with pytest.raises(ValueError, match="The target .* is 129 tokens long, but this model accepts at most"):
        generator.generate(source["input_ids"], source["attention_mask"], max_new_tokens=200)


# ---------------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------------


def test_a_classifier_is_refused(tokenizer, tmp_path):
    folder = tmp_path / "classifier"
    VaswaniForSequenceClassification(tiny_config(vocab_size=len(tokenizer), num_labels=2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(ValueError, match="VaswaniForSequenceClassification .*not a VaswaniForConditionalGeneration"):
        export_to_onnx(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match=r"model_dir \(--model\) .* is not a folder"):
        export_to_onnx(tmp_path / "nowhere", tmp_path / "out")


def test_a_non_empty_output_folder_is_refused(tiny, tmp_path):
    _, checkpoint, _ = tiny
    output = tmp_path / "taken"
    output.mkdir()
    (output / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="--overwrite_output_dir"):
        export_to_onnx(checkpoint, output)
    # a file of the user's is never replaced, not even with overwrite_output_dir: it is named
    with pytest.raises(FileExistsError, match="holds notes.txt \\(a file\\), which is not a file this project writes"):
        export_to_onnx(checkpoint, output, overwrite_output_dir=True)
    assert [path.name for path in output.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match=r" is model_dir \(--model\) .* would delete or overwrite"):
        export_to_onnx(checkpoint, checkpoint, overwrite_output_dir=True)
    assert (checkpoint / "model.safetensors").is_file()
    # the script: one line naming the argument, no traceback
    result = command_in_process(REPO / "scripts" / "export_onnx.py", ["--model", checkpoint, "--output_dir", output])
    assert result.returncode == 1
    assert "export_onnx.py: error: output_dir (--output_dir)" in result.stderr and "Traceback" not in result.stderr


def test_the_script_refuses_a_classifier_by_name(tokenizer, tmp_path):
    folder = tmp_path / "classifier"
    VaswaniForSequenceClassification(tiny_config(vocab_size=len(tokenizer), num_labels=2)).save_pretrained(folder)
    with pytest.raises(ValueError, match=re.escape("config.architectures=['VaswaniForSequenceClassification']")):
        export_onnx.main(["--model", str(folder), "--output_dir", str(tmp_path / "out")])


def test_without_onnxruntime_the_error_says_how_to_install_it(tiny, tmp_path, monkeypatch):
    _, checkpoint, _ = tiny
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(ImportError, match=re.escape("pip install 'vaswani-transformer[onnx]'")):
        export_to_onnx(checkpoint, tmp_path / "out")
