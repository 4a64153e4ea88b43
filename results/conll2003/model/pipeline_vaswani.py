"""Translation, summarization, text-to-text and token-classification pipelines for the Vaswani models.

transformers 5 removed the first three tasks from its own `pipeline()`. A model of this project declares them in
its config's `custom_pipelines`, and `pipeline("translation", model=DIR, trust_remote_code=True)` loads the classes
below from the folder's own copy of this file. They behave as transformers 4.x's pipelines did:

    translator(text)                      -> [{"translation_text": "..."}]
    translator([text, text], batch_size=2) -> [{"translation_text": "..."}, {"translation_text": "..."}]
    translator(text, num_beams=4, max_new_tokens=40, length_penalty=0.6)   # any `generate()` argument
    translator(text, return_tensors=True) -> [{"translation_token_ids": tensor([...])}]

`SummarizationPipeline` answers with "summary_text", `Text2TextGenerationPipeline` with "generated_text".

A list of texts called with `batch_size` > 1 (per call or at construction) is run from the longest text to the
shortest, so that each batch holds texts of about one length, and answered in the caller's order: the same results,
sooner (`in_length_order`; a tagger's scores as near as batching leaves them, see TokenClassificationPipeline).
Generators, datasets, one text and `batch_size` 1 run as given.

A tagger (VaswaniForTokenClassification) declares `TokenClassificationPipeline`: transformers' own, told where the
tokenizer's words start, so that every aggregation strategy groups the pieces of each word exactly; its lists are
batched by length as the others' are.

One pipeline may be called from several threads at once: a call keeps what it needs (its target language, its
settings) to itself and sets nothing on the shared tokenizer or model. The tokenizer is called with the same
arguments on every call, so it never switches state between calls (transformers' fast tokenizers set their truncation
on the shared backend at each call), and the target-language tag is put first by the call itself.

This file is copied into every saved model and imported there on its own (where the `vaswani` package may not be
installed), so it imports only the standard library, torch, transformers and tokenizers (which transformers needs),
and `vocabulary.py` beside it, which models carry with it.
"""

import bisect
import re
import warnings

import torch
from transformers import Pipeline
from transformers import TokenClassificationPipeline as TransformersTokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy

from .vocabulary import check_vocabulary


# The paper's bound on the output length (section 6.1): "maximum output length to input length + 50, but terminate
# early when possible". Used when neither the caller nor the model's generation config sets a length.
EXTRA_OUTPUT_TOKENS = 50


def check_text(value, where: str) -> None:
    if not isinstance(value, str):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{where} must be a string, got {type(value).__name__}: {shown}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{where} is not valid text ({error.reason}: {value[error.start:error.end]!a}).") from None


def in_length_order(call, inputs: list, lengths: list[int], batch_size) -> list:
    """`call(inputs)`, one result per input in the order of `inputs`, where `call` was given the inputs from the
    longest to the shortest (by `lengths`; inputs of one length keep their order) when they are batched
    (`batch_size` > 1): a batch is padded to its longest input, and a generating model decodes it until its longest
    output ends, so batches of like lengths waste less. The order is this call's own; nothing shared is set."""
    if not isinstance(batch_size, int) or batch_size <= 1 or len(inputs) <= 1:
        return call(inputs)
    order = sorted(range(len(inputs)), key=lambda index: -lengths[index])
    results = [None] * len(inputs)
    for index, result in zip(order, call([inputs[index] for index in order]), strict=True):
        results[index] = result
    return results


def call_batch_size(pipeline: Pipeline, kwargs: dict):
    """The batch size a call of `pipeline` runs with: the call's, else the one given at construction."""
    batch_size = kwargs.get("batch_size")
    return batch_size if batch_size is not None else getattr(pipeline, "_batch_size", None)


