"""The pipelines on bad input (None, an empty list or string, non-strings, settings generate cannot use, texts over the
model's length, a model with a NaN weight) and on dialogues as the summarization pipeline meets them. The models are
conftest.py's."""

import copy
import json
import re

import pytest
import torch
import transformers

from helpers import PAIRS, spread_weights, tiny_config
from pipeline_helpers import SOURCES, generate_texts
from vaswani import VaswaniForConditionalGeneration
from vaswani.pipelines import SummarizationPipeline, TranslationPipeline, pipeline


# --- bad input -------------------------------------------------------------------------------------------------------


@pytest.fixture
def translate(translator, tokenizer) -> TranslationPipeline:
    return TranslationPipeline(model=translator, tokenizer=tokenizer)


def test_none_is_a_clear_error(translate):
    with pytest.raises(TypeError, match="string or a list of strings, got None"):
        translate(None)
    with pytest.raises(TypeError, match="Input 1 must be a string, got NoneType"):
        translate([SOURCES[0], None])


def test_an_empty_list_gives_an_empty_list(translate):
    assert translate([]) == []
    assert translate([], batch_size=4) == []


def test_a_lone_surrogate_and_a_zero_beam_count_are_clear_errors(translate):
    with pytest.raises(ValueError, match=r"Input 1 is not valid text \(surrogates not allowed: '\\udc80'\)"):
        translate([SOURCES[0], "caf\udc80"], batch_size=2)
    for name in ("num_beams", "num_return_sequences", "max_new_tokens"):
        with pytest.raises(ValueError, match=f"{name} must be a whole number >= 1, got 0"):
            translate(SOURCES[0], **{name: 0})


def test_a_generation_value_generate_cannot_use_is_one_line(translate):
    """A NaN length penalty decoded without a word."""
    for settings, message in (({"length_penalty": float("nan")}, "length_penalty must be a finite number, got nan"),
                              ({"num_beams": 2, "length_penalty": float("inf")}, "length_penalty must be a finite "
                                                                                 "number, got inf"),
                              ({"temperature": 0.0, "do_sample": True}, "temperature must be a finite number above "
                                                                        "0, got 0.0")):
        with pytest.raises(ValueError, match=re.escape(message)):
            translate(SOURCES[0], **settings)


def test_a_generation_config_with_a_negative_beam_count_is_one_line_in_both_pipelines(checkpoints, tmp_path):
    """`num_beams: -3` in a folder's generation_config.json: a 41-line traceback through either pipeline."""
    import shutil

    folder = shutil.copytree(checkpoints["seq2seq"], tmp_path / "seq2seq")
    settings = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**settings, "num_beams": -3}))
    message = ("the model's generation config (generation_config.json): num_beams must be a whole number >= 1, got "
               "-3.")
    for build in (lambda: pipeline("translation", model=str(folder)),
                  lambda: transformers.pipeline("translation", model=str(folder), trust_remote_code=True)):
        with pytest.raises(ValueError) as refused:
            build()(SOURCES[0])
        assert str(refused.value) == message


def test_a_model_with_a_nan_weight_warns_once_that_its_outputs_are_meaningless(translator, tokenizer, caplog):
    import logging

    model = copy.deepcopy(translator)
    with torch.no_grad():
        model.model.encoder.layers[0].self_attn.q_proj.weight[0, 0] = float("nan")
    translate = TranslationPipeline(model=model, tokenizer=tokenizer)
    caplog.set_level(logging.WARNING)
    translate(SOURCES[:2], batch_size=2, max_new_tokens=5)
    translate(SOURCES[:2], batch_size=2, max_new_tokens=5)
    assert caplog.text.count("The model's logits hold nan or inf") == 1


@pytest.mark.parametrize("value", [42, 3.5, b"bytes", {"text": "A man."}])
def test_a_non_string_is_a_clear_error(translate, value):
    with pytest.raises(TypeError, match=f"must be a string, got {type(value).__name__}"):
        translate(value)
    with pytest.raises(TypeError, match=f"Input 1 must be a string, got {type(value).__name__}"):
        translate([SOURCES[0], value], batch_size=2)


def test_an_empty_string_gives_an_empty_text(translate, translator):
    assert translate("") == [{"translation_text": ""}]
    assert translate("   ") == [{"translation_text": ""}]
    assert translate(["", SOURCES[0], ""], batch_size=3) == [
        {"translation_text": ""},
        {"translation_text": PAIRS[0][1]},
        {"translation_text": ""},
    ]
    [empty] = translate("", return_tensors=True)
    start, end = translator.config.decoder_start_token_id, translator.config.eos_token_id
    assert empty["translation_token_ids"].tolist() == [start, end]


