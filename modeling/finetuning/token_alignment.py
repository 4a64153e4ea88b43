"""From word-level tags to one label per sub-word token, for token classification (named-entity recognition), and
back from token predictions to word-level tags for scoring.

Every token of a word is trained: the word's first token gets the word's tag, its later pieces the "inside" form
of it (`B-PER` -> `I-PER`; `I-PER` and `O` stay). Scores are read at each word's first token.

Why all pieces: the project's tokenizer marks a word start with "▁", and when its vocabulary has no merge of "▁"
with the word's first character the mark stands alone ("▁", "B", "lack", ...). transformers' token-classification
pipeline then sees two words, "" and "Blackburn". Trained this way, the two carry B-/I- tags of one entity, so every
aggregation strategy (simple, first, average, max) groups them back into that entity.
"""

from collections.abc import Sequence

import numpy as np

from transformers import PreTrainedTokenizerBase

from ..data.label_sets import LabelSet


IGNORED = -100  # the label transformers' losses skip (special tokens, padding)


def inside_label_ids(labels: LabelSet) -> list[int]:
    """For each label id, the id a later piece of a word with that label gets: `B-X` -> `I-X` where the set has it."""
    return [labels.label2id.get(f"I-{name[2:]}", index) if name.startswith("B-") else index
            for index, name in enumerate(labels.names)]


def align_word_labels(
    word_ids: Sequence[int | None], word_labels: Sequence[int], inside: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(one label per token, 1 where a token is the first of its word and 0 elsewhere); special tokens get -100."""
    labels, firsts, previous = [], [], None
    for word in word_ids:
        if word is None:
            labels.append(IGNORED)
            firsts.append(0)
        elif word != previous:
            labels.append(word_labels[word])
            firsts.append(1)
        else:
            labels.append(inside[word_labels[word]])
            firsts.append(0)
        previous = word
    return labels, firsts


def tokenize_and_align(
    words: list[list[str]],
    word_labels: list[list[int]],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    inside: Sequence[int],
) -> dict:
    """Tokenize a batch of pre-split sentences; add the aligned `labels` and the `first_token` mask used for scoring
    (for `datasets.map(batched=True)`)."""
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    aligned = [align_word_labels(encoded.word_ids(row), word_labels[row], inside) for row in range(len(words))]
    encoded["labels"] = [labels for labels, _ in aligned]
    encoded["first_token"] = [firsts for _, firsts in aligned]
    return encoded


class WordStarts:
    """Which tokens start a word, for each evaluation sentence, looked up by the sentence's token ids.

    `Trainer` does not return predictions in the order of the evaluation set when it groups batches by length (or
    gathers them from several processes), so the masks are found by content rather than by position. Identical
    token ids come from identical words, so a repeated sentence finds its own mask.
    """

    def __init__(self, input_ids: Sequence[Sequence[int]], first_token: Sequence[Sequence[int]], pad_id: int | None):
        self.pad_id = pad_id
        self.masks = {tuple(ids): np.asarray(firsts, dtype=bool) for ids, firsts in zip(input_ids, first_token)}

    def __call__(self, padded_ids: np.ndarray) -> np.ndarray:
        """The mask of one row of input ids as `Trainer` returns them (padded with the pad id, then with -100)."""
        real = (padded_ids != IGNORED) & (padded_ids != self.pad_id)
        key = tuple(int(i) for i in padded_ids[real])
        if key not in self.masks:
            raise ValueError("A predicted sentence is not in the evaluation set (its token ids match none of it).")
        return self.masks[key]


def word_level_tags(
    predictions: np.ndarray, labels: np.ndarray, input_ids: np.ndarray, word_starts: WordStarts,
    id2label: dict[int, str],
) -> tuple[list[list[str]], list[list[str]]]:
    """Predicted and reference tags of each sentence, read at the first token of each word."""
    predicted_tags, reference_tags = [], []
    for row in range(labels.shape[0]):
        scored = np.flatnonzero(word_starts(input_ids[row]))
        predicted_tags.append([id2label[int(i)] for i in predictions[row][scored]])
        reference_tags.append([id2label[int(i)] for i in labels[row][scored]])
    return predicted_tags, reference_tags


__all__ = [
    "IGNORED",
    "WordStarts",
    "align_word_labels",
    "inside_label_ids",
    "tokenize_and_align",
    "word_level_tags",
]
