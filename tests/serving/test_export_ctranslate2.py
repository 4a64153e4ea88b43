"""The CTranslate2 export (vaswani.serving.ctranslate2_export, scripts/export_ctranslate2.py): the exported model
decodes to the tokens of `generate()` in float32, for the shipped en->de model (relative positions) on real sentences
and for tiny models of every position type and LayerNorm placement; what cannot be exported is refused; the usage
example of scripts/serving.md runs.

ctranslate2 is an optional dependency (`pip install 'vaswani-transformer[ctranslate2]'`): without it these tests skip.
"""

import json
import re
import sys

import pytest
import torch

from helpers import (
    PAIRS,
    REPO,
    command_in_process,
    english_sentences,
    load_script,
    run_isolated,
    spread_weights,
    tiny_config,
)

ctranslate2 = pytest.importorskip(
    "ctranslate2",
    reason="ctranslate2 is an optional dependency (pip install 'vaswani-transformer[ctranslate2]'); the export "
    "cannot be tested without it",
)

from transformers import AutoTokenizer  # noqa: E402

from vaswani import (  # noqa: E402
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniTokenizer,
)
from vaswani.serving import ctranslate2_export  # noqa: E402
from vaswani.serving.ctranslate2_export import export_to_ctranslate2  # noqa: E402
from vaswani.runs.manifests import MANIFEST_FILE  # noqa: E402

export_ctranslate2 = load_script("export_ctranslate2")


SHIPPED = REPO / "results" / "multi30k_en_de" / "model"
needs_shipped_model = pytest.mark.skipif(
    not (SHIPPED / "model.safetensors").is_file(), reason=f"needs the shipped model in {SHIPPED}"
)


def generated_ids(model, tokenizer, texts, **generate_kwargs) -> list[list[int]]:
    """`generate()`'s tokens for each text, without the start token, the end token and batch padding."""
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**batch, **generate_kwargs)
    eos, pad = model.generation_config.eos_token_id, model.generation_config.pad_token_id
    results = []
    for row in output.tolist():
        ids = row[1:]
        if eos in ids:
            ids = ids[: ids.index(eos)]
        results.append([token for token in ids if token != pad])
    return results


def ct2_ids(translator, vocabulary, sources, **options) -> list[list[int]]:
    """CTranslate2's tokens as ids of the exported vocabulary (spare ids of a model have placeholder names, which the
    tokenizer does not know)."""
    index = {token: position for position, token in enumerate(vocabulary)}
    results = translator.translate_batch(sources, **options)
    return [[index[token] for token in result.hypotheses[0]] for result in results]


def exported_vocabulary(folder) -> list[str]:
    return json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------------
# The shipped en->de model on real sentences
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shipped model, its tokenizer, and its float32 export with a CTranslate2 translator."""
    if not (SHIPPED / "model.safetensors").is_file():
        pytest.skip(f"needs the shipped model in {SHIPPED}")
    folder = export_to_ctranslate2(SHIPPED, tmp_path_factory.mktemp("ct2") / "multi30k_en_de")
    model = VaswaniForConditionalGeneration.from_pretrained(SHIPPED).eval()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    translator = ctranslate2.Translator(str(folder), device="cpu", compute_type="float32", intra_threads=2)
    return model, tokenizer, folder, translator


@needs_shipped_model
@pytest.mark.parametrize("num_beams", [1, 4])
def test_shipped_model_decodes_to_the_tokens_of_generate(shipped, num_beams):
    """Greedy and beam search, token for token, on real sentences: the relative positions, post-LayerNorm, tied
    embeddings and special tokens of the shipped model are all carried over exactly. CTranslate2's beam search stops
    once `beam_size` hypotheses have finished (transformers' early_stopping=True), and its minimum length must be set
    to transformers' 0 (its default of 1 keeps an early end token out of the finished hypotheses)."""
    model, tokenizer, folder, translator = shipped
    texts = english_sentences(8)
    beam_kwargs = dict(length_penalty=1.0, early_stopping=True) if num_beams > 1 else {}
    expected = generated_ids(model, tokenizer, texts, num_beams=num_beams, max_new_tokens=80, **beam_kwargs)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts).input_ids]
    got = ct2_ids(
        translator, exported_vocabulary(folder), sources, beam_size=num_beams, length_penalty=1.0,
        max_decoding_length=80, min_decoding_length=0,
    )
    assert got == expected


