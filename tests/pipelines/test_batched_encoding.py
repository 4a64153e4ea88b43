"""The generation pipelines encode a list of texts with one tokenizer call (`preprocess_many`), giving each text the
inputs `preprocess` gives it alone: the same ids (language tag, truncation, blank texts), the same refusals; a list
given to the pipeline is encoded so, once per call, with the call's arguments."""

import pytest
import torch

from helpers import PAIRS, tiny_config
from vaswani import VaswaniForConditionalGeneration, VaswaniTokenizer
from vaswani.pipelines import SummarizationPipeline, TranslationPipeline


LONG = " ".join(source for source, _ in PAIRS) * 4  # longer than the tiny model's positions
TEXTS = [source for source, _ in PAIRS] + ["", "   ", LONG, ">>fr<< " + PAIRS[0][0], "Ünïcödé — ✓ 😀"]


def _same_inputs(first: dict, second: dict) -> bool:
    return (set(first) == set(second) and torch.equal(first["input_ids"], second["input_ids"])
            and torch.equal(first["attention_mask"], second["attention_mask"])
            and first["source_is_blank"] == second["source_is_blank"])


@pytest.fixture(scope="module")
def tagged():
    texts = [text for pair in PAIRS for text in pair]
    return VaswaniTokenizer.train_from_texts(texts, vocab_size=400, min_frequency=1, language_codes=["de", "fr"])


@pytest.mark.parametrize("kind", ["translation", "summarization", "tagged"])
def test_a_list_is_encoded_as_each_text_alone(kind, tokenizer, tagged):
    vocabulary = tagged if kind == "tagged" else tokenizer
    config = tiny_config(vocab_size=len(vocabulary), source_lang="en", max_position_embeddings=32,
                         target_lang=None if kind == "tagged" else "de")
    model = VaswaniForConditionalGeneration(config).eval()
    make = SummarizationPipeline if kind == "summarization" else TranslationPipeline
    pipe = make(model=model, tokenizer=vocabulary)
    calls = [{}] if kind != "tagged" else [{"tgt_lang": "fr"}, {"tgt_lang": "de"}]
    for params in calls:
        preprocess = pipe._sanitize_parameters(**params)[0]
        pipe._warned_about_truncation = False  # (the warning is shown once per pipeline)
        with pytest.warns(UserWarning, match="was longer than the 32 tokens"):
            together = pipe.preprocess_many(TEXTS, **preprocess)
        alone = [pipe.preprocess(text, **preprocess) for text in TEXTS]
        assert len(together) == len(TEXTS)
        assert all(_same_inputs(first, second) for first, second in zip(together, alone))
        assert together[TEXTS.index(LONG)]["input_ids"].shape[1] == 32  # cut to what the model accepts
        assert [inputs["source_is_blank"] for inputs in together][-5:-3] == [True, True]
        if kind == "tagged":
            assert {inputs["input_ids"][0, 0].item() for inputs in together} == {
                vocabulary.convert_tokens_to_ids(f">>{params['tgt_lang']}<<")}
    with pytest.raises(ValueError, match="longer than the 32 tokens"):
        pipe.preprocess_many([PAIRS[0][0], LONG], truncation=False)
    with pytest.raises(TypeError, match="must be a string, got int"):
        pipe.preprocess_many([PAIRS[0][0], 3])


def test_a_list_given_to_the_pipeline_is_encoded_once_with_the_calls_arguments(tokenizer, monkeypatch):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en",
                                                        target_lang="de")).eval()
    translate = TranslationPipeline(model=model, tokenizer=tokenizer, max_new_tokens=5)
    texts = [source for source, _ in PAIRS][:6] + [""]
    one_by_one = [translate(text, return_tensors=True)[0]["translation_token_ids"].tolist() for text in texts]
    encoded = []
    original = translate.preprocess_many
    monkeypatch.setattr(translate, "preprocess_many",
                        lambda texts, **params: encoded.append((list(texts), params)) or original(texts, **params))
    for batch_size in (1, 4):
        encoded.clear()
        results = translate(texts, batch_size=batch_size, return_tensors=True, truncation=True)
        assert [result["translation_token_ids"].tolist() for result in results] == one_by_one
        assert len(encoded) == 1 and sorted(encoded[0][0]) == sorted(texts)
        assert encoded[0][1]["truncation"] is True and "tag_ids" in encoded[0][1]
    with pytest.raises(ValueError, match="longer than"):
        translate([texts[0], LONG * 4], batch_size=2, truncation=False)