# The generation settings a call or a model's generation config may give, by the values they allow: whole numbers
# from 1 (from 0), finite numbers (from 0, or above 0).
POSITIVE_COUNTS = ("num_beams", "num_return_sequences", "max_new_tokens", "max_length", "num_beam_groups", "top_k")
COUNTS = ("min_length", "min_new_tokens", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size")
FINITE = ("length_penalty", "diversity_penalty")
POSITIVE = ("temperature", "top_p", "repetition_penalty", "encoder_repetition_penalty")


def check_generation_values(generate_kwargs: dict, generation_config=None) -> None:
    """Every generation setting of a call (`generate_kwargs`), or else of the model's generation config (from its
    generation_config.json), holds a value `generate()` can use, or one line names it: a NaN length penalty decodes
    without a word, and `num_beams: -3` in a folder's generation config failed deep inside `generate()`."""
    for name in (*POSITIVE_COUNTS, *COUNTS, *FINITE, *POSITIVE):
        given = name in generate_kwargs
        value = generate_kwargs[name] if given else getattr(generation_config, name, None)
        if value is None:
            continue
        where = "" if given else "the model's generation config (generation_config.json): "
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name in POSITIVE_COUNTS + COUNTS:
            least = 1 if name in POSITIVE_COUNTS else 0
            if not number or not isinstance(value, int) or value < least:
                raise ValueError(f"{where}{name} must be a whole number >= {least}, got {value!r}.")
        elif not number or value != value or value in (float("inf"), float("-inf")) or (
                name in POSITIVE and value <= 0):
            raise ValueError(f"{where}{name} must be a finite number{' above 0' if name in POSITIVE else ''}, got "
                             f"{value!r}.")


class EncodedText:
    """A text and its model inputs, encoded together with the other texts of a call (`preprocess_many`):
    `preprocess` returns the inputs as they are."""

    __slots__ = ("text", "inputs")

    def __init__(self, text: str, inputs: dict):
        self.text, self.inputs = text, inputs


class Text2TextGenerationPipeline(Pipeline):
    """Text in, generated text out, with an encoder-decoder model's `generate()`.

    Call arguments (at construction or per call):
        truncation: cut inputs longer than the model accepts (default True; they are cut to the model's maximum
            length, with one warning). With False, such an input is an error.
        return_text / return_tensors: put the decoded text / the generated token ids in each result (default: text).
        clean_up_tokenization_spaces: passed to `tokenizer.decode`.
        batch_size, num_workers: as for every transformers pipeline.
        anything else: a `generate()` argument (num_beams, max_new_tokens, length_penalty, num_return_sequences, ...).

    An empty (or blank) input gives an empty output without asking the model.
    """

    return_name = "generated"
    default_task = "text2text-generation"

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def __init__(self, *args, **kwargs):
        kwargs["task"] = kwargs.get("task") or self.default_task
        self._warned_about_truncation = False
        super().__init__(*args, **kwargs)
        if self.tokenizer is None:
            raise ValueError(f"{type(self).__name__} needs a tokenizer: pass `tokenizer=` with the model.")
        if not self.model.can_generate() or not getattr(self.model.config, "is_encoder_decoder", False):
            raise ValueError(
                f"{type(self).__name__} needs an encoder-decoder model that can generate (such as "
                f"VaswaniForConditionalGeneration), got {type(self.model).__name__}."
            )
        check_vocabulary(self.model, self.tokenizer)

    # -- arguments ------------------------------------------------------------------------------------------------

    def _sanitize_parameters(
        self,
        return_text=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        truncation=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        check_generation_values(generate_kwargs, self.model.generation_config)
        self._check_generation_lengths(generate_kwargs)

        postprocess_params = {}
        if return_text is not None:
            postprocess_params["return_text"] = return_text
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is False and not return_tensors:
            raise ValueError("With return_text=False, pass return_tensors=True: otherwise there is nothing to return.")
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def _max_positions(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    def _max_source_length(self) -> int:
        """The longest input the model accepts: its position limit, or the tokenizer's if that is lower."""
        limits = [self._max_positions(), getattr(self.tokenizer, "model_max_length", None)]
        # a tokenizer without a limit reports a huge number as its model_max_length, so the model's limit wins
        return min(limit for limit in limits if isinstance(limit, int) and limit > 0)

    def _check_generation_lengths(self, generate_kwargs: dict) -> None:
        """The decoder reads its start token plus every generated token, and the model accepts at most
        max_position_embeddings positions: say so here instead of failing half-way through `generate()`."""
        max_positions = self._max_positions()
        if max_positions is None:
            return
        new_tokens = generate_kwargs.get("max_new_tokens")
        if new_tokens is not None and new_tokens > max_positions - 1:
            raise ValueError(
                f"max_new_tokens={new_tokens} is more than this model can generate: max_position_embeddings="
                f"{max_positions} leaves room for at most {max_positions - 1} new tokens after the start token."
            )
        max_length = generate_kwargs.get("max_length")
        if max_length is not None and max_length > max_positions:
            raise ValueError(
                f"max_length={max_length} is more than this model accepts (max_position_embeddings={max_positions})."
            )

    # -- the three steps of a pipeline ------------------------------------------------------------------------

    def __call__(self, inputs, **kwargs):
        """Generate for one text (a list of results) or a list of texts (a list with one result per text, or a
        list of lists with `num_return_sequences` > 1; batched, the texts run from the longest to the shortest).
        Datasets and generators are streamed as in transformers."""
        if inputs is None:
            raise TypeError(f"{type(self).__name__} needs a string or a list of strings, got None.")
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if not isinstance(inputs, list):
            return super().__call__(inputs, **kwargs)
        if not inputs:
            return []
        for index, text in enumerate(inputs):
            check_text(text, f"Input {index}")
        # Length in characters: en->de Multi30k validation (1,014 captions, batch_size 32, beam 5, one thread), six
        # rounds each, 131.7 sentences/s as given, 143.0 sorted by characters, 141.6 by tokens (the tokenizer's
        # backend, 35 ms for the captions), the same translations; SAMSum validation (818 dialogues, beam 4) 1.12x.
        call = super().__call__
        results = in_length_order(lambda texts: call(self._encoded(texts, kwargs), **kwargs), inputs,
                                  [len(text) for text in inputs], call_batch_size(self, kwargs))
        if all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results

    def _encoded(self, texts: list[str], kwargs: dict) -> list["EncodedText"]:
        """The texts of a call encoded in one tokenizer call, with the call's preprocessing arguments (those given at
        construction, overridden by the call's), each handed to `preprocess` as it is."""
        call_kwargs = {key: value for key, value in kwargs.items() if key not in ("batch_size", "num_workers")}
        preprocess_params = {**self._preprocess_params, **self._sanitize_parameters(**call_kwargs)[0]}
        encoded = self.preprocess_many(texts, **preprocess_params)
        return [EncodedText(text, inputs) for text, inputs in zip(texts, encoded)]

    def preprocess(self, text, truncation=True):
        if isinstance(text, EncodedText):
            return text.inputs
        return self.preprocess_many([text], truncation)[0]

    def preprocess_many(self, texts: list[str], truncation=True) -> list[dict]:
        """`[self.preprocess(text) for text in texts]` with one tokenizer call for all of them (a list call: 49-85 us
        a caption against 83-127 us called one by one, en->de validation, Zen 4). A list given to the pipeline, and
        the corpus command's batches, are encoded so."""
        return self._encode(texts, truncation)

    def _encode(self, texts: list[str], truncation: bool, first_ids: list[int] | None = None,
                tags: frozenset[int] = frozenset()) -> list[dict]:
        """The model inputs for each text: its token ids, cut to the length the model accepts (or refused, without
        `truncation`). With `first_ids` (a language tag), any tag the tokenizer put first (one of the ids `tags`) is
        replaced by them."""
        for text in texts:
            check_text(text, "The input")
        max_length = self._max_source_length()
        # Always these arguments (see the module's docstring). Two tokens of headroom: one tells whether the text was
        # longer than the model accepts, one stands for a language tag of the tokenizer's that the call replaces.
        encoding = self.tokenizer(list(texts), truncation=True, max_length=max_length + 2,
                                  return_special_tokens_mask=True)
        return [self._inputs(text, ids, special, max_length, truncation, first_ids, tags)
                for text, ids, special in zip(texts, encoding["input_ids"], encoding["special_tokens_mask"])]

    def _inputs(self, text: str, ids: list[int], special: list[int], max_length: int, truncation: bool,
                first_ids: list[int] | None, tags: frozenset[int]) -> dict:
        """One text's model inputs from its tokens (`_encode`)."""
        if first_ids is not None:
            kept = [index for index, token in enumerate(ids) if not (special[index] and token in tags)]
            ids, special = list(first_ids) + [ids[i] for i in kept], [1] * len(first_ids) + [special[i] for i in kept]
        if len(ids) > max_length:
            if not truncation:
                raise ValueError(
                    f"An input is longer than the {max_length} tokens this model accepts. Shorten it, or pass "
                    "truncation=True to cut it to that length."
                )
            self._warn_about_truncation_once(max_length)
            ids = cut_text_tokens(ids, special, max_length)
        input_ids = torch.tensor([ids], dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "source_is_blank": not text.strip(),
        }

    def _language_tags(self) -> dict[str, str]:
        """Language code -> tag token (`>>de<<`), for a tokenizer with language tags; {} for others."""
        return dict(getattr(self.tokenizer, "language_tags", None) or {})

    def _language_tag_ids(self) -> dict[str, int]:
        return {code: self.tokenizer.convert_tokens_to_ids(tag) for code, tag in self._language_tags().items()}

    def _warn_about_truncation_once(self, max_length: int) -> None:
        if not self._warned_about_truncation:
            warnings.warn(
                f"An input was longer than the {max_length} tokens this model accepts and was truncated to that "
                "length (this warning is shown once per pipeline).",
                UserWarning,
                stacklevel=4,
            )
            self._warned_about_truncation = True

    def _forward(self, model_inputs, **generate_kwargs):
        input_ids = model_inputs["input_ids"]
        if "max_new_tokens" not in generate_kwargs and "max_length" not in generate_kwargs:
            set_by_model = self.model.generation_config.to_diff_dict()
            if "max_new_tokens" not in set_by_model and "max_length" not in set_by_model:
                bound = input_ids.shape[1] + EXTRA_OUTPUT_TOKENS
                max_positions = self._max_positions()
                if max_positions is not None:
                    bound = min(bound, max_positions - 1)
                generate_kwargs = {**generate_kwargs, "max_new_tokens": bound}
        output = self.model.generate(
            input_ids=input_ids, attention_mask=model_inputs["attention_mask"], **generate_kwargs
        )
        output_ids = output if isinstance(output, torch.Tensor) else output.sequences
        inputs_in_batch = input_ids.shape[0]
        return {
            # (inputs, returned sequences per input, length)
            "output_ids": output_ids.reshape(inputs_in_batch, output_ids.shape[0] // inputs_in_batch, -1),
            "source_is_blank": model_inputs["source_is_blank"],
        }

    def postprocess(self, model_outputs, return_text=None, return_tensors=False, clean_up_tokenization_spaces=None):
        if return_text is None:
            return_text = not return_tensors
        records = []
        for ids in model_outputs["output_ids"][0]:
            ids = self._without_batch_padding(ids)
            if model_outputs["source_is_blank"]:
                ids = ids.new_tensor([self._decoder_start_token_id(), self.model.generation_config.eos_token_id])
            record = {}
            if return_tensors:
                record[f"{self.return_name}_token_ids"] = ids
            if return_text:
                record[f"{self.return_name}_text"] = self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            records.append(record)
        return records

    def _without_batch_padding(self, ids: torch.Tensor) -> torch.Tensor:
        """Cut a sequence after its first end-of-sequence token: what follows is padding that only batching adds,
        so the ids returned for a text do not depend on `batch_size`."""
        eos = self.model.generation_config.eos_token_id
        eos = set(eos) if isinstance(eos, (list, tuple)) else {eos}
        for end, token in enumerate(ids[1:].tolist(), start=2):  # (a list: a few us, where tensor ops take ~10)
            if token in eos:
                return ids[:end]
        return ids

    def _decoder_start_token_id(self) -> int:
        start = self.model.generation_config.decoder_start_token_id
        return start if start is not None else self.model.config.decoder_start_token_id


def cut_text_tokens(ids: list[int], special: list[int], length: int) -> list[int]:
    """`ids` cut to `length` tokens by dropping text tokens from the end of the text, keeping the special tokens
    around it (a language tag before, `</s>` after), as the tokenizer's own truncation does."""
    text_positions = [index for index, flag in enumerate(special) if not flag]
    if not text_positions:
        return ids[:length]
    start, end = text_positions[0], text_positions[-1] + 1
    room = max(length - start - (len(ids) - end), 0)
    return ids[:start] + ids[start : start + room] + ids[end:]


class SummarizationPipeline(Text2TextGenerationPipeline):
    """Summarize texts: `[{"summary_text": ...}]` per input."""

    return_name = "summary"
    default_task = "summarization"


class TranslationPipeline(Text2TextGenerationPipeline):
    """Translate texts: `[{"translation_text": ...}]` per input.

    The direction is the model's, recorded in its config (`source_lang`, `target_lang`) and shown by the pipeline
    (`pipe.src_lang`, `pipe.tgt_lang`). `src_lang` / `tgt_lang` may be passed as in transformers 4.x (or in a task
    name such as "translation_en_to_de"); a direction the model was not trained for is an error. When the tokenizer
    has language tags (`>>de<<`), the tag of the target language is put before each source text.
    """

    return_name = "translation"
    default_task = "translation"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from_task = re.fullmatch(r"translation_(\w+)_to_(\w+)", self.task or "")
        config = self.model.config
        self.src_lang = self._preprocess_params.get("src_lang") or (from_task and from_task[1]) or getattr(
            config, "source_lang", None
        )
        self.tgt_lang = self._preprocess_params.get("tgt_lang") or (from_task and from_task[2]) or getattr(
            config, "target_lang", None
        )
        self._check_direction(self.src_lang, self.tgt_lang)

    def __repr__(self):
        return f"{super().__repr__()} translating {self.src_lang or '?'} -> {self.tgt_lang or '?'}"

    def _sanitize_parameters(self, src_lang=None, tgt_lang=None, **kwargs):
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(**kwargs)
        self._check_direction(src_lang, tgt_lang)
        if src_lang is not None:
            preprocess_params["src_lang"] = src_lang
        if tgt_lang is not None:
            preprocess_params["tgt_lang"] = tgt_lang
        # the tokenizer's language tags, read once per call (not once per text: reading them walks its special tokens)
        preprocess_params["tag_ids"] = self._language_tag_ids()
        return preprocess_params, forward_params, postprocess_params

    def _check_direction(self, src_lang, tgt_lang) -> None:
        config = self.model.config
        known_source, known_target = getattr(config, "source_lang", None), getattr(config, "target_lang", None)
        trained_for = f"{known_source or '?'} -> {known_target or '?'} (config.source_lang / config.target_lang)"
        if src_lang is not None and known_source is not None and src_lang != known_source:
            raise ValueError(
                f"src_lang={src_lang!r}: this model translates {trained_for}; it was not trained to translate from "
                f"{src_lang!r}."
            )
        if tgt_lang is None:
            return
        tags = self._language_tags()
        if tags and tgt_lang not in tags:
            raise ValueError(
                f"tgt_lang={tgt_lang!r}: the tokenizer has language tags for {sorted(tags)} only; the model cannot be "
                f"asked for {tgt_lang!r}."
            )
        if not tags and known_target is not None and tgt_lang != known_target:
            raise ValueError(
                f"tgt_lang={tgt_lang!r}: this model translates {trained_for}; it was not trained to translate into "
                f"{tgt_lang!r}."
            )

    def preprocess(self, text, truncation=True, src_lang=None, tgt_lang=None, tag_ids=None):
        if isinstance(text, EncodedText):
            return text.inputs
        return self.preprocess_many([text], truncation, src_lang, tgt_lang, tag_ids)[0]

    def preprocess_many(self, texts: list[str], truncation=True, src_lang=None, tgt_lang=None, tag_ids=None):
        """With language tags (`tag_ids`, the call's reading of the tokenizer's), the call's target-language tag goes
        first (a ">>de<<" typed in the text stays text); the tag is this call's own, never set on the shared
        tokenizer, which other threads may be using."""
        tag_ids = tag_ids if tag_ids is not None else self._language_tag_ids()
        if not tag_ids:
            return self._encode(texts, truncation)
        code = tgt_lang or self.tgt_lang
        return self._encode(texts, truncation, first_ids=[tag_ids[code]] if code else [],
                            tags=frozenset(tag_ids.values()))


class TokenClassificationPipeline(TransformersTokenClassificationPipeline):
    """transformers' token-classification pipeline, given a text cut into words as the tagger's training data was.

    A tagger learns from words ("New", "York", "." in CoNLL-2003), each tokenized on its own and marked as a word start
    ("▁."), and every later piece of a word is trained as inside it. A text tokenized whole glues a full stop to the
    word before it ("York." gives the pieces "▁York", "."), a piece the tagger only ever saw inside a word ("U.S.") and
    so tags as the entity's continuation: "New York." came out as the entity. So a text is first cut into CoNLL-2003's
    words (`conll_words`: "York." is "York" and "."; "U.S." and "D.C." stay whole inside a text) and tokenized as
    those words, as pre-split words (`is_split_into_words=True`) are; every entity is still the exact span of its
    words in the text as given (`text[start:end] == word`, spaces and line breaks between words included). A call
    that gives its own `offset_mapping` keeps the text's own tokenization, its words cut as `conll_words` cuts them.

    transformers groups the pieces of a word (aggregation_strategy "first", "average", "max") only for tokenizers
    that mark the pieces that continue a word (WordPiece's "##", a `continuing_subword_prefix`); for any other it
    guesses from the spaces around each piece and warns "Tokenizer does not support real words, using fallback
    heuristic". This project's tokenizer marks the piece that starts a word ("▁") instead, so here the pieces are
    grouped by the words above (`conll_words`), or by those of a pre-split input (`is_split_into_words=True`). A piece
    belongs to the word its first character is in; pieces that stand for
    spaces or line breaks only belong to no word and are left out. An entity's `word` is its text as it stands in the
    input (`text[start:end]`). A list of texts (or of pre-split words) batched (`batch_size` > 1) runs from the
    longest to the shortest and is answered in its own order. Everything else is transformers' pipeline unchanged.
    """

    def __call__(self, inputs, **kwargs):
        # CoNLL-2003 validation (3,250 sentences, batch_size 32, one thread): 190 sentences/s as given, 302 sorted,
        # the same entities; a score moves with the padding its batch gets, sorted or not (243 texts with a score up
        # to 8e-7 from the unsorted call's; on the first 300, batch_size 1's up to 7e-7 from the unsorted call's).
        lengths = None
        # (offsets given by the caller are given per input, in the caller's order: such a call runs as given)
        if isinstance(inputs, list) and "offset_mapping" not in kwargs:
            if not kwargs.get("is_split_into_words"):
                if all(isinstance(text, str) for text in inputs):
                    lengths = [len(text) for text in inputs]
            # pre-split words: a list of word lists (a list of words alone is one text)
            elif all(isinstance(words, list) and all(isinstance(word, str) for word in words) for words in inputs):
                lengths = [sum(len(word) + 1 for word in words) for words in inputs]
        if lengths is None:
            return super().__call__(inputs, **kwargs)
        call = super().__call__
        return in_length_order(lambda texts: call(texts, **kwargs), inputs, lengths, call_batch_size(self, kwargs))

    def gather_pre_entities(
        self,
        sentence,
        input_ids,
        scores,
        offset_mapping,
        special_tokens_mask,
        aggregation_strategy,
        word_ids=None,
        word_to_chars_map=None,
    ):
        # SIMPLE: transformers' guess at the word starts, and its warning, are replaced below
        pre_entities = super().gather_pre_entities(
            sentence, input_ids, scores, offset_mapping, special_tokens_mask, AggregationStrategy.SIMPLE,
            word_ids=word_ids, word_to_chars_map=word_to_chars_map,
        )
        if offset_mapping is None:
            return pre_entities
        pre_entities = [entity for entity in pre_entities if sentence[entity["start"] : entity["end"]].strip()]
        if word_ids is not None and word_to_chars_map is not None:
            words = [word_ids[entity["index"]] for entity in pre_entities]
        else:
            words = word_numbers(sentence, [first_visible(sentence, entity["start"]) for entity in pre_entities])
        for position, entity in enumerate(pre_entities):
            entity["is_subword"] = position > 0 and words[position] == words[position - 1]
        return pre_entities

    def postprocess(self, all_outputs, aggregation_strategy=AggregationStrategy.NONE, ignore_labels=None):
        entities = super().postprocess(all_outputs, aggregation_strategy, ignore_labels)
        sentence = all_outputs[0]["sentence"]
        if aggregation_strategy != AggregationStrategy.NONE:
            for entity in entities:
                if entity.get("start") is not None:
                    # the pieces decoded word by word and joined would lose the spaces between the words
                    entity["word"] = sentence[entity["start"] : entity["end"]]
        return entities

    def preprocess(self, sentence, offset_mapping=None, **preprocess_params):
        """A text is tokenized as its words (`conll_words`), the offsets of their pieces counted in the text itself;
        pre-split words, a text given with its own `offset_mapping`, and a text without words go to transformers as
        they are."""
        spans = [] if preprocess_params.get("is_split_into_words") or offset_mapping is not None or not isinstance(
            sentence, str) else conll_words(sentence)
        if not spans:
            words_of_its_own = isinstance(sentence, str) and offset_mapping is None and not preprocess_params.get(
                "is_split_into_words")
            for model_inputs in super().preprocess(sentence, offset_mapping=offset_mapping, **preprocess_params):
                if words_of_its_own:  # a text without words: the keys of the texts cut into words, batched with them
                    model_inputs.setdefault("word_ids", [None] * model_inputs["input_ids"].shape[-1])
                    model_inputs.setdefault("word_to_chars_map", [])
                yield model_inputs
            return
        # (transformers sets is_split_into_words in the tokenizer's settings it is given: a copy, not the call's)
        settings = {**preprocess_params, "is_split_into_words": True, "delimiter": " ",
                    "tokenizer_params": dict(preprocess_params.get("tokenizer_params") or {})}
        for model_inputs in super().preprocess([sentence[start:end] for start, end in spans], **settings):
            if model_inputs["sentence"] is not None:
                model_inputs["sentence"] = sentence
            model_inputs["word_to_chars_map"] = spans
            yield model_inputs


def first_visible(text: str, start: int) -> int:
    """The position of the first character at or after `start` that is not a space."""
    return start + len(text[start:]) - len(text[start:].lstrip())


def word_numbers(text: str, positions: list[int]) -> list[int]:
    """For each position in `text`, the number of the word it is in (words as `conll_words` cuts them)."""
    starts = [start for start, _ in conll_words(text)]
    return [bisect.bisect_right(starts, position) for position in positions]


# CoNLL-2003's words are Reuters news cut as the Penn Treebank cuts text: spaces part words, and punctuation at the
# edges of a word is a word of its own ("York." -> "York" "."; "(AP)" -> "(" "AP" ")"; "Germany's" -> "Germany" "'s";
# "didn't" -> "did" "n't"; "$5" -> "$" "5"; "5%" -> "5" "%"), while punctuation inside a word stays ("1,000", "6-4",
# "1/2", "O'Brien", "S&P", "C$"). A word's last full stop stays with an abbreviation: letters each followed by a full
# stop ("U.S.", "D.C.", "a.m."), one capital (an initial: "George W. Bush"), a number that starts the text (a rank:
# "1. Michael Johnson"), or a word of ABBREVIATIONS ("Corp.", "vs."); the training data's words ending in a full stop
# are of these kinds. Only at the end of the text (closing quotes aside) is the full stop split off them too, as
# CoNLL-2003 splits a sentence's last one ("... in the U.S." ends "U.S" "."; '... & Co."' ends "Co" "." '"'; but
# "... (U.S.)" ends "U.S." ")").
ABBREVIATIONS = frozenset((
    "vs etc Mr Mrs Ms Dr Prof Rev St Mt Ft Jr Sr Gen Gov Sen Rep Lt Col Capt Sgt Corp Inc Co Ltd Bros No Jan Feb Mar "
    "Apr Aug Sep Sept Oct Nov Dec Calif Fla"
).split())
OPENING = re.compile(r"""["'`(\[{\u201c\u2018\u00ab]|(?:[A-Z]{0,3}\$|[\u00a3\u20ac\u00a5])(?=\d)""")
CLOSING = set("\"'`)]},;:!?%\u201d\u2019\u00bb\u2026")
CLOSING_QUOTES = set("\"'`\u201d\u2019\u00bb")
CLITICS = ("'s", "'re", "'ve", "'ll", "'m", "'d", "n't", "\u2019s", "\u2019re", "\u2019ve", "\u2019ll", "\u2019m",
           "\u2019d", "n\u2019t")
INITIALS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]|[^\W\d_]")  # "U.S", "a.m", "D" (before the last full stop)
MOST_ABBREVIATED = 20  # the longest word before a full stop that is read as an abbreviation ("F.B.I": 5)


def conll_words(text: str) -> list[tuple[int, int]]:
    """The words of `text` as CoNLL-2003 cuts them (see above), as (start, end) spans of the text."""
    chunks = [match.span() for match in re.finditer(r"\S+", text)]
    spans = []
    for number, (start, end) in enumerate(chunks):
        spans.extend(chunk_words(text, start, end, first=number == 0, last=number == len(chunks) - 1))
    return spans


def chunk_words(text: str, start: int, end: int, first: bool, last: bool) -> list[tuple[int, int]]:
    """The words of `text[start:end]`, a run without spaces: its edges' punctuation cut off, one mark at a time (each
    step reads a bounded part of the run, so that a run of any length takes time in proportion to it)."""
    before, after, at_end = [], [], last
    while True:
        opening = OPENING.match(text, start, end)
        if opening and opening.end() < end and not (end - start <= 4 and text[start:end].lower() in CLITICS):
            before.append((start, opening.end()))
            start = opening.end()
            continue
        closing = closing_length(text, start, end, first and not before, at_end)
        if not closing:
            return [*before, (start, end), *reversed(after)]
        at_end = at_end and text[end - closing:end] in CLOSING_QUOTES  # only closing quotes after the word
        after.append((end - closing, end))
        end -= closing


def closing_length(text: str, start: int, end: int, first: bool, last: bool) -> int:
    """How many characters at the end of the word `text[start:end]` are a word of their own (0: none): a clitic, a
    run of full stops, a closing mark, or a full stop that ends no abbreviation (`first`, `last`: whether the word
    starts / ends the text, closing quotes aside)."""
    tail = text[max(start, end - 4):end].lower()
    for clitic in CLITICS:
        if tail.endswith(clitic) and end - start > len(clitic) and text[end - len(clitic) - 1].isalpha():
            return len(clitic)
    dots = end
    while dots > start and text[dots - 1] == ".":
        dots -= 1
    if end - dots > 1:
        return end - dots if dots > start else 0
    if end - start < 2:
        return 0
    if text[end - 1] in CLOSING:
        return 1
    if text[end - 1] != ".":
        return 0
    core = text[start:end - 1] if end - 1 - start <= MOST_ABBREVIATED else ""
    abbreviation = core and ((core.title() if core.isupper() else core) in ABBREVIATIONS  # "ST." in a headline
                             or INITIALS.fullmatch(core) and (len(core) > 1 or core.isupper())
                             or first and core.isdigit())
    return 0 if abbreviation and not last else 1


__all__ = [
    "SummarizationPipeline",
    "Text2TextGenerationPipeline",
    "TokenClassificationPipeline",
    "TranslationPipeline",
]
