"""Decoding a folder exported by `vaswani.serving.onnx_export` (encoder.onnx, decoder.onnx with its cache) with
onnxruntime.

    from vaswani.serving.onnx_generation import OnnxGenerator
    OnnxGenerator("onnx/multi30k_en_de")(["A man is riding a horse."])   # -> ["Ein Mann reitet auf einem Pferd."]
    OnnxGenerator("onnx/multi30k_en_de")(texts, num_beams=4, length_penalty=0.6, max_new_tokens=40)

`OnnxGenerator` runs greedy or beam search (`remote_code.search`, transformers' search step for step: length
penalty, early stopping, `no_repeat_ngram_size`, `min_length` / `min_new_tokens`) over decoder.onnx and its cache,
and gives the tokens of `model.generate(..., do_sample=False)` with the same settings; settings not given are read
from the folder's generation config, as `generate` reads them (the shipped translation models decode with 5 beams).
Sampling and the other logits processors (`repetition_penalty`, `bad_words_ids`, ...) are not implemented: a
generation config that asks for one is refused by name.

onnxruntime and onnx are optional dependencies: `pip install 'vaswani-transformer[onnx]'`.
"""

import json
from pathlib import Path

import numpy as np
import torch

from ..remote_code.search import SearchSettings, search
from .onnx_export import DECODER_FILE, ENCODER_FILE, import_onnx_runtime


# `generate` options that change which token the search picks; `OnnxGenerator` does not implement them, so a
# generation config that sets one (to anything but the neutral value) is refused rather than decoded differently
UNSUPPORTED_GENERATION_OPTIONS = {
    "do_sample": (None, False),
    "num_beam_groups": (None, 1),
    "encoder_no_repeat_ngram_size": (None, 0),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "bad_words_ids": (None, []),
    "suppress_tokens": (None, []),
    "begin_suppress_tokens": (None, []),
    "sequence_bias": (None, {}),
    "exponential_decay_length_penalty": (None,),
}


