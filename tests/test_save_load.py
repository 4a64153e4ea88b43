"""The files a saved model carries, together: saved and reloaded, loaded with `trust_remote_code=True` where the package
is missing, saved again with the package's code, damaged weights named."""

import json
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

import vaswani
import vaswani.pipelines
from helpers import random_batch, run_isolated, spread_weights, tiny_config
from vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)


HEADS = [
    (VaswaniModel, AutoModel, {}),
    (VaswaniForConditionalGeneration, AutoModelForSeq2SeqLM, {}),
    (VaswaniForSequenceClassification, AutoModelForSequenceClassification, {"num_labels": 3}),
    (VaswaniForTokenClassification, AutoModelForTokenClassification, {"num_labels": 5}),
]
CODE_FILES = {"configuration_vaswani.py", "modeling_vaswani.py", "tokenization_vaswani.py"}


def outputs_of(model, ids, mask):
    if isinstance(model, VaswaniModel):
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :4]).last_hidden_state
    return model(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("model_class, auto_class, extra", HEADS, ids=[h[0].__name__ for h in HEADS])
def test_round_trip_in_safetensors(model_class, auto_class, extra, tmp_path):
    torch.manual_seed(0)
    model = spread_weights(model_class(tiny_config(position_embedding_type="relative", **extra))).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not (tmp_path / "pytorch_model.bin").exists()
    assert CODE_FILES <= {p.name for p in tmp_path.iterdir()}

    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class
    before, after = model.state_dict(), loaded.state_dict()
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name
    shared = loaded.get_input_embeddings().weight
    encoder = loaded.get_encoder() if hasattr(loaded, "get_encoder") else loaded.model.encoder
    assert encoder.embeddings.embed_tokens.weight is shared
    if isinstance(loaded, VaswaniForConditionalGeneration):
        assert loaded.lm_head.weight is shared
    ids, mask = random_batch()
    assert torch.equal(outputs_of(model, ids, mask), outputs_of(loaded, ids, mask))


def test_generations_are_identical_after_reload(tmp_path):
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config())).eval()
    ids, mask = random_batch()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    for settings in (dict(), dict(num_beams=3)):
        assert torch.equal(
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, **settings),
            loaded.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, **settings),
        )
    saved_generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert saved_generation["decoder_start_token_id"] == 1


def test_saved_config_maps_every_auto_class(tmp_path):
    VaswaniForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {
        "AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM", "AutoModelForSequenceClassification",
        "AutoModelForTokenClassification", "AutoTokenizer",
    }
    assert isinstance(AutoConfig.from_pretrained(tmp_path), type(tiny_config()))


@pytest.fixture(scope="module")
def fresh_process(tokenizer, tmp_path_factory) -> dict:
    """Two saved checkpoints used in one fresh process without the package (one interpreter's imports, about 5 s
    here, for the two tests that read it): "loaded", a tiny translator loaded through every Auto class, with the
    ids it generates in this process; "saved again", a checkpoint loaded through its remote code and saved again."""
    folder, first, second = (tmp_path_factory.mktemp(name) for name in ("checkpoint", "first", "second"))
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    text = "A man is riding a horse. 😀"
    expected_ids = model.generate(**tokenizer([text], return_tensors="pt"), max_new_tokens=8, num_beams=2)[0].tolist()
    VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en", target_lang="de")
                                    ).save_pretrained(first)
    tokenizer.save_pretrained(first)
    stdout = run_isolated(
        f"""
        import json, os, torch
        from transformers import (AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification,
                                  AutoModelForTokenClassification, AutoTokenizer, pipeline)
        folder = {str(folder)!r}
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        inputs = tokenizer([{text!r}], return_tensors="pt")
        result = {{
            "tokenizer": type(tokenizer).__name__,
            "config": type(AutoConfig.from_pretrained(folder, trust_remote_code=True)).__name__,
            "generated": model.generate(**inputs, max_new_tokens=8, num_beams=2)[0].tolist(),
            "decoded": tokenizer.decode(inputs["input_ids"][0], skip_special_tokens=True),
            "modules": [type(model).__module__],
        }}
        for auto in (AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification):
            loaded = auto.from_pretrained(folder, trust_remote_code=True, num_labels=3)
            result[auto.__name__] = type(loaded).__name__
        print(json.dumps(result))

        model = AutoModelForSeq2SeqLM.from_pretrained({str(first)!r}, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained({str(first)!r}, trust_remote_code=True)
        model.save_pretrained({str(second)!r})
        tokenizer.save_pretrained({str(second)!r})
        translator = pipeline("translation_en_to_de", model={str(second)!r}, trust_remote_code=True)
        print(json.dumps({{"files": sorted(os.listdir({str(second)!r})), "pipeline": type(translator).__name__,
                           "output": translator("A man.", max_new_tokens=3)}}))
        """
    )
    loaded, saved_again = (json.loads(line) for line in stdout.strip().splitlines()[-2:])
    return {"loaded": loaded, "expected_ids": expected_ids, "text": text, "saved again": saved_again,
            "first": first}


