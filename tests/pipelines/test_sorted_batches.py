"""A list given to the pipelines with `batch_size` > 1 runs from the longest text to the shortest and is answered in
the caller's order, with the results of the unsorted call and of one text at a time; generators and `batch_size` 1
run as given."""

import random

import pytest
import torch
import transformers

from helpers import PAIRS, tiny_config
from pipeline_helpers import fitted_translator
from vaswani import VaswaniForConditionalGeneration, VaswaniForTokenClassification, VaswaniTokenizer
from vaswani.pipelines import TokenClassificationPipeline, TranslationPipeline, pipeline
from vaswani.remote_code.pipeline_vaswani import EncodedText


# Texts of shuffled lengths: the sources of PAIRS, an empty text and one of two sentences, in an order that is not by
# length.
TEXTS = [source for source, _ in PAIRS] + ["", f"{PAIRS[0][0]} {PAIRS[1][0]}"]
random.Random(0).shuffle(TEXTS)
BY_LENGTH = sorted(TEXTS, key=len, reverse=True)


def test_the_texts_are_not_in_length_order():
    assert TEXTS != BY_LENGTH


@pytest.fixture(scope="module")
def translator(tokenizer) -> VaswaniForConditionalGeneration:
    """A tiny en->de model fitted to PAIRS in a few seconds: its outputs end at different lengths, with `</s>`."""
    return fitted_translator(tokenizer, PAIRS, steps=40)


def recording(pipe) -> list:
    """The texts `pipe`'s preprocess is given from now on, in the order they come (a text the call encoded with the
    others, `EncodedText`, as its text)."""
    seen, preprocess = [], pipe.preprocess

    def noted_preprocess(text, **params):
        seen.append(text.text if isinstance(text, EncodedText) else text)
        return preprocess(text, **params)

    pipe.preprocess = noted_preprocess
    return seen


@pytest.fixture
def translate(translator, tokenizer, monkeypatch, one_thread):
    """The translation pipeline, with the texts its preprocess is given (`translate.seen`) and the padded width of
    each batch its model generates for (`translate.widths`)."""
    pipe = TranslationPipeline(model=translator, tokenizer=tokenizer)
    pipe.seen, pipe.widths, generate = recording(pipe), [], translator.generate

    def noted_generate(*args, **kwargs):
        pipe.widths.append(kwargs["input_ids"].shape[1])
        return generate(*args, **kwargs)

    monkeypatch.setattr(translator, "generate", noted_generate)
    return pipe


def texts_and_ids(results) -> list:
    return [(result["translation_text"], result["translation_token_ids"].tolist()) for result in results]


def test_a_batched_list_runs_longest_first_and_is_answered_in_its_own_order(translate):
    settings = {"return_tensors": True, "return_text": True, "num_beams": 2}
    one_at_a_time = [translate(text, **settings)[0] for text in TEXTS]
    unsorted = [result for [result] in transformers.Pipeline.__call__(translate, TEXTS, batch_size=3, **settings)]
    assert translate.seen[-len(TEXTS):] == TEXTS  # (the base pipeline's call runs them as given)

    batched = translate(TEXTS, batch_size=3, **settings)
    assert translate.seen[-len(TEXTS):] == BY_LENGTH
    widths = translate.widths[-4:]  # 12 texts, 3 at a time
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    assert texts_and_ids(batched) == texts_and_ids(one_at_a_time) == texts_and_ids(unsorted)
    assert batched[TEXTS.index("")]["translation_text"] == ""
    assert len({result["translation_text"] for result in batched}) == len(TEXTS)  # (each its own translation)


def test_a_batch_size_given_at_construction_sorts_too(translator, tokenizer, translate):
    expected = translate(TEXTS)
    pipe = TranslationPipeline(model=translator, tokenizer=tokenizer, batch_size=4)
    seen = recording(pipe)
    assert pipe(tuple(TEXTS)) == expected
    assert seen == BY_LENGTH


def test_several_sequences_per_text_stay_with_their_text(translate):
    settings = {"num_beams": 3, "num_return_sequences": 2, "return_tensors": True, "return_text": True}
    batched = translate(TEXTS, batch_size=5, **settings)
    assert translate.seen[-len(TEXTS):] == BY_LENGTH
    assert [len(results) for results in batched] == [2] * len(TEXTS)
    for text, results in zip(TEXTS, batched, strict=True):
        assert texts_and_ids(results) == texts_and_ids(translate(text, **settings))


