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
        "The mouse watches the apple.": "Die Maus beobachtet den Apfel.",
        "The dog wants the dog.": "Der Hund will den Hund.",
        "A dog chases a bird.": "Ein Hund jagt einen Vogel.",
        "The girl finds the cat.": "Das Mädchen findet die Katze.",
        "The man finds the new dog.": "Der Mann findet den neuen Hund.",
        "A new horse sings on the street.": "Ein neues Pferd singt auf der Straße.",
    }
    assert {english: pairs.get(english) for english in expected} == expected  # 5,000 pairs hold each of them
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