class OnnxGenerator:
    """Decoding of an exported folder with onnxruntime: greedy or beam search, with the tokens of
    `model.generate(input_ids, attention_mask=..., do_sample=False, ...)` with the same settings.

        generator = OnnxGenerator("onnx/multi30k_en_de", num_threads=1)
        generator(["A man is riding a horse."])                # texts -> texts, the generation config's settings
        generator(texts, num_beams=4, length_penalty=0.6)      # other settings, as generate takes them
        generator.generate(input_ids, attention_mask)          # token ids -> token ids, starting with the decoder start

    The search is `remote_code.search` (transformers' greedy and beam search, step for step) over decoder.onnx
    and its cache (`OnnxDecoder`). The settings default to the folder's generation config, as `generate`'s do: the
    shipped translation models decode with 5 beams. Needs onnxruntime, numpy and torch; the tokenizer (for texts)
    needs transformers.
    """

    def __init__(self, folder: str | Path, num_threads: int | None = None, tokenizer=None):
        onnxruntime = import_onnx_runtime()
        self.folder = Path(folder)
        for name in (ENCODER_FILE, DECODER_FILE, "config.json"):
            if not (self.folder / name).is_file():
                raise FileNotFoundError(
                    f"{self.folder} is not an exported ONNX folder: it has no {name}. Write one with "
                    "scripts/export_onnx.py (vaswani.serving.onnx_export.export_to_onnx)."
                )
        self.config = json.loads((self.folder / "config.json").read_text(encoding="utf-8"))
        generation_file = self.folder / "generation_config.json"
        self.generation_config = (
            json.loads(generation_file.read_text(encoding="utf-8")) if generation_file.is_file() else {}
        )
        _check_generation_options(self.generation_config)
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
            options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.encoder = onnxruntime.InferenceSession(str(self.folder / ENCODER_FILE), options, providers=providers)
        self.decoder = onnxruntime.InferenceSession(str(self.folder / DECODER_FILE), options, providers=providers)
        self.decoder_layers = sum(1 for i in self.decoder.get_inputs() if i.name.endswith(".decoder.key"))
        past_key = next(i for i in self.decoder.get_inputs() if i.name == "past_key_values.0.decoder.key")
        _, self.heads, _, self.head_dim = past_key.shape
        self._tokenizer = tokenizer

        def setting(name, default=None):
            value = self.generation_config.get(name)
            return self.config.get(name, default) if value is None else value

        self.decoder_start_token_id = setting("decoder_start_token_id")
        eos = setting("eos_token_id")
        self.eos_token_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        self.pad_token_id = setting("pad_token_id")
        self.max_positions = self.config.get("max_position_embeddings")

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        return self._tokenizer

    def default_max_new_tokens(self) -> int:
        """As `generate` reads the generation config: max_new_tokens, else max_length (default 20) minus the decoder
        start token."""
        if self.generation_config.get("max_new_tokens") is not None:
            return self.generation_config["max_new_tokens"]
        return self.generation_config.get("max_length", 20) - 1

    def __call__(self, texts: list[str], max_new_tokens: int | None = None, **settings) -> list[str]:
        """Texts -> texts; `settings` as `search_settings` takes them (num_beams, length_penalty, ...)."""
        encoded = self.tokenizer(list(texts), padding=True, truncation=True, return_tensors="np")
        generated = self.generate(encoded["input_ids"], encoded["attention_mask"], max_new_tokens, **settings)
        return self.tokenizer.batch_decode(generated, skip_special_tokens=True)

    def search_settings(
        self,
        max_new_tokens: int | None = None,
        *,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
        no_repeat_ngram_size: int | None = None,
        min_length: int | None = None,
        min_new_tokens: int | None = None,
        num_return_sequences: int | None = None,
    ) -> SearchSettings:
        """The search `generate` would run with these settings, each one not given read from the generation
        config (then transformers' default), lengths counting the decoder start token as `generate` counts them."""

        def setting(value, name, default):
            if value is not None:
                return value
            configured = self.generation_config.get(name)
            return default if configured is None else configured

        max_new_tokens = self.default_max_new_tokens() if max_new_tokens is None else max_new_tokens
        num_beams = setting(num_beams, "num_beams", 1)
        min_length = setting(min_length, "min_length", 0)
        min_new_tokens = setting(min_new_tokens, "min_new_tokens", 0)
        if min_new_tokens:
            min_length = max(min_length, 1 + min_new_tokens)
        return SearchSettings(
            max_length=1 + max_new_tokens,
            eos_token_ids=tuple(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            num_beams=num_beams,
            length_penalty=setting(length_penalty, "length_penalty", 1.0) if num_beams > 1 else 1.0,
            early_stopping=setting(early_stopping, "early_stopping", False) if num_beams > 1 else False,
            num_return_sequences=setting(num_return_sequences, "num_return_sequences", 1),
            no_repeat_ngram_size=setting(no_repeat_ngram_size, "no_repeat_ngram_size", 0),
            min_length=min_length,
        )

    def encode(self, input_ids, attention_mask) -> list[np.ndarray]:
        """encoder.onnx: the last hidden state, then each decoder layer's cross-attention key and value."""
        return self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})

    def empty_cache(self, batch: int) -> list[np.ndarray]:
        """The self-attention cache before the first step: a key and a value of length 0 for each decoder layer."""
        return [np.zeros((batch, self.heads, 0, self.head_dim), dtype=np.float32)] * (2 * self.decoder_layers)

    def decode(self, input_ids, encoder_attention_mask, self_cache: list, cross_cache: list):
        """decoder.onnx, one call: the new token(s) (batch, new), the encoder's attention mask, the self-attention cache
        (key, value per layer) and the cross-attention keys and values from `encode` -> the logits (batch, new,
        vocab) and the self-attention cache grown by the new tokens."""
        feed = {"input_ids": np.asarray(input_ids, dtype=np.int64), "encoder_attention_mask": encoder_attention_mask}
        for index in range(self.decoder_layers):
            feed[f"past_key_values.{index}.decoder.key"] = self_cache[2 * index]
            feed[f"past_key_values.{index}.decoder.value"] = self_cache[2 * index + 1]
            feed[f"past_key_values.{index}.encoder.key"] = cross_cache[2 * index]
            feed[f"past_key_values.{index}.encoder.value"] = cross_cache[2 * index + 1]
        logits, *self_cache = self.decoder.run(None, feed)
        return logits, self_cache

    def generate(
        self, input_ids, attention_mask=None, max_new_tokens: int | None = None, return_logits: bool = False, **settings
    ):
        """Greedy or beam search from token ids (arrays or tensors of shape (batch, source)); `settings` as
        `search_settings` takes them. Returns the ids (batch * num_return_sequences, 1 + generated), starting with the
        decoder start token, padded as `generate` pads; with `return_logits` (greedy only), also the logits of each
        step (a list of (batch, vocab) arrays as `generate(output_logits=True)` gives them, NaN in the rows of the
        inputs that have ended)."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        attention_mask = (
            np.ones_like(input_ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
        )
        search_settings = self.search_settings(max_new_tokens, **settings)
        if self.decoder_start_token_id is None:
            raise ValueError(f"{self.folder}: the generation config and config.json set no decoder_start_token_id.")
        if return_logits and search_settings.num_beams > 1:
            raise ValueError("return_logits=True records the logits of greedy search: pass num_beams=1 with it.")
        self.check_length(input_ids.shape[1], "input")
        _, *cross_cache = self.encode(input_ids, attention_mask)
        decoder = OnnxDecoder(self, cross_cache, attention_mask, search_settings.num_beams, return_logits)
        with torch.no_grad():
            sequences = search(decoder, input_ids.shape[0], self.decoder_start_token_id, search_settings).numpy()
        return (sequences, decoder.step_logits) if return_logits else sequences

    def check_length(self, length: int, what: str) -> None:
        if self.max_positions is not None and length > self.max_positions:
            raise ValueError(
                f"The {what} is {length} tokens long, but this model accepts at most max_position_embeddings="
                f"{self.max_positions}. Truncate the input or generate fewer tokens."
            )


class OnnxDecoder:
    """decoder.onnx and its cache as `remote_code.search` drives a decoder (`step`, `keep`): `num_beams` rows
    per input, the cross-attention keys and values and the encoder's mask repeated for each. Choosing beams gathers the
    self-attention cache by row, as `generate` reorders its cache; an input whose search is over leaves the batch.

    With `record_logits` (greedy search), `step_logits` holds each step's logits (batch, vocab), NaN in the rows of
    the inputs that have ended (`generate` computes those rows, but they choose nothing)."""

    def __init__(self, generator: OnnxGenerator, cross_cache: list, attention_mask, beams: int, record_logits=False):
        self.generator = generator
        self.cross_cache = [np.repeat(cache, beams, axis=0) for cache in cross_cache]
        self.attention_mask = np.repeat(attention_mask, beams, axis=0)
        self.self_cache = generator.empty_cache(self.attention_mask.shape[0])
        self.fed = 0  # tokens fed so far (the positions the cache holds)
        self.record_logits = record_logits
        self.step_logits = []
        self.batch_rows = self.attention_mask.shape[0]
        self.rows = np.arange(self.batch_rows)  # where each row still decoding started

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.generator.check_length(self.fed + 1, "target (with what was generated so far)")
        logits, self.self_cache = self.generator.decode(
            tokens.numpy()[:, None], self.attention_mask, self.self_cache, self.cross_cache
        )
        logits = np.ascontiguousarray(logits[:, -1, :])
        self.fed += 1
        if self.record_logits:
            every_row = np.full((self.batch_rows, logits.shape[1]), np.nan, dtype=np.float32)
            every_row[self.rows] = logits
            self.step_logits.append(every_row)
        return torch.from_numpy(logits)

    def keep(self, rows: torch.Tensor, inputs: torch.Tensor | None) -> None:
        rows = rows.numpy()
        self.rows = self.rows[rows]
        self.self_cache = [cache[rows] for cache in self.self_cache]
        if inputs is not None:  # the rows of an input hold the same cross-attention keys and values
            self.cross_cache = [cache[rows] for cache in self.cross_cache]
            self.attention_mask = self.attention_mask[rows]


def _check_generation_options(generation_config: dict) -> None:
    for name, neutral in UNSUPPORTED_GENERATION_OPTIONS.items():
        value = generation_config.get(name)
        if value not in neutral:
            raise ValueError(
                f"The generation config sets {name}={value!r}, which the ONNX decoder does not implement: "
                f"its tokens would differ from generate()'s. Remove it from generation_config.json (allowed: "
                f"{' or '.join(repr(v) for v in neutral)}), or decode with the PyTorch model."
            )


def onnx_greedy_generate(folder: str | Path, inputs, max_new_tokens: int | None = None, num_threads: int | None = None):
    """Greedy decoding of an exported folder: texts -> texts, or token ids (with pad token padding) -> token ids."""
    generator = OnnxGenerator(folder, num_threads=num_threads)
    if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str)):
        return generator([inputs] if isinstance(inputs, str) else list(inputs), max_new_tokens, num_beams=1)
    input_ids = np.asarray(inputs, dtype=np.int64)
    attention_mask = None if generator.pad_token_id is None else (input_ids != generator.pad_token_id).astype(np.int64)
    return generator.generate(input_ids, attention_mask, max_new_tokens, num_beams=1)


__all__ = ["OnnxDecoder", "OnnxGenerator", "onnx_greedy_generate"]
