"""What the web demo (`vaswani.serving.app`, scripts/app.py) runs behind each tab, without the page: a model of
this project loaded through the installed package's classes, its task read from its config, and one function per task
that answers as the package's pipeline does, with the messages a person gets for a text the demo refuses or cuts.

    served = load_model(Path("results/multi30k_en_de/model"))   # task "translation"
    result = translate(served, "A man is riding a horse.")           # result.texts, result.attention, result.notes

Loading runs no code from the folder: the folder is checked first (`vaswani.safe_loading`), then read by the Auto
classes without `trust_remote_code`, which find this package's registered classes (`import vaswani`), so the copies of
the code a model carries are never imported. Generating models decode through their own CPU decoder where there is
no GPU (every model's default), with the tokens of transformers' loop; every call uses the model's generation
config, as the pipelines and the model cards do.

A text is refused (`InputError`, whose message is for the person who typed it) when it is empty, longer than
`MAX_CHARACTERS`, or has more lines than a tab takes (`MAX_LINES`; translation takes one sentence a line, at most
`MAX_SENTENCES`). A text longer than the model reads is cut as the pipeline cuts it, and the answer says so
(`notes`).
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer

from .. import pipelines as vaswani_pipelines
from ..tasks import auto_class_of, read_task
from .attention_map import CrossAttentionMap, attention_of_translation


MAX_CHARACTERS = 5_000  # per text, any tab
MAX_LINES = 60  # per text: a dialogue's turns, a review's or a news story's lines
MAX_SENTENCES = 8  # translation: one sentence a line, translated together
AGGREGATION = "first"  # the tagger's entities: a word's label is that of its first piece (README's example)
LANGUAGES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "nl": "Dutch",
             "pt": "Portuguese", "cs": "Czech", "ro": "Romanian", "ru": "Russian", "zh": "Chinese", "ja": "Japanese"}


class InputError(ValueError):
    """A text the demo does not run: the message says why and what to do, for the person who typed it."""


@dataclass
class ServedModel:
    """A model ready to serve: its folder, its task and the package's pipeline for it."""

    folder: Path
    task: str
    pipeline: transformers.Pipeline

    @property
    def model(self):
        return self.pipeline.model

    @property
    def tokenizer(self):
        return self.pipeline.tokenizer

    @property
    def direction(self) -> tuple[str, str] | None:
        """(source, target) language codes of a translation model."""
        config = self.model.config
        return (config.source_lang, config.target_lang) if self.task == "translation" else None

    @property
    def max_source_tokens(self) -> int:
        """The most tokens of a text the model reads (the pipeline cuts a longer one): the model's positions, or the
        tokenizer's limit where that is lower."""
        limits = [getattr(self.model.config, "max_position_embeddings", None), self.tokenizer.model_max_length]
        return min(limit for limit in limits if isinstance(limit, int) and limit > 0)


@dataclass
class Answer:
    """A tab's answer: `texts` (one per sentence for translation), with what the tab adds (`attention` of the first
    sentence's translation, `labels` of a classifier as label -> score, `entities` of a tagger as the pipeline gives
    them), and `notes` for the person (a text that was cut)."""

    texts: list[str] = field(default_factory=list)
    attention: CrossAttentionMap | None = None
    labels: dict[str, float] = field(default_factory=dict)
    entities: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- loading ----------------------------------------------------------------------------------------------------------


def load_model(folder: Path, option: str = "--model") -> ServedModel:
    """The model in `folder` with the package's pipeline for its task (see the module's docstring)."""
    task = read_task(folder, option)
    model = auto_class_of(task).from_pretrained(folder)  # no trust_remote_code: this package's registered classes
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model.eval()
    if torch.cuda.is_available():
        model.to("cuda")
    options = {"aggregation_strategy": AGGREGATION} if task == "token-classification" else {}
    pipeline = vaswani_pipelines.pipeline(task, model=model, tokenizer=tokenizer, **options)
    return ServedModel(folder=folder, task=task, pipeline=pipeline)


# --- the tasks --------------------------------------------------------------------------------------------------------


def language(code: str) -> str:
    """A language's name for the page ("de" -> "German"), or its code where the demo knows no name."""
    return LANGUAGES.get(code, repr(code))


