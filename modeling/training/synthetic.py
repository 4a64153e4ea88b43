"""A toy English -> German translation task that the project writes itself, so that training runs with no download.

Sentences come from a small grammar: an optional time adverb, a subject, a verb, an optional object and an optional
place, e.g.

    "Today the big dog sees a small cat in the garden."  ->  "Heute sieht der große Hund eine kleine Katze im Garten."

The German side is the real translation, with what makes it more than a word-for-word substitution: grammatical
gender and case (der/den/ein/einen, rote/roten/roter/rotes), the verb moving before the subject after a fronted
adverb (verb-second word order), and "in the" contracting to "im". A small Transformer learns it on a CPU in a few
minutes, and its translations can be checked by eye.
"""

import json
import random
from pathlib import Path


NOUNS = {  # English: (German, gender)
    "dog": ("Hund", "m"), "cat": ("Katze", "f"), "horse": ("Pferd", "n"), "man": ("Mann", "m"),
    "woman": ("Frau", "f"), "child": ("Kind", "n"), "bird": ("Vogel", "m"), "girl": ("Mädchen", "n"),
    "mouse": ("Maus", "f"), "teacher": ("Lehrer", "m"), "cow": ("Kuh", "f"), "sheep": ("Schaf", "n"),
}
OBJECTS = {
    **NOUNS,
    "ball": ("Ball", "m"), "book": ("Buch", "n"), "apple": ("Apfel", "m"), "flower": ("Blume", "f"),
    "car": ("Auto", "n"), "bag": ("Tasche", "f"),
}
ADJECTIVES = {
    "red": "rot", "big": "groß", "small": "klein", "old": "alt", "young": "jung", "black": "schwarz",
    "white": "weiß", "new": "neu", "beautiful": "schön", "funny": "lustig",
}
TRANSITIVE_VERBS = {
    "sees": "sieht", "likes": "mag", "finds": "findet", "has": "hat", "watches": "beobachtet", "hears": "hört",
    "chases": "jagt", "carries": "trägt", "wants": "will",
}
INTRANSITIVE_VERBS = {
    "sleeps": "schläft", "runs": "läuft", "sings": "singt", "waits": "wartet", "plays": "spielt", "eats": "isst",
}
PLACES = {
    "in the garden": "im Garten", "in the park": "im Park", "in the house": "im Haus", "in the forest": "im Wald",
    "in the kitchen": "in der Küche", "on the street": "auf der Straße", "at the lake": "am See",
}
ADVERBS = {"today": "heute", "now": "jetzt", "in the evening": "am Abend", "on sunday": "am Sonntag"}

ARTICLES = {  # (definite?, case, gender) -> German article
    (True, "nom", "m"): "der", (True, "nom", "f"): "die", (True, "nom", "n"): "das",
    (True, "acc", "m"): "den", (True, "acc", "f"): "die", (True, "acc", "n"): "das",
    (False, "nom", "m"): "ein", (False, "nom", "f"): "eine", (False, "nom", "n"): "ein",
    (False, "acc", "m"): "einen", (False, "acc", "f"): "eine", (False, "acc", "n"): "ein",
}
ADJECTIVE_ENDINGS = {  # mixed and weak declension, same keys as ARTICLES
    (True, "nom", "m"): "e", (True, "nom", "f"): "e", (True, "nom", "n"): "e",
    (True, "acc", "m"): "en", (True, "acc", "f"): "e", (True, "acc", "n"): "e",
    (False, "nom", "m"): "er", (False, "nom", "f"): "e", (False, "nom", "n"): "es",
    (False, "acc", "m"): "en", (False, "acc", "f"): "e", (False, "acc", "n"): "es",
}


def _noun_phrase(rng: random.Random, nouns: dict, case: str) -> tuple[str, str]:
    noun = rng.choice(sorted(nouns))
    german_noun, gender = nouns[noun]
    definite = rng.random() < 0.5
    english = ["the" if definite else "a"]
    german = [ARTICLES[definite, case, gender]]
    if rng.random() < 0.6:
        adjective = rng.choice(sorted(ADJECTIVES))
        english.append(adjective)
        german.append(ADJECTIVES[adjective] + ADJECTIVE_ENDINGS[definite, case, gender])
    english.append(noun)
    if not definite and english[1][0] in "aeiou":
        english[0] = "an"
    return " ".join(english), " ".join(german + [german_noun])


def _sentence_pair(rng: random.Random) -> tuple[str, str]:
    subject_en, subject_de = _noun_phrase(rng, NOUNS, "nom")
    if rng.random() < 0.7:
        verb = rng.choice(sorted(TRANSITIVE_VERBS))
        object_en, object_de = _noun_phrase(rng, OBJECTS, "acc")
        verb_de, rest_en, rest_de = TRANSITIVE_VERBS[verb], [verb, object_en], [object_de]
    else:
        verb = rng.choice(sorted(INTRANSITIVE_VERBS))
        verb_de, rest_en, rest_de = INTRANSITIVE_VERBS[verb], [verb], []
    if rng.random() < 0.5:
        place = rng.choice(sorted(PLACES))
        rest_en.append(place)
        rest_de.append(PLACES[place])
    if rng.random() < 0.4:
        adverb = rng.choice(sorted(ADVERBS))
        english = [adverb, subject_en, *rest_en]
        german = [ADVERBS[adverb], verb_de, subject_de, *rest_de]  # verb second: "Heute sieht der Hund ..."
    else:
        english = [subject_en, *rest_en]
        german = [subject_de, verb_de, *rest_de]
    return _sentence(" ".join(english)), _sentence(" ".join(german))


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def generate_pairs(count: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [dict(zip(("en", "de"), _sentence_pair(rng))) for _ in range(count)]


def write_synthetic_translation(folder: Path, train_size: int, validation_size: int, seed: int = 0) -> dict[str, Path]:
    """Write `train.jsonl` and `validation.jsonl` ({"en": ..., "de": ...} per line) into `folder`; the validation
    sentences are ones the training split does not contain. Returns the two paths."""
    if train_size <= 0 or validation_size <= 0:
        raise ValueError(f"The synthetic splits need at least one pair each, got {train_size} and {validation_size}.")
    folder.mkdir(parents=True, exist_ok=True)
    train = generate_pairs(train_size, seed)
    seen = {pair["en"] for pair in train}
    validation, rng = [], random.Random(seed + 1)
    while len(validation) < validation_size:
        english, german = _sentence_pair(rng)
        if english not in seen:
            seen.add(english)
            validation.append({"en": english, "de": german})
    paths = {}
    for split, pairs in (("train", train), ("validation", validation)):
        paths[split] = folder / f"{split}.jsonl"
        text = "".join(json.dumps(pair, ensure_ascii=False) + "\n" for pair in pairs)
        if paths[split].is_file() and paths[split].read_text(encoding="utf-8") == text:
            continue  # unchanged: rewriting would only invalidate the tokenization cache, keyed on the file
        temporary = paths[split].with_suffix(".jsonl.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(paths[split])  # never leave a half-written split behind
    return paths


__all__ = [
    "ADJECTIVES",
    "ADVERBS",
    "INTRANSITIVE_VERBS",
    "NOUNS",
    "OBJECTS",
    "PLACES",
    "TRANSITIVE_VERBS",
    "generate_pairs",
    "write_synthetic_translation",
]
