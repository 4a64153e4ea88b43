"""Configuration of the original Transformer ("Attention Is All You Need", Vaswani et al., 2017).

The defaults are the paper's base model: d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, dropout 0.1, ReLU,
post-LayerNorm, sinusoidal positions, embeddings scaled by sqrt(d_model), and one embedding matrix shared by the
encoder, the decoder and the output projection.

A config can come from anywhere (the Hub, a shared folder), so every value is checked when the config is built
(`_check_values`), and its file is bounded before it is parsed (`check_json_file`).

This file is copied into every saved model, so it imports nothing from this project.
"""

import contextvars
import copy
import difflib
import errno
import os
import re
import stat
from dataclasses import fields
from typing import Any

from transformers import PreTrainedConfig


POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned", "relative")
LAYER_NORM_POSITIONS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "swish", "tanh")

# Every Auto class the project registers, written into each saved config so that a model folder loads with
# `trust_remote_code=True` where this package is not installed.
AUTO_MAP = {
    "AutoConfig": "configuration_vaswani.VaswaniConfig",
    "AutoModel": "modeling_vaswani.VaswaniModel",
    "AutoModelForSeq2SeqLM": "modeling_vaswani.VaswaniForConditionalGeneration",
    "AutoModelForSequenceClassification": "modeling_vaswani.VaswaniForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_vaswani.VaswaniForTokenClassification",
    "AutoTokenizer": ["tokenization_vaswani.VaswaniTokenizer", None],
}

# The pipelines every saved model declares, resolved by `transformers.pipeline(task, model=DIR, trust_remote_code=True)`
# from the pipeline code file that the model carries (transformers 5 removed these tasks from its own registry).
CUSTOM_PIPELINES = {
    task: {"impl": f"pipeline_vaswani.{class_name}", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    for task, class_name in (
        ("translation", "TranslationPipeline"),
        ("summarization", "SummarizationPipeline"),
        ("text2text-generation", "Text2TextGenerationPipeline"),
    )
}

# Named sizes. `base` and `big` are the paper's two models (Table 3); `small` trains on a CPU in minutes;
# `tiny` is for tests.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, vocab_size=1000,
    ),
    "small": dict(
        d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_position_embeddings=512, vocab_size=8000,
    ),
    "base": dict(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, dropout=0.1,
    ),
    "big": dict(
        d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16, decoder_attention_heads=16,
        encoder_ffn_dim=4096, decoder_ffn_dim=4096, dropout=0.3,
    ),
}


# Upper bounds of the sizes a config may ask for: far above any model of the paper (base: 6 layers, d_model 512, d_ff
# 2,048) or any that fits a machine, low enough that a damaged or hostile config fails at once instead of hanging or
# allocating tens of GB (a million layers; a relative-position table of a billion rows).
MAX_SIZES = {
    "vocab_size": 2**21, "d_model": 2**16, "encoder_layers": 1024, "decoder_layers": 1024,
    "encoder_attention_heads": 1024, "decoder_attention_heads": 1024, "encoder_ffn_dim": 2**18,
    "decoder_ffn_dim": 2**18, "max_position_embeddings": 2**20, "relative_attention_max_distance": 2**20,
}
MAX_FP32_GIGABYTES = 400  # about 100B parameters