def check_text(text, what: str) -> str:
    """`text` as typed, if the demo runs it (see the module's docstring); else an InputError saying why."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"The text is empty: type {what}.")
    if len(text) > MAX_CHARACTERS:
        raise InputError(
            f"The text has {len(text):,} characters; this demo takes at most {MAX_CHARACTERS:,}. Shorten it."
        )
    lines = len(text.splitlines())
    if lines > MAX_LINES:
        raise InputError(f"The text has {lines} lines; this demo takes at most {MAX_LINES}. Shorten it.")
    return text


def count_tokens(served: ServedModel, text: str) -> int:
    """The tokens of `text` as the model reads it (with its special tokens), however many that is."""
    return len(served.tokenizer(text, verbose=False)["input_ids"])  # (verbose: no warning about the length)


def _cut_note(served: ServedModel, text: str, where: str = "The text") -> list[str]:
    """A note when the pipeline reads only the start of `text` (more tokens than the model takes)."""
    tokens = count_tokens(served, text)
    limit = served.max_source_tokens
    if tokens <= limit:
        return []
    return [
        f"{where} is {tokens:,} tokens long and the model reads at most {limit:,}: it was truncated to its first "
        f"{limit:,} tokens, as the pipeline does, and the rest was not read."
    ]


def translate(served: ServedModel, text: str) -> Answer:
    """Each non-empty line of `text` translated (one sentence a line), and the cross-attention of the first line's
    translation (the picture's matrix: the same tokens the pipeline wrote, one forward pass)."""
    source, target = served.direction
    check_text(text, f"a sentence in {language(source)} to translate")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_SENTENCES:
        raise InputError(
            f"The text has {len(lines)} sentences (lines); this demo translates at most {MAX_SENTENCES} at a time."
        )
    notes = []
    for number, line in enumerate(lines, 1):
        notes += _cut_note(served, line, f"Line {number}" if len(lines) > 1 else "The sentence")
    outputs = served.pipeline(lines, batch_size=len(lines), return_tensors=True, return_text=True)
    attention = attention_of_translation(
        served.model, served.tokenizer, lines[0], outputs[0]["translation_token_ids"],
        max_source_length=served.max_source_tokens,
    )
    return Answer(texts=[output["translation_text"] for output in outputs], attention=attention, notes=notes)


def summarize(served: ServedModel, text: str) -> Answer:
    check_text(text, "a dialogue to summarize, one turn a line ('Name: what they say')")
    (output,) = served.pipeline([text])
    return Answer(texts=[output["summary_text"]], notes=_cut_note(served, text))


def classify(served: ServedModel, text: str) -> Answer:
    """The pipeline's label with its score, and every other label's score (`top_k=None`)."""
    check_text(text, "a text to classify")
    scores = served.pipeline(text, top_k=None, truncation=True, max_length=served.max_source_tokens)
    return Answer(
        texts=[scores[0]["label"]],
        labels={score["label"]: float(score["score"]) for score in scores},
        notes=_cut_note(served, text),
    )


def tag(served: ServedModel, text: str) -> Answer:
    """The pipeline's entities (aggregation "first"): group, score, the word and its span in `text`."""
    check_text(text, "a text to tag")
    tokens = count_tokens(served, text)
    positions = getattr(served.model.config, "max_position_embeddings", None)
    cut_at = served.tokenizer.model_max_length  # transformers' token-classification pipeline cuts a text there
    if positions and tokens > positions and not 0 < cut_at <= positions:
        raise InputError(f"The text is {tokens:,} tokens long; this model reads at most {positions:,}. Shorten it.")
    entities = [
        {"entity_group": entity["entity_group"], "score": float(entity["score"]), "word": entity["word"],
         "start": entity["start"], "end": entity["end"]}
        for entity in served.pipeline(text)
    ]
    notes = _cut_note(served, text) if tokens > cut_at else []
    return Answer(texts=[entity["word"] for entity in entities], entities=entities, notes=notes)


RUNNERS = {"translation": translate, "summarization": summarize, "text-classification": classify,
           "token-classification": tag}


__all__ = [
    "AGGREGATION",
    "Answer",
    "InputError",
    "MAX_CHARACTERS",
    "MAX_LINES",
    "MAX_SENTENCES",
    "RUNNERS",
    "ServedModel",
    "count_tokens",
    "language",
    "load_model",
]
