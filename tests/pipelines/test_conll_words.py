"""The token-classification pipeline cuts a text into CoNLL-2003's words before tokenizing it (conll_words), as its
tagger was trained: the shipped tagger's entities on raw text never end in punctuation that CoNLL-2003 splits off,
and each is the exact span of its words in the text."""

import pytest
from transformers import pipeline

from helpers import REPO
from vaswani import VaswaniTokenizer
from vaswani.remote_code.pipeline_vaswani import conll_words


TAGGER = REPO / "results" / "conll2003" / "model"


def cut(text: str) -> list[str]:
    return [text[start:end] for start, end in conll_words(text)]


@pytest.mark.parametrize("text, words", [
    ("Olaf Scholz flew to New York.", "Olaf Scholz flew to New York ."),
    ("He lives in Washington D.C. now.", "He lives in Washington D.C. now ."),
    # at the end of the text the full stop is a word of its own even after an abbreviation, as CoNLL-2003 has it
    ("He lives in the U.S.", "He lives in the U.S ."),
    ('He works for Acme Co."', 'He works for Acme Co . "'),
    ("Michael Joyce (U.S.)", "Michael Joyce ( U.S. )"),  # a bracket is not the end of a sentence
    ("Angela Merkel met Emmanuel Macron in Paris on Tuesday, the European Union said.",
     "Angela Merkel met Emmanuel Macron in Paris on Tuesday , the European Union said ."),
    ("Germany's Chancellor didn't say (Reuters).", "Germany 's Chancellor did n't say ( Reuters ) ."),
    ('"We won," said Acme Corp. on Friday...', '" We won , " said Acme Corp. on Friday ...'),
    ("1. Michael Johnson (U.S.) 19.32", "1. Michael Johnson ( U.S. ) 19.32"),
    ("It costs $5, or 5%, vs. US$7 at 10:30 a.m. in 1996-08-30.",
     "It costs $ 5 , or 5 % , vs. US$ 7 at 10:30 a.m. in 1996-08-30 ."),
    ("O'Brien beat George W. Bush 6-4 1,000 times?", "O'Brien beat George W. Bush 6-4 1,000 times ?"),
    ("  Berlin.\n\nParis  ", "Berlin . Paris"),
    ("", ""),
])
def test_text_is_cut_into_the_words_conll_2003_has(text, words):
    assert cut(text) == words.split()


@pytest.fixture(scope="module")
def tagger():
    return pipeline("token-classification", model=str(TAGGER), trust_remote_code=True, aggregation_strategy="first")


def spans(entities) -> list[tuple]:
    return [(entity["entity_group"], entity["word"], entity["start"], entity["end"]) for entity in entities]


@pytest.mark.parametrize("text, expected", [
    ("Olaf Scholz flew to New York.", [("PER", "Olaf Scholz", 0, 11), ("LOC", "New York", 20, 28)]),
    ("Olaf Scholz.", [("PER", "Olaf Scholz", 0, 11)]),
    # ("I" a person: the model's own mistake, as before)
    ("I flew from Washington D.C. to Paris.", [("PER", "I", 0, 1), ("LOC", "Washington D.C.", 12, 27),
                                               ("LOC", "Paris", 31, 36)]),
    ("Angela Merkel met Emmanuel Macron in Paris on Tuesday, the European Union said.",
     [("PER", "Angela Merkel", 0, 13), ("PER", "Emmanuel Macron", 18, 33), ("LOC", "Paris", 37, 42),
      ("ORG", "European Union", 59, 73)]),
])
def test_the_shipped_taggers_entities_on_raw_text_end_where_conll_words_end(tagger, text, expected):
    """Tokenized whole, "York." was the pieces "▁York" and ".", a piece the tagger only ever saw inside a word and
    tagged as the entity's continuation, and "D.C." the words "D", ".", "C", ".": "New York.", "Olaf Scholz.",
    "Paris.", and "Washington D." with a PER "C." came out."""
    entities = tagger(text)
    assert spans(entities) == expected
    ends = {end for _, end in conll_words(text)}
    for entity in entities:
        assert text[entity["start"]:entity["end"]] == entity["word"] and entity["end"] in ends, entity


def test_a_text_is_tagged_as_its_words_pre_split(tagger):
    """The text's entities are those of its CoNLL-2003 words given pre-split, at the text's own positions: the same
    pieces, scores and groups, spaces and line breaks between the words kept in each entity's span."""
    text = "  Olaf   Scholz\nflew to New York.  Angela Merkel (CDU) stayed in Berlin's suburbs. "
    words = cut(text)
    from_text = tagger(text)
    [from_words] = tagger(words, is_split_into_words=True)
    assert [entity["entity_group"] for entity in from_text] == [entity["entity_group"] for entity in from_words]
    assert [entity["score"] for entity in from_text] == pytest.approx([entity["score"] for entity in from_words])
    joined = " ".join(words)
    assert [" ".join(entity["word"].split()) for entity in from_text] == [entity["word"] for entity in from_words]
    assert [joined[entity["start"]:entity["end"]] for entity in from_words] == [entity["word"] for entity in from_words]
    assert ("PER", "Olaf   Scholz", 2, 15) in spans(from_text)
    for entity in from_text:
        assert text[entity["start"]:entity["end"]] == entity["word"]


def test_every_token_of_a_text_keeps_its_span(tagger):
    """Without aggregation each token's span is its characters in the text: the full stop of "York." is its own
    token, as the word "." of the dataset is."""
    text = "Olaf Scholz flew to New York."
    tokens = tagger(text, aggregation_strategy="none", ignore_labels=[])
    assert [text[token["start"]:token["end"]] for token in tokens][-2:] == ["York", "."]
    assert tokens[-1]["word"] == "\u2581."
    assert "".join(text[token["start"]:token["end"]] for token in tokens) == text.replace(" ", "")


def test_a_call_with_its_own_offsets_and_a_blank_text_are_tagged_as_given(tagger):
    """A caller's `offset_mapping` belongs to the text's own tokenization, which such a call keeps; a text without a
    word has no entity."""
    text = "Olaf Scholz flew to New York."
    tokenizer = VaswaniTokenizer.from_pretrained(TAGGER)
    encoding = tokenizer(text, return_offsets_mapping=True)
    offsets = [tuple(pair) for pair in encoding["offset_mapping"]]
    entities = tagger(text, offset_mapping=offsets)
    for entity in entities:
        assert text[entity["start"]:entity["end"]] == entity["word"]
    assert tagger("   ") == [] and tagger("") == []


def test_a_text_longer_than_the_model_accepts_is_tagged_in_windows_of_its_words():
    """With `stride`, the words go to the model in overlapping windows (transformers' settings for them, given at
    construction, are the pipeline's own: a call does not change them for the next)."""
    tagger = pipeline("token-classification", model=str(TAGGER), trust_remote_code=True, aggregation_strategy="first",
                      stride=16)
    text = " ".join(["Olaf Scholz flew to New York."] * 60)  # 660 tokens, in windows of at most 256
    for _ in range(2):
        entities = tagger(text)
        assert {entity["word"] for entity in entities} == {"Olaf Scholz", "New York"} and len(entities) == 120
        assert all(text[entity["start"]:entity["end"]] == entity["word"] for entity in entities)