# Bounds on a JSON file of a model (config, tokenizer, generation settings), checked before it is parsed.
# Python's json module recurses once per level of nesting, so a file nested 200,000 levels deep ends in a
# RecursionError; the files this project writes are nested 6 levels at most. tokenizer.json holds the vocabulary and
# the merges (4 MB for 37,000 tokens) and may be large; every other file is a few KB.
MAX_JSON_DEPTH = 100
MAX_JSON_BYTES = 16 * 2**20
MAX_VOCABULARY_JSON_BYTES = 1024 * 2**20  # tokenizer.json: room for the largest vocabulary allowed (MAX_SIZES)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class VaswaniConfig(PreTrainedConfig):
    r"""
    Configuration of a [`VaswaniModel`]: the encoder-decoder Transformer of "Attention Is All You Need".

    Args:
        vocab_size: size of the joint source/target vocabulary (the paper: about 37,000 BPE tokens for en-de).
        d_model: width of every sub-layer output and of the embeddings.
        encoder_layers / decoder_layers: N, the number of identical layers in each stack.
        encoder_attention_heads / decoder_attention_heads: h; each head works in d_model / h dimensions.
        encoder_ffn_dim / decoder_ffn_dim: d_ff, the inner width of the position-wise feed-forward network.
        activation_function: the feed-forward non-linearity (the paper: ReLU).
        dropout: P_drop, applied to each sub-layer output and to the sums of embeddings and positions.
        attention_dropout: dropout on the attention weights.
        activation_dropout: dropout inside the feed-forward network, after the activation.
        layer_norm_position: "post" (the paper: LayerNorm(x + Sublayer(x))) or "pre" (x + Sublayer(LayerNorm(x)),
            with a final LayerNorm after each stack; trains more stably when deep).
        position_embedding_type: "sinusoidal" (the paper's fixed encoding, sin/cos interleaved), "learned"
            (a learned absolute embedding per position), or "relative" (a learned bias per head for each clipped
            key-query offset, added to the attention scores; no absolute positions).
        relative_attention_max_distance: offsets beyond this share one bias ("relative" only).
        max_position_embeddings: the longest sequence the model accepts.
        scale_embedding: multiply token embeddings by sqrt(d_model), as the paper does.
        tie_word_embeddings: share one matrix between encoder embeddings, decoder embeddings and the output
            projection (the paper, section 3.4).
        layer_norm_eps: epsilon of every LayerNorm.
        label_smoothing: epsilon_ls of the loss computed from `labels` (the paper trains with 0.1).
        classifier_dropout: dropout of the sequence-classification head.
        source_lang / target_lang: the translation direction the model was trained for, if any.
    """

    model_type = "vaswani"
    # What the Trainer leaves out of the predictions it gathers (`Trainer.predict`, evaluation), so that they are the
    # logits alone, as run_glue's `np.argmax(predictions, axis=1)` expects: the decoder's cache (named `cache` from
    # transformers 5.24 on) and the encoder's last states, which a seq2seq output carries beside its logits.
    keys_to_ignore_at_inference = ["past_key_values", "cache", "encoder_last_hidden_state"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        # The cache and generation size themselves from this; what they hold is the decoder's layers.
        "num_hidden_layers": "decoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    layer_norm_position: str = "post"
    position_embedding_type: str = "sinusoidal"
    relative_attention_max_distance: int = 128
    max_position_embeddings: int = 1024
    scale_embedding: bool = True
    tie_word_embeddings: bool = True
    layer_norm_eps: float = 1e-5
    label_smoothing: float = 0.0
    classifier_dropout: float = 0.0
    source_lang: str | None = None
    target_lang: str | None = None
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    auto_map: dict | None = None
    custom_pipelines: dict | None = None

    def __post_init__(self, **kwargs):
        # Extra keyword arguments are kept as attributes (transformers' convention). One typed in code that nearly
        # names a field is a typo and refused; one read from a file or dict (`from_dict`) is kept as written: a
        # library may have set an attribute of its own (`layer_norm_epsilon`) on a config it saved.
        if not _READING_A_SAVED_CONFIG.get():
            for name, field_name in misspelled_fields(kwargs, type(self)).items():  # the first one
                raise ValueError(f"Unknown config field {name!r}; did you mean {field_name!r}?")
        # deep copies: transformers edits these dicts in place when it resolves a pipeline
        if self.auto_map is None:
            self.auto_map = copy.deepcopy(AUTO_MAP)
        if self.custom_pipelines is None:
            self.custom_pipelines = copy.deepcopy(CUSTOM_PIPELINES)
            if self.source_lang and self.target_lang:
                # transformers 4.x's parametrized task name: pipeline("translation_en_to_de", ...)
                task = f"translation_{self.source_lang}_to_{self.target_lang}"
                self.custom_pipelines[task] = copy.deepcopy(CUSTOM_PIPELINES["translation"])
        super().__post_init__(**kwargs)
        self._check_values()

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """transformers' reader of a saved config (a config.json's fields), which keeps every field as written."""
        reading = _READING_A_SAVED_CONFIG.set(True)
        try:
            return super().from_dict(config_dict, **kwargs)
        finally:
            _READING_A_SAVED_CONFIG.reset(reading)

    @classmethod
    def _dict_from_json_file(cls, json_file):
        """transformers' reader of config.json, after the file's size and nesting are checked (`check_json_file`)."""
        check_json_file(json_file)
        return super()._dict_from_json_file(json_file)

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "VaswaniConfig":
        """A config from one of the named sizes (`tiny`, `small`, `base`, `big`), with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; the presets are {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def estimated_parameters(self) -> int:
        """About how many numbers the encoder-decoder holds (embeddings, a position table, attention, feed-forward,
        relative-position biases), before building it: what the size bounds and the memory check compare. Untied, the
        model holds four vocabulary matrices: the shared one, the encoder's, the decoder's and the output projection."""
        d = self.d_model
        encoder = self.encoder_layers * (4 * d * d + 2 * d * self.encoder_ffn_dim)
        decoder = self.decoder_layers * (8 * d * d + 2 * d * self.decoder_ffn_dim)
        heads = self.encoder_attention_heads + 2 * self.decoder_attention_heads
        relative = (2 * self.relative_attention_max_distance + 1) * heads
        embeddings = self.vocab_size * d * (1 if self.tie_word_embeddings else 4)
        return embeddings + self.max_position_embeddings * d + encoder + decoder + relative

    def _check_values(self):
        sizes = (
            "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings",
            "relative_attention_max_distance",
        )
        for name in sizes:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
            # a config can come from anywhere (the Hub): bound what it makes the model allocate or build
            if value > MAX_SIZES[name]:
                raise ValueError(
                    f"`{name}` is {value:,}, more than this model allows ({MAX_SIZES[name]:,}): a config that asks "
                    "for it is damaged or hostile, and building it would exhaust memory or time."
                )
        gigabytes = 4 * self.estimated_parameters() / 1e9
        if gigabytes > MAX_FP32_GIGABYTES:
            raise ValueError(
                f"This config describes a model of about {self.estimated_parameters():,} parameters ({gigabytes:,.0f} "
                f"GB in fp32), more than the {MAX_FP32_GIGABYTES} GB this project allows: check d_model, the layer "
                "counts, the feed-forward sizes and vocab_size."
            )
        for heads in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, heads):
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{heads}` ({getattr(self, heads)}): "
                    "each head works in d_model / heads dimensions."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout", "classifier_dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")
        for name, allowed in (
            ("position_embedding_type", POSITION_EMBEDDING_TYPES),
            ("layer_norm_position", LAYER_NORM_POSITIONS),
            ("activation_function", ACTIVATIONS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {list(allowed)}, got {getattr(self, name)!r}.")
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"`d_model` must be even for sinusoidal positions (sin/cos pairs), got {self.d_model}.")
        eps = self.layer_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0.0 < eps < float("inf"):
            # an infinite epsilon divides every normalized value to zero: the model would ignore its input. Large
            # finite ones are allowed: transformers' own test helpers set 1.0 to make comparisons less noisy.
            raise ValueError(f"`layer_norm_eps` must be a finite positive number (the paper's 1e-5), got {eps!r}.")
        self._check_token_ids()

    def _check_token_ids(self):
        """Every special-token id (`pad_token_id`, `eos_token_id`, ... and any other `*_token_id`) indexes the
        embedding table: an id outside it fails deep inside the model, or silently pads with a wrong row."""
        names = [name for name in vars(self) if name.endswith("_token_id") and not name.startswith("_")]
        for name in names:
            value = getattr(self, name)
            token_ids = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
            if not all(self._in_vocabulary(token_id) for token_id in token_ids):
                raise ValueError(
                    f"`{name}` is {value!r}, outside the vocabulary: a special-token id must be an integer from 0 to "
                    f"{self.vocab_size - 1} (vocab_size={self.vocab_size}), or None."
                )

    def _in_vocabulary(self, token_id) -> bool:
        return isinstance(token_id, int) and not isinstance(token_id, bool) and 0 <= token_id < self.vocab_size


# What a folder entry is, where it is not a regular file or a folder (links followed): never opened when a model
# is read, since opening a FIFO blocks until something writes to it, and a device never ends.
_SPECIAL_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
MAX_FOLDER_ENTRIES = 100_000  # entries of a model folder looked at; a model holds a few dozen


def special_kind(path) -> str | None:
    """What makes `path` unreadable as a file of a model, in words: a FIFO, a device, a socket (links
    followed), or a loop of symbolic links; None for a regular file, a folder, or nothing there."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return None  # nothing there (a dangling link is missing to every reader)
    return next((kind for test, kind in _SPECIAL_KINDS if test(mode)), None)


def check_regular_files(folder) -> None:
    """Refuse a model or tokenizer folder holding an entry that is not a regular file or a folder (a FIFO, a
    device, a socket, a loop of symbolic links), before anything opens one: OSError naming it. A FIFO named
    model.safetensors blocked every reader forever in open(); one named config.json made transformers answer
    "Unrecognized model"."""
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_FOLDER_ENTRIES:
                    break
                try:
                    if entry.is_file() or entry.is_dir():  # (links followed)
                        continue
                except OSError:  # a loop of links
                    pass
                kind = special_kind(entry.path)
                if kind is not None:
                    raise OSError(f"{entry.path} is {kind}, not a regular file: a model's files "
                                  "are read only as regular files. Replace it with the file itself (save or "
                                  "download the model again).")
    except (FileNotFoundError, NotADirectoryError):
        return


def check_json_file(path) -> None:
    """Refuse a JSON file of a model that is larger or more deeply nested than any this project writes, or that
    is not a regular file (`special_kind`), before anything opens or parses it: ValueError naming the file.
    tokenizer.json may be larger than the others (it holds the vocabulary)."""
    kind = special_kind(path)
    if kind is not None:
        raise ValueError(f"{path} is {kind}, not a regular file: it is not opened. Replace it with the file itself "
                         "(save or download the model again).")
    name = os.path.basename(os.fspath(path))
    limit = MAX_VOCABULARY_JSON_BYTES if name == "tokenizer.json" else MAX_JSON_BYTES
    size = os.path.getsize(path)
    if size > limit:
        raise ValueError(
            f"{path} is {size:,} bytes, more than the {limit:,} a model's {name} may have: the file is damaged "
            "or not what it claims to be. Save or download the model again."
        )
    with open(path, encoding="utf-8", errors="replace") as file:
        depth = json_nesting_depth(file.read(), stop_above=MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(
            f"{path} is nested more than {MAX_JSON_DEPTH} levels deep (the files of a model are nested a few "
            "levels): the file is damaged or hostile, and parsing it would exhaust the interpreter's stack. Save or "
            "download the model again."
        )


def json_nesting_depth(text: str, stop_above: int | None = None) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count), read without
    parsing it; counting stops once the depth passes `stop_above`."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


# set while `VaswaniConfig.from_dict` builds a config from saved fields
_READING_A_SAVED_CONFIG = contextvars.ContextVar("reading_a_saved_config", default=False)


def misspelled_fields(names, config_class=None) -> dict[str, str]:
    """Of the field names a user typed, each that is not a field of the config but a near miss of one (almost
    certainly a typo that would otherwise be kept as an unused attribute), with the field it misses."""
    known = [f.name for f in fields(config_class or VaswaniConfig)]
    close = {name: difflib.get_close_matches(name, known, n=1, cutoff=0.85) for name in names if name not in known}
    return {name: matches[0] for name, matches in close.items() if matches}


__all__ = [
    "LAYER_NORM_POSITIONS",
    "MAX_SIZES",
    "POSITION_EMBEDDING_TYPES",
    "PRESETS",
    "VaswaniConfig",
    "check_json_file",
    "check_regular_files",
    "json_nesting_depth",
    "misspelled_fields",
    "special_kind",
]
