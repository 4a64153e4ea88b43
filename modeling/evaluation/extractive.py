"""Summaries made of a document's own lines or sentences, with no model: the floors a trained summarizer must beat
(scripts/extractive_baseline.py) and the targets of self-supervised pretraining (scripts/make_pseudo_summaries.py).

- `first_lines`: the first N non-empty lines (SAMSum: the first N utterances of the dialogue).
- `longest_lines`: the N longest non-empty lines by characters, kept in the document's order (SAMSum's LONGEST-3
  baseline, Gliwa et al. 2019).
- `lead_sentence`: the first sentence of at least a few words, cut to a number of words (the "Lead" choice of
  PEGASUS's gap sentences; AESLC's first-sentence baseline).
"""

import re


SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
WORD = re.compile(r"\w+")
METHODS = ("first_lines", "longest_lines", "lead_sentence")


def _non_empty_lines(document: str) -> list[str]:
    return [line.strip() for line in document.splitlines() if line.strip()]


def first_lines(document: str, count: int) -> str:
    """The first `count` non-empty lines, joined by newlines."""
    return "\n".join(_non_empty_lines(document)[:count])


def longest_lines(document: str, count: int) -> str:
    """The `count` longest non-empty lines in characters (the earlier line first among equals), in document order."""
    lines = _non_empty_lines(document)
    chosen = sorted(sorted(range(len(lines)), key=lambda i: -len(lines[i]))[:count])
    return "\n".join(lines[i] for i in chosen)


def lead_sentence(document: str, min_sentence_words: int = 4, max_target_words: int = 20) -> str | None:
    """The first sentence (or line) of `document` with at least `min_sentence_words` words, cut to
    `max_target_words` words; None if there is none. The minimum skips greetings ("Hi Phillip,")."""
    for sentence in SENTENCE_END.split(document):
        if sentence and len(WORD.findall(sentence)) >= min_sentence_words:
            return " ".join(sentence.split()[:max_target_words])
    return None


def extract(document: str, method: str, count: int = 3, min_sentence_words: int = 4, max_words: int = 20) -> str:
    """`document`'s summary by `method` (one of METHODS); an empty string where the method finds nothing."""
    if method == "first_lines":
        return first_lines(document, count)
    if method == "longest_lines":
        return longest_lines(document, count)
    if method == "lead_sentence":
        return lead_sentence(document, min_sentence_words, max_words) or ""
    raise ValueError(f"Unknown extraction method {method!r}; expected one of {list(METHODS)}.")


__all__ = ["METHODS", "extract", "first_lines", "lead_sentence", "longest_lines"]