def test_translate_options_fill_what_a_generation_config_leaves_unset():
    from transformers import GenerationConfig

    options = ctranslate2_export.translate_options(GenerationConfig(num_beams=5, max_new_tokens=80))
    assert options == {"beam_size": 5, "length_penalty": 1.0, "max_decoding_length": 80, "min_decoding_length": 0}


@needs_shipped_model
def test_translate_options_reproduce_the_generation_config(shipped):
    """`translate_options.json` is the model's generation config (beam 5, at most 80 new tokens, length penalty 1)
    in CTranslate2's terms, and decoding with it gives generate()'s tokens with those defaults."""
    model, tokenizer, folder, translator = shipped
    options = json.loads((folder / ctranslate2_export.OPTIONS_FILE).read_text(encoding="utf-8"))
    generation = model.generation_config
    assert options == {
        "beam_size": generation.num_beams,
        "length_penalty": generation.length_penalty,
        "max_decoding_length": generation.max_new_tokens,
        "min_decoding_length": 0,
    }
    texts = english_sentences(8)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts).input_ids]
    expected = generated_ids(model, tokenizer, texts, early_stopping=True)
    assert ct2_ids(translator, exported_vocabulary(folder), sources, **options) == expected


@needs_shipped_model
def test_the_tokenizer_is_saved_next_to_the_model(shipped):
    model, tokenizer, folder, _ = shipped
    saved = AutoTokenizer.from_pretrained(folder)
    texts = english_sentences(3)
    assert saved(texts).input_ids == tokenizer(texts).input_ids
    assert exported_vocabulary(folder) == tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert (config["decoder_start_token"], config["eos_token"], config["add_source_eos"]) == ("<s>", "</s>", False)


@needs_shipped_model
def test_the_exported_folder_works_without_this_package(shipped):
    """Where `vaswani` is not installed, the folder's tokenizer loads with trust_remote_code=True (it carries its
    code) and the model translates: what a serving machine needs is the folder, ctranslate2 and transformers."""
    model, tokenizer, folder, translator = shipped
    text = english_sentences(1)[0]
    output = run_isolated(
        f"""
        import ctranslate2
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        translator = ctranslate2.Translator({str(folder)!r}, device="cpu", compute_type="float32")
        ids = tokenizer([{text!r}]).input_ids
        result = translator.translate_batch([tokenizer.convert_ids_to_tokens(ids[0])], beam_size=1)[0]
        print(tokenizer.convert_tokens_to_ids(result.hypotheses[0]))
        """
    )
    (expected,) = generated_ids(model, tokenizer, [text], num_beams=1, max_new_tokens=80)
    assert output.strip() == str(expected)


@needs_shipped_model
def test_int8_export_loads_and_translates(shipped, tmp_path, capsys):
    """Through the script: 8-bit weights, about a quarter of the size; the translations need not be the float32
    ones token for token, but they are translations."""
    _, tokenizer, float32_folder, _ = shipped
    folder = export_ctranslate2.main(
        ["--model", str(SHIPPED), "--output_dir", str(tmp_path / "int8"), "--quantization", "int8"]
    )
    assert "int8 weights" in capsys.readouterr().out
    assert (folder / "model.bin").stat().st_size < 0.4 * (float32_folder / "model.bin").stat().st_size
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=2)
    texts = english_sentences(8)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts).input_ids]
    results = translator.translate_batch(sources, beam_size=4, max_decoding_length=80)
    outputs = [tokenizer.convert_tokens_to_string(result.hypotheses[0]).strip() for result in results]
    assert all(outputs), outputs


# ---------------------------------------------------------------------------------------------------------------
# Every position type and LayerNorm placement, on tiny models
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tagged_tokenizer() -> VaswaniTokenizer:
    """A tokenizer with target-language tags, as a multilingual model has."""
    texts = [text for pair in PAIRS for text in pair]
    return VaswaniTokenizer.train_from_texts(
        texts * 3, vocab_size=600, min_frequency=1, model_max_length=128, language_codes=["de", "fr"]
    )


