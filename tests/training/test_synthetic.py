"""vaswani.training.synthetic: the toy English -> German task a run trains on by default, deterministic for a seed,
grammatical, with validation sentences unseen in training."""

import json

import pytest

from vaswani.training.synthetic import generate_pairs, write_synthetic_translation

pytestmark = pytest.mark.usefixtures("one_thread")


def test_synthetic_task_is_deterministic_and_translates_grammatically(tmp_path):
    assert generate_pairs(50, seed=3) == generate_pairs(50, seed=3)
    assert generate_pairs(50, seed=3) != generate_pairs(50, seed=4)
    pairs = {pair["en"]: pair["de"] for pair in generate_pairs(5000, seed=0)}
    # case, gender and adjective endings, verb-second order after a fronted adverb, "in the" -> "im"
    expected = {
        "The dog sees a cat.": "Der Hund sieht eine Katze.",
        "The cat sees the dog.": "Die Katze sieht den Hund.",
        "A cat has a big ball.": "Eine Katze hat einen großen Ball.",
    }
    for english, german in expected.items():
        if english in pairs:
            assert pairs[english] == german
    adverb_first = [(en, de) for en, de in pairs.items() if en.startswith("Today ")]
    assert adverb_first and all(de.split()[1] in {"sieht", "mag", "findet", "hat", "beobachtet", "hört", "jagt",
                                                  "trägt", "will", "schläft", "läuft", "singt", "wartet", "spielt",
                                                  "isst"} for _, de in adverb_first)
    assert any(" im Garten." in de for de in pairs.values())

    paths = write_synthetic_translation(tmp_path, train_size=300, validation_size=40, seed=0)
    train = [json.loads(line)["en"] for line in paths["train"].read_text().splitlines()]
    validation = [json.loads(line)["en"] for line in paths["validation"].read_text().splitlines()]
    assert len(train) == 300 and len(validation) == 40
    assert not set(validation) & set(train), "validation sentences must be unseen in training"