def test_text_over_the_maximum_length_is_truncated_with_one_warning(translate, translator, tokenizer):
    limit = translator.config.max_position_embeddings  # 128, which the tokenizer allows as well
    long_text = " ".join(["horse"] * 5000)
    with pytest.warns(UserWarning, match=f"longer than the {limit} tokens") as caught:
        first = translate(long_text, max_new_tokens=5, return_tensors=True)
        second = translate([long_text, long_text], batch_size=2, max_new_tokens=5)
    assert len([w for w in caught if "truncated" in str(w.message)]) == 1
    assert isinstance(second[0]["translation_text"], str)
    truncated = tokenizer([long_text], truncation=True, max_length=limit, return_tensors="pt")
    assert truncated["input_ids"].shape[1] == limit
    expected = translator.generate(**truncated, max_new_tokens=5)[0].tolist()
    assert first[0]["translation_token_ids"].tolist() == expected
    with pytest.raises(ValueError, match=f"longer than the {limit} tokens.*truncation=True"):
        translate(long_text, truncation=False)


def test_generation_longer_than_the_model_allows_is_a_clear_error(translate, translator):
    limit = translator.config.max_position_embeddings
    with pytest.raises(ValueError, match=f"max_new_tokens=500 .*max_position_embeddings={limit}"):
        translate(SOURCES[0], max_new_tokens=500)
    with pytest.raises(ValueError, match=f"max_length=900 .*max_position_embeddings={limit}"):
        translate(SOURCES[0], max_length=900)
    # without any length setting, the paper's bound (input length + 50) is kept within the model's positions
    untrained = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=translator.config.vocab_size)))
    pipe = TranslationPipeline(model=untrained.eval(), tokenizer=translate.tokenizer)
    source = " ".join(["horse"] * 50)
    assert limit - 50 < len(translate.tokenizer(source)["input_ids"]) <= limit
    [result] = pipe(source, return_tensors=True)
    assert len(result["translation_token_ids"]) == limit  # the untrained model never ends: the bound stops it


# --- dialogues, as the summarization pipeline meets them -------------------------------------------------------------

DIALOGUE = "Anna: Are you coming tonight?\nBen: Yes, at 8.\nAnna: Great, see you!"


def test_summarizing_an_empty_dialogue_gives_an_empty_summary(translator, tokenizer):
    summarize = SummarizationPipeline(model=translator, tokenizer=tokenizer)
    assert summarize("") == [{"summary_text": ""}]
    assert summarize(["\n\n", DIALOGUE], batch_size=2)[0] == {"summary_text": ""}


def test_a_dialogue_in_another_script_is_summarized_like_any_other(translator, tokenizer):
    summarize = SummarizationPipeline(model=translator, tokenizer=tokenizer)
    dialogue = "Анна: Ты придёшь сегодня?\nБорис: Да, в 8.\nアンナ: じゃあね!"
    ids = tokenizer(dialogue)["input_ids"]
    assert tokenizer.unk_token_id not in ids  # spelled in bytes where the vocabulary lacks the characters
    [result] = summarize(dialogue, num_beams=2, max_new_tokens=12)
    assert result["summary_text"] == generate_texts(translator, tokenizer, [dialogue], num_beams=2, max_new_tokens=12)[0]


def test_a_dialogue_longer_than_the_model_accepts_is_cut_with_one_warning(translator, tokenizer):
    summarize = SummarizationPipeline(model=translator, tokenizer=tokenizer)
    limit = translator.config.max_position_embeddings
    long_dialogue = "\n".join([DIALOGUE] * 200)
    assert len(tokenizer(long_dialogue)["input_ids"]) > limit
    with pytest.warns(UserWarning, match=f"longer than the {limit} tokens") as caught:
        outputs = summarize([long_dialogue, long_dialogue, DIALOGUE], batch_size=3, max_new_tokens=6)
    assert len([w for w in caught if "truncated" in str(w.message)]) == 1
    truncated = tokenizer([long_dialogue], truncation=True, max_length=limit, return_tensors="pt")
    expected = tokenizer.decode(translator.generate(**truncated, max_new_tokens=6)[0], skip_special_tokens=True)
    assert outputs[0] == outputs[1] == {"summary_text": expected}