TINY_VARIANTS = {
    "sinusoidal, post-LN": dict(),
    "learned, pre-LN, gelu": dict(
        position_embedding_type="learned", layer_norm_position="pre", activation_function="gelu"
    ),
    "relative, pre-LN, untied, unequal stacks": dict(
        position_embedding_type="relative", relative_attention_max_distance=2, layer_norm_position="pre",
        decoder_attention_heads=2, decoder_layers=3, encoder_ffn_dim=48, scale_embedding=False,
        tie_word_embeddings=False, activation_function="gelu_new",
    ),
    "relative, post-LN, silu, eps": dict(
        position_embedding_type="relative", relative_attention_max_distance=3, activation_function="silu",
        layer_norm_eps=1e-3,
    ),
}


@pytest.mark.parametrize("overrides", TINY_VARIANTS.values(), ids=TINY_VARIANTS.keys())
def test_tiny_models_match_teacher_forced_and_greedy(overrides, tagged_tokenizer, tmp_path):
    """Teacher-forced log-probabilities (CTranslate2's score_batch) within float32 rounding of the model's, and the
    same greedy tokens, with a target-language tag first in the source and spare vocabulary rows (vocab_size 1000,
    600 tokens). Relative offsets are clipped at 2 or 3 here, so the clipping is exercised."""
    tokenizer = tagged_tokenizer
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(**overrides))).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    folder = export_to_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    translator = ctranslate2.Translator(str(folder), device="cpu", compute_type="float32", intra_threads=2)

    tag = tokenizer.convert_tokens_to_ids(">>de<<")
    sources = [[tag, *tokenizer(source).input_ids] for source, _ in PAIRS[:4]]
    targets = [tokenizer(target).input_ids for _, target in PAIRS[:4]]  # each ends with </s>
    source_tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in sources]
    scored = translator.score_batch(source_tokens, [tokenizer.convert_ids_to_tokens(ids[:-1]) for ids in targets])
    for source, target, result in zip(sources, targets, scored):
        decoder_input = [model.config.decoder_start_token_id, *target[:-1]]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input])).logits
        expected = logits[0].log_softmax(-1)[torch.arange(len(target)), torch.tensor(target)]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, rtol=0, atol=1e-4)

    expected_ids = []
    for source in sources:
        output = model.generate(input_ids=torch.tensor([source]), num_beams=1, do_sample=False, max_new_tokens=20)
        ids = output[0, 1:].tolist()
        expected_ids.append(ids[: ids.index(2)] if 2 in ids else ids)
    got = ct2_ids(
        translator, exported_vocabulary(folder), source_tokens, beam_size=1, max_decoding_length=20,
        min_decoding_length=0,
    )
    assert got == expected_ids