@pytest.mark.parametrize("batch_size", [1, None])
def test_batch_size_one_runs_the_list_as_given(translate, batch_size):
    results = translate(TEXTS, batch_size=batch_size)
    assert translate.seen == TEXTS
    assert results == [translate(text)[0] for text in TEXTS]


def test_a_generator_streams_as_given(translate):
    expected = translate(TEXTS)
    translate.seen.clear()
    streamed = translate((text for text in TEXTS), batch_size=3)
    assert not isinstance(streamed, list)
    assert [result for [result] in streamed] == expected
    assert translate.seen == TEXTS


# --- token classification --------------------------------------------------------------------------------------------

TAGGED = ("John Smith lives in Berlin .", "B-PER I-PER O O B-LOC O")
TAG_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TAGGER_TEXTS = [
    "Berlin.",
    "Today John Smith and his sister walk from the station to the old market in Berlin.",
    "John Smith lives in Berlin.",
    "",
    "In Berlin lives John.",
    "Smith",
]


@pytest.fixture(scope="module")
def table_tagger() -> tuple[VaswaniForTokenClassification, VaswaniTokenizer]:
    """An untrained tagger made to tag by a table of token ids (each word of TAGGED its tag, every other token O), so
    that what it says of any text is known, and its tokenizer."""
    texts = [source for source, _ in PAIRS] + [TAGGED[0]] + TAGGER_TEXTS
    tokenizer = VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=600, min_frequency=1, split_punctuation=True)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=len(TAG_NAMES), id2label=dict(enumerate(TAG_NAMES)),
                         label2id={name: index for index, name in enumerate(TAG_NAMES)})
    model = VaswaniForTokenClassification(config).eval()
    table = torch.zeros(len(tokenizer), dtype=torch.long)
    for word, tag in zip(*(part.split() for part in TAGGED)):
        *_, piece = tokenizer([word], is_split_into_words=True, add_special_tokens=False)["input_ids"]
        table[piece] = TAG_NAMES.index(tag)

    def by_table(module, args, kwargs, output):
        output.logits = torch.nn.functional.one_hot(table[kwargs["input_ids"]], len(TAG_NAMES)).float() * 10
        return output

    model.register_forward_hook(by_table, with_kwargs=True)
    return model, tokenizer


def spans(entities) -> list:
    return [(entity["entity_group"], entity["word"], entity["start"], entity["end"]) for entity in entities]


@pytest.mark.parametrize("split", [False, True], ids=["texts", "pre-split words"])
def test_a_taggers_entities_stay_with_their_text(table_tagger, split):
    model, tokenizer = table_tagger
    tag = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="first")
    assert type(tag) is TokenClassificationPipeline
    texts = [text.split() for text in TAGGER_TEXTS if text] if split else TAGGER_TEXTS
    by_length = sorted(texts, key=lambda text: len(" ".join(text) if split else text), reverse=True)
    seen = recording(tag)

    one_at_a_time = [tag([text] if split else text, is_split_into_words=split) for text in texts]
    one_at_a_time = [found[0] if split else found for found in one_at_a_time]
    seen.clear()
    unsorted = transformers.TokenClassificationPipeline.__call__(tag, texts, batch_size=4, is_split_into_words=split)
    assert seen == texts
    seen.clear()
    batched = tag(texts, batch_size=4, is_split_into_words=split)
    assert seen == by_length

    assert batched == one_at_a_time == unsorted
    assert len({str(spans(entities)) for entities in batched}) == len(texts)  # (each text its own entities)
    sentence = "John Smith lives in Berlin."
    berlin = ("LOC", "Berlin.", 20, 27) if split else ("LOC", "Berlin", 20, 26)  # (split at spaces: "Berlin." one word)
    found = batched[texts.index(sentence.split() if split else sentence)]
    assert spans(found) == [("PER", "John Smith", 0, 10), berlin]


def test_a_taggers_list_with_batch_size_one_runs_as_given(table_tagger):
    model, tokenizer = table_tagger
    tag = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="first")
    seen = recording(tag)
    tag(TAGGER_TEXTS)
    assert seen == TAGGER_TEXTS
    # one text's pre-split words are one text, not a list to sort
    [entities] = tag(TAGGED[0].split(), is_split_into_words=True, batch_size=4)
    assert spans(entities) == [("PER", "John Smith", 0, 10), ("LOC", "Berlin", 20, 26)]
