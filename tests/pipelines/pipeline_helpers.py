"""What the pipeline tests share beyond helpers.py: the training pairs and tagged sentences of their tiny models, a
tiny translator fitted to pairs, and generating with a model directly (what the pipelines are compared with)."""

import torch

from helpers import PAIRS, REPO, tiny_config
from vaswani import VaswaniForConditionalGeneration


# A target with spaces before punctuation, so that `clean_up_tokenization_spaces` changes the decoded text.
SPACED = ("Where is the station?", "Wo ist der Bahnhof ?")
TRAINING_PAIRS = PAIRS + [SPACED]
SOURCES = [source for source, _ in TRAINING_PAIRS]
LABELS = {0: "negative", 1: "positive"}
REMOTE_CODE = REPO / "modeling" / "remote_code"  # what a saved model carries
PIPELINE_FILES = ["pipeline_vaswani.py", "vocabulary.py"]  # the pipeline file and the module it imports

# The tagger's sentences: words and their tags, and the spans of the entities in the first one.
TAGGED = [
    ("John Smith lives in Berlin .", "B-PER I-PER O O B-LOC O"),
    ("Mary Jones works in Paris .", "B-PER I-PER O O B-LOC O"),
]
TAG_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCE = "John Smith lives in Berlin."
ENTITIES = [("PER", "John Smith", 0, 10), ("LOC", "Berlin", 20, 26)]


def generate_texts(model, tokenizer, texts, **settings) -> list[str]:
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    return tokenizer.batch_decode(model.generate(**inputs, **settings), skip_special_tokens=True)


def generate_ids(model, tokenizer, text, **settings) -> list[list[int]]:
    """Each returned sequence of one text, up to and including its `</s>` (batched beams pad after it)."""
    sequences = model.generate(**tokenizer([text], return_tensors="pt"), **settings).tolist()
    return [ids[: ids.index(2, 1) + 1] if 2 in ids[1:] else ids for ids in sequences]


def fitted_translator(tokenizer, pairs, steps: int) -> VaswaniForConditionalGeneration:
    """A tiny en->de model fitted to `pairs` in `steps` Adam steps (seed 0, a few seconds), in eval mode."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en", target_lang="de"))
    sources, targets = zip(*pairs)
    batch = tokenizer(list(sources), text_target=list(targets), padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()
