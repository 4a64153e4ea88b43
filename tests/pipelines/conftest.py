"""The tiny models the pipeline tests serve (each trained in a few seconds, once per test module) and their saved
folders."""

from pathlib import Path

import pytest
import torch

from helpers import spread_weights, tiny_config
from pipeline_helpers import LABELS, SOURCES, TAG_NAMES, TAGGED, TRAINING_PAIRS, fitted_translator
from vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniTokenizer,
)
from vaswani.data.label_sets import LabelSet
from vaswani.finetuning.token_alignment import align_word_labels, inside_label_ids


@pytest.fixture(scope="module")
def translator(tokenizer) -> VaswaniForConditionalGeneration:
    """A tiny en->de model fitted to the training pairs in a few seconds: its outputs are real sentences that end
    with `</s>`, so comparisons between the pipeline and `generate()` mean something."""
    return fitted_translator(tokenizer, TRAINING_PAIRS, steps=60)


@pytest.fixture(scope="module")
def classifier(tokenizer) -> VaswaniForSequenceClassification:
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer), num_labels=2, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    )
    return spread_weights(VaswaniForSequenceClassification(config)).eval()


@pytest.fixture(scope="module")
def tagger_tokenizer() -> VaswaniTokenizer:
    texts = SOURCES + [text for text, _ in TAGGED]
    return VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=400, min_frequency=1, split_punctuation=True)


@pytest.fixture(scope="module")
def tagger(tagger_tokenizer) -> VaswaniForTokenClassification:
    """A tiny named-entity tagger fitted to TAGGED in a few seconds, trained as finetune_token_classification.py
    trains (every piece of a word labelled)."""
    torch.manual_seed(0)
    labels = LabelSet(tuple(TAG_NAMES), "the tagger's tags")
    config = tiny_config(vocab_size=len(tagger_tokenizer), num_labels=len(TAG_NAMES), id2label=dict(enumerate(TAG_NAMES)),
                         label2id=labels.label2id)
    model = VaswaniForTokenClassification(config)
    words = [text.split() for text, _ in TAGGED]
    batch = tagger_tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    inside = inside_label_ids(labels)
    batch["labels"] = torch.tensor([
        align_word_labels(batch.word_ids(row), [labels.label2id[tag] for tag in tags.split()], inside)[0]
        for row, (_, tags) in enumerate(TAGGED)
    ]).masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


@pytest.fixture(scope="module")
def checkpoints(translator, classifier, tagger, tokenizer, tagger_tokenizer, tmp_path_factory) -> dict[str, Path]:
    folders = {name: tmp_path_factory.mktemp(name) for name in ("seq2seq", "classifier", "tagger")}
    for model, its_tokenizer, folder in ((translator, tokenizer, folders["seq2seq"]),
                                         (classifier, tokenizer, folders["classifier"]),
                                         (tagger, tagger_tokenizer, folders["tagger"])):
        model.save_pretrained(folder)
        its_tokenizer.save_pretrained(folder)
    return folders
