"""A synthetic English-German corpus of WMT14's size and shape, to measure the data pipeline of
scripts/configs/wmt14_en_de_base.yaml where WMT itself cannot be downloaded (results/wmt14_en_de/notes.md).

    python scripts/tools/wmt_like_corpus.py --pairs 4508785 --output_file /tmp/wmt_like/train.jsonl
    python scripts/tools/wmt_like_corpus.py --pairs 3000 --seed 1 --output_file /tmp/wmt_like/validation.jsonl

Each line is a row of the Hub's `wmt14` `de-en` files, `{"translation": {"de": ..., "en": ...}}`. The text is not
language, but it has what the pipeline's cost depends on:

- lengths: English sentences of a log-normal number of words (mean 25.8, median about 20, 1 to 200 words: WMT14's
  training data have 116M English and 110M German words in 4.5M pairs), each German one about 0.95 times as long;
- words: two vocabularies of 300,000 made-up words built from syllables, drawn with Zipf's law (rank^-1.07), the
  frequent words short and the rare ones long, so that a BPE vocabulary learned from it has common words whole and
  rare ones in pieces, as on real text; German nouns capitalized, 2% of German words joined to the next by a hyphen
  ("a-b", what tokenized BLEU with compound splitting splits), commas, a full stop or a question mark at the end.

The same --seed gives the same file, byte for byte. 4.5M pairs take about 5 minutes and 1.4 GB.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


WORD_TYPES = 300_000
ZIPF_EXPONENT = 1.07
MEAN_WORDS = 25.8
LENGTH_SIGMA = 0.7
GERMAN_RATIO = 0.95
LONGEST = 200
CHUNK = 50_000  # pairs generated at a time

CONSONANTS = list("bcdfghklmnprstvwz") + ["ch", "sch", "st", "tr", "br", "pl", "th", "sh"]
VOWELS = ["a", "e", "i", "o", "u", "ei", "au", "ie", "ou", "ee"]


def vocabulary(rng: np.random.Generator, types: int, longer_from: tuple[int, ...], capitalized_share: float) -> list[str]:
    """`types` distinct words, the most frequent (rank 0) first: one syllable, and one more from each rank of
    `longer_from` on (or when the shorter words run out); `capitalized_share` of them capitalized (German nouns)."""
    syllables = [c + v + e for c in CONSONANTS for v in VOWELS for e in ("", "n", "r", "s", "t")]
    words, seen, shortest, failures = [], set(), 1, 0
    while len(words) < types:
        count = max(shortest, 1 + sum(len(words) >= start for start in longer_from))
        word = "".join(syllables[i] for i in rng.integers(0, len(syllables), count))
        if word in seen:
            failures += 1
            if failures == 50:  # (nearly) every word of `shortest` syllables is taken
                shortest, failures = shortest + 1, 0
            continue
        seen.add(word)
        failures = 0
        words.append(word.capitalize() if rng.random() < capitalized_share else word)
    return words


def zipf_cdf(types: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, types + 1) ** ZIPF_EXPONENT
    return np.cumsum(weights) / weights.sum()


def sentence(words: list[str], rng: np.random.Generator, hyphen_share: float) -> str:
    """Words joined into a sentence: hyphenated compounds, a comma now and then, capitalized, with a final mark."""
    parts, index = [], 0
    joins = rng.random(len(words)) < hyphen_share
    commas = rng.random(len(words)) < 0.05
    while index < len(words):
        word = words[index]
        if joins[index] and index + 1 < len(words):
            word, index = f"{word}-{words[index + 1]}", index + 1
        if commas[index] and index + 1 < len(words):
            word += ","
        parts.append(word)
        index += 1
    text = " ".join(parts)
    return text[0].upper() + text[1:] + ("?" if rng.random() < 0.05 else ".")


def generate(pairs: int, seed: int, handle, word_types: int = WORD_TYPES) -> tuple[int, int]:
    """Write `pairs` JSON Lines rows to `handle`; returns the English and German word counts."""
    rng = np.random.default_rng(seed)
    english = vocabulary(rng, word_types, (3_000, 40_000, 200_000), 0.0)
    german = vocabulary(rng, word_types, (1_000, 10_000, 60_000), 0.3)
    cdf = zipf_cdf(word_types)
    mu = np.log(MEAN_WORDS) - LENGTH_SIGMA**2 / 2  # the log-normal's mean is exp(mu + sigma^2 / 2)
    english_words = german_words = 0
    for start in range(0, pairs, CHUNK):
        count = min(CHUNK, pairs - start)
        en_lengths = np.clip(np.rint(rng.lognormal(mu, LENGTH_SIGMA, count)), 1, LONGEST).astype(int)
        de_lengths = np.clip(np.rint(en_lengths * rng.normal(GERMAN_RATIO, 0.1, count)), 1, LONGEST).astype(int)
        en_ids = np.searchsorted(cdf, rng.random(en_lengths.sum())).tolist()
        de_ids = np.searchsorted(cdf, rng.random(de_lengths.sum())).tolist()
        en_at = de_at = 0
        lines = []
        for en_length, de_length in zip(en_lengths.tolist(), de_lengths.tolist()):
            en = sentence([english[i] for i in en_ids[en_at:en_at + en_length]], rng, 0.01)
            de = sentence([german[i] for i in de_ids[de_at:de_at + de_length]], rng, 0.02)
            en_at, de_at = en_at + en_length, de_at + de_length
            lines.append(json.dumps({"translation": {"de": de, "en": en}}, ensure_ascii=False))
        handle.write("\n".join(lines) + "\n")
        english_words, german_words = english_words + en_at, german_words + de_at
    return english_words, german_words


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, required=True, help="Rows to write (WMT14 de-en train: 4,508,785).")
    parser.add_argument("--output_file", required=True, help="The JSON Lines file to write (replaced whole).")
    parser.add_argument("--seed", type=int, default=0, help="Another seed, other sentences (validation: 1).")
    parser.add_argument("--word_types", type=int, default=WORD_TYPES,
                        help="Words in each language's vocabulary (fewer: quicker to build, for tests).")
    args = parser.parse_args(argv)
    for name in ("pairs", "word_types"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    output = Path(args.output_file)
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(output.name + ".tmp")
    started = time.perf_counter()
    with open(temporary, "w", encoding="utf-8") as handle:
        english, german = generate(args.pairs, args.seed, handle, args.word_types)
    os.replace(temporary, output)
    print(f"Wrote {output}: {args.pairs:,} pairs, {english:,} English words ({english / args.pairs:.1f} a sentence), "
          f"{german:,} German words ({german / args.pairs:.1f}), {output.stat().st_size / 2**20:,.1f} MiB in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