# ---------------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_checkpoint(tokenizer, tmp_path):
    folder = tmp_path / "tiny"
    VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_classifier_is_refused(tokenizer, tmp_path):
    folder = tmp_path / "classifier"
    VaswaniForSequenceClassification(tiny_config(vocab_size=len(tokenizer), num_labels=2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"VaswaniForSequenceClassification \(config.architectures=.*\), not a Vaswani"):
        export_to_ctranslate2(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_another_model_type_and_a_missing_tokenizer_are_refused(tiny_checkpoint, tmp_path):
    other = tmp_path / "bart"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bart", "architectures": ["BartModel"]}))
    with pytest.raises(ValueError, match="holds a 'bart' model"):
        export_to_ctranslate2(other, tmp_path / "out")
    (tiny_checkpoint / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        export_to_ctranslate2(tiny_checkpoint, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        export_to_ctranslate2(tmp_path / "nowhere", tmp_path / "out")


def test_an_existing_output_folder_is_refused_unless_overwritten(tiny_checkpoint, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="--overwrite_output_dir"):
        export_to_ctranslate2(tiny_checkpoint, output)
    # a file of the user's is never replaced, not even with overwrite_output_dir: it is named
    with pytest.raises(FileExistsError, match="holds notes.txt \\(a file\\), which is not a file this project writes"):
        export_to_ctranslate2(tiny_checkpoint, output, overwrite_output_dir=True)
    assert [path.name for path in output.iterdir()] == ["notes.txt"]
    (output / "notes.txt").unlink()
    # a file named as an export's is no proof: only what the folder's manifest lists (an earlier export's) is replaced
    (output / "model.bin").write_text("not an export's")
    with pytest.raises(FileExistsError, match="holds model.bin \\(a file\\), which is not a file this project writes"):
        export_to_ctranslate2(tiny_checkpoint, output, overwrite_output_dir=True)
    (output / "model.bin").unlink()
    export_to_ctranslate2(tiny_checkpoint, output)
    earlier = (output / MANIFEST_FILE).read_text()
    export_to_ctranslate2(tiny_checkpoint, output, overwrite_output_dir=True)
    assert (output / MANIFEST_FILE).read_text() != earlier
    assert (output / "translate_options.json").is_file()
    with pytest.raises(ValueError, match=r" is model_dir \(--model\) .* would delete or overwrite"):
        export_to_ctranslate2(tiny_checkpoint, tiny_checkpoint, overwrite_output_dir=True)
    assert (tiny_checkpoint / "model.safetensors").is_file()


def test_an_output_that_cannot_be_written_is_refused_before_the_conversion(tiny_checkpoint, tmp_path, monkeypatch):
    """A valid 245-character --output_dir: the export is written under a temporary name beside it first, which the
    file system refused after the whole conversion; a disk without room for the weights, likewise."""
    from collections import namedtuple

    import vaswani.serving.exporting

    converted = []
    monkeypatch.setattr(ctranslate2_export, "build_spec", lambda *args: converted.append(1))
    output = tmp_path / ("x" * 245)
    with pytest.raises(ValueError, match=rf"^output_dir \(--output_dir\) {re.escape(str(output))}: its name is 245 "
                                         r"bytes long, .* Give a name of at most 223 bytes; nothing was done\.$"):
        export_to_ctranslate2(tiny_checkpoint, output)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(vaswani.serving.exporting.check_output_writable.__globals__["shutil"], "disk_usage",
                        lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(OSError, match=r"has 1\.0 KB free, and the output needs at least [\d.]+ KB"):
        export_to_ctranslate2(tiny_checkpoint, tmp_path / "out")
    assert not converted and not output.exists() and not (tmp_path / "out").exists()


def test_the_script_names_a_bad_argument(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        export_ctranslate2.main(
            ["--model", str(tiny_checkpoint), "--output_dir", str(tmp_path / "out"), "--quantization", "int4"]
        )
    assert "invalid choice: 'int4'" in capsys.readouterr().err
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("")
    result = command_in_process(REPO / "scripts" / "export_ctranslate2.py",
                                ["--model", tiny_checkpoint, "--output_dir", tmp_path / "taken"])
    assert result.returncode == 1
    assert "export_ctranslate2.py: error: output_dir" in result.stderr and "Traceback" not in result.stderr


def test_without_ctranslate2_the_error_says_how_to_install_it(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 -> ImportError
    with pytest.raises(ImportError, match=re.escape("pip install 'vaswani-transformer[ctranslate2]'")):
        export_to_ctranslate2(tiny_checkpoint, tmp_path / "out")


# ---------------------------------------------------------------------------------------------------------------
# The usage example of scripts/serving.md ("Serving fast", where the README points)
# ---------------------------------------------------------------------------------------------------------------


def serving_fast_section(guide: str) -> str | None:
    """The "Serving fast" section of scripts/serving.md, from its CTranslate2 part on where it has one."""
    match = re.search(r"^## Serving fast\s*$(.*?)(?=^## |\Z)", guide, flags=re.MULTILINE | re.DOTALL)
    return match.group(1).split("### In CTranslate2", 1)[-1] if match else None


def first_block(section: str, language: str) -> str | None:
    match = re.search(rf"^```{language}\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    return match.group(1) if match else None


@needs_shipped_model
def test_guide_usage_example_round_trip(tmp_path, capsys, monkeypatch):
    """The export command of scripts/serving.md's "Serving fast" section, then its Python example, with the folder it
    names replaced by a temporary one: it prints one translation per input."""
    section = serving_fast_section((REPO / "scripts" / "serving.md").read_text(encoding="utf-8"))
    assert section is not None and first_block(section, "python"), (
        "scripts/serving.md should have a '## Serving fast' section with a ```python block"
    )
    command, example = first_block(section, "bash"), first_block(section, "python")
    output_dir = re.search(r"--output_dir\s+(\S+)", command or "")
    assert output_dir, "the section's ```bash block should export with --output_dir"
    folder = tmp_path / "exported"
    model = re.search(r"--model\s+(\S+)", command)
    export_ctranslate2.main(["--model", str(REPO / model.group(1)), "--output_dir", str(folder)])
    capsys.readouterr()

    monkeypatch.chdir(REPO)
    exec(compile(example.replace(output_dir.group(1), str(folder)), "scripts/serving.md (Serving fast)", "exec"), {})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert printed and all(re.search(r"\w", line) for line in printed), printed