def test_checkpoint_loads_with_remote_code_where_the_package_is_missing(fresh_process):
    result = fresh_process["loaded"]
    assert result["tokenizer"] == "VaswaniTokenizer" and result["config"] == "VaswaniConfig"
    assert result["modules"][0].startswith("transformers_modules.")  # the checkpoint's copy of the code
    assert result["generated"] == fresh_process["expected_ids"]
    assert result["decoded"] == fresh_process["text"]
    assert result["AutoModel"] == "VaswaniModel"
    assert result["AutoModelForSequenceClassification"] == "VaswaniForSequenceClassification"
    assert result["AutoModelForTokenClassification"] == "VaswaniForTokenClassification"


def test_encoder_decoder_weights_carry_over_to_the_classification_heads(tmp_path, caplog):
    torch.manual_seed(0)
    seq2seq = spread_weights(VaswaniForConditionalGeneration(tiny_config()))
    seq2seq.save_pretrained(tmp_path)
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    assert torch.equal(classifier.model.shared.weight, seq2seq.model.shared.weight)
    assert torch.equal(
        classifier.model.decoder.layers[1].encoder_attn.v_proj.weight,
        seq2seq.model.decoder.layers[1].encoder_attn.v_proj.weight,
    )
    tagger = AutoModelForTokenClassification.from_pretrained(tmp_path, num_labels=4)
    assert torch.equal(
        tagger.model.encoder.layers[0].feed_forward.fc1.weight, seq2seq.model.encoder.layers[0].feed_forward.fc1.weight
    )
    assert tagger.model.encoder.embeddings.embed_tokens.weight is tagger.model.shared.weight


def test_missing_weights_file_is_named(tmp_path):
    VaswaniForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(OSError, match="model.safetensors"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("keep", [0.5, 0.001])
def test_truncated_weights_file_is_named(tmp_path, keep):
    VaswaniForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: max(1, int(len(data) * keep))])
    with pytest.raises(OSError, match=r"model\.safetensors.*truncated"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


def test_tokenizer_and_model_load_together_from_one_folder(tokenizer, tmp_path):
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert type(AutoTokenizer.from_pretrained(tmp_path)).__name__ == "VaswaniTokenizer"
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path).config.vocab_size == len(tokenizer)


def test_a_checkpoint_saved_again_through_remote_code_keeps_its_pipeline_code(fresh_process):
    assert (fresh_process["first"] / "pipeline_vaswani.py").is_file()
    result = fresh_process["saved again"]
    assert "pipeline_vaswani.py" in result["files"] and "tokenization_vaswani.py" in result["files"]
    assert result["pipeline"] == "TranslationPipeline" and set(result["output"][0]) == {"translation_text"}


def test_a_checkpoint_saved_again_from_an_older_folder_carries_the_packages_code(tmp_path):
    """Re-saving a model loaded from a folder whose code files are older (a shipped model being refreshed) writes
    the installed package's pipeline and tokenizer code, not the folder's."""
    old, new = tmp_path / "old", tmp_path / "new"
    VaswaniForConditionalGeneration(tiny_config()).save_pretrained(old)
    for name in ("pipeline_vaswani.py", "tokenization_vaswani.py"):
        (old / name).write_text("# an older version\n")
    VaswaniForConditionalGeneration.from_pretrained(old).save_pretrained(new)
    for name in ("tokenization_vaswani.py", "pipeline_vaswani.py"):
        assert (new / name).read_bytes() == (Path(vaswani.remote_code.__file__).parent / name).read_bytes(), name


def test_saved_weights_are_as_readable_as_the_other_files(tmp_path):
    # transformers writes model.safetensors through a private (0600) temporary file; a served folder needs it readable
    model = VaswaniForConditionalGeneration(tiny_config())
    model.save_pretrained(tmp_path)
    modes = {path.name: path.stat().st_mode & 0o777 for path in tmp_path.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes
