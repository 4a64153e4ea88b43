"""Export a translation or summarization model of this project to CTranslate2, for fast CPU and GPU inference.

    from vaswani.serving.ctranslate2_export import export_to_ctranslate2
    export_to_ctranslate2("results/multi30k_en_de/model", "outputs/ct2/multi30k_en_de_int8", quantization="int8")

The CTranslate2 model is written directly with CTranslate2's public specification API (`TransformerSpec`): no
converter of another architecture is involved. Every option of `VaswaniConfig` that changes what the model computes
maps onto the specification without approximation:

    layer_norm_position     "post" -> CTranslate2's post-norm layers; "pre" -> pre-norm layers + a final LayerNorm
                            after each stack (the model's `encoder.layer_norm` / `decoder.layer_norm`)
    activation_function     relu, gelu (erf), gelu_new (tanh approximation), silu / swish, tanh
    scale_embedding         the embedding scale, sqrt(d_model) or 1
    position_embedding_type "sinusoidal" -> the model's own table (sin/cos interleaved, as `sinusoidal_positions`
                            computes it) for positions 0 .. max_position_embeddings - 1; CTranslate2's built-in
                            sinusoids are laid out differently (sin block, then cos block), so they are not used.
                            "learned" -> the two learned tables (encoder, decoder).
                            "relative" -> see below.
    tie_word_embeddings     the encoder, decoder and output matrices are written as they are; CTranslate2 stores one
                            copy of identical matrices
    layer_norm_eps          the model-wide `layer_norm_epsilon`
    encoder/decoder heads, layers and feed-forward sizes may differ between the stacks.

Relative positions. The model adds a learned scalar per head and clipped key-query offset to the attention scores,
score = q.k / sqrt(d_k) + pi_h[clip(k - q, -D, D)], with its own table in every self-attention layer. CTranslate2
offers two relative schemes: T5's bucketed bias, which its runtime computes in the first layer of a stack and reuses
in every later layer (so it cannot hold one table per layer), and Shaw et al.'s relative keys
(score = q.(k + a[clip(k - q, -D, D)]) / sqrt(d_k), same clipping as here), with one key table shared by all heads.
The per-head scalar becomes such a key term by giving each head H extra dimensions (H = number of heads): in them the
query of head h is the one-hot vector e_h (a projection row of zeros with bias 1), every key and value is 0, and the
relative key of offset o holds pi_1[o] .. pi_H[o] times sqrt(d_k), so that q.a[o] / sqrt(d_k) = pi_h[o] (exact up to
float rounding). The scores keep the scale 1 / sqrt(d_k) of the true head size (`queries_scale`) and the output
projection ignores the extra dimensions. The cost is H more dimensions per self-attention head (d_k 64 -> 72 for the
paper's base model).

Positions. CTranslate2 pads a batch on the right and numbers each source's tokens from 0, which is what the model's
padding-aware positions give, so batching changes nothing. A source longer than max_position_embeddings is an error
with sinusoidal or learned positions (the table has no row for it), but not with relative ones, which the model itself
refuses: truncate sources to that length (`tokenizer(..., truncation=True)` does, as the pipelines do).

The source and target vocabulary is the tokenizer's, in id order; the decoder starts from the model's
`decoder_start_token_id` (`<s>`), ends on its `eos_token_id` (`</s>`), and CTranslate2 adds nothing to the source:
the tokenizer's tokens (which end with `</s>`) are the input, as for `generate()`. The tokenizer is saved next to the
model, so `AutoTokenizer.from_pretrained(output_dir)` tokenizes for it, and `translate_options.json` holds the
`translate_batch` arguments that reproduce the model's generation config (beam size, length penalty, lengths):
with them, CTranslate2 in float32 gives the tokens of `generate(..., early_stopping=True)` (see `translate_options`
for why that flag). A multilingual model reads its target-language tag (`>>de<<`) first: start each source
with that token (what the tokenizer does when its `tgt_lang` is set).

What cannot be exported is refused with a message naming the option: a folder that is not a seq2seq model of
this project (a classifier, another model type), several end-of-sequence ids, no decoder start id, a tokenizer
whose ids do not fit the model's vocabulary or that has no unknown token.

ctranslate2 is an optional dependency: `pip install 'vaswani-transformer[ctranslate2]'`.
"""

import inspect
import json
from pathlib import Path

import numpy as np
import torch

from .exporting import claim_output_dir, load_seq2seq_model


INSTALL_HINT = "pip install 'vaswani-transformer[ctranslate2]'"
# CTranslate2's weight types (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`), listed here so that the script's
# --help and its argument check do not need ctranslate2 installed
QUANTIZATIONS = (
    "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32",
)
# transformers' activation names (ACT2FN) -> the names of CTranslate2's `Activation` enum
ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "gelu_new": "GELUTanh",
    "silu": "SWISH",
    "swish": "SWISH",
    "tanh": "Tanh",
}
OPTIONS_FILE = "translate_options.json"


def import_ctranslate2():
    try:
        import ctranslate2
        import ctranslate2.specs  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"Exporting to CTranslate2 needs the ctranslate2 package, which is not installed ({error}). Install it "
            f"with: {INSTALL_HINT}"
        ) from None
    return ctranslate2


# ---------------------------------------------------------------------------------------------------------------
# The whole export
# ---------------------------------------------------------------------------------------------------------------


def export_to_ctranslate2(
    model_dir: str | Path,
    output_dir: str | Path,
    quantization: str | None = None,
    overwrite_output_dir: bool = False,
) -> Path:
    """Convert the model in `model_dir` (a `VaswaniForConditionalGeneration` saved with its tokenizer) into a
    CTranslate2 model folder `output_dir`, with weights stored as `quantization` (None: as they are, float32).

    Returns the output folder, which then holds `model.bin`, `config.json`, `shared_vocabulary.json`, the tokenizer
    files and `translate_options.json`. Nothing is written until the whole model has been converted, and the folder
    appears whole or not at all (vaswani.output_paths)."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization={quantization!r} is not a CTranslate2 weight type; use one of {list(QUANTIZATIONS)}."
        )
    with claim_output_dir(output_dir, model_dir, overwrite_output_dir) as output:
        import_ctranslate2()
        model, tokenizer = load_seq2seq_model(model_dir, "CTranslate2")
        spec = build_spec(model, tokenizer)
        spec.validate()
        spec.optimize(quantization=quantization)
        options = translate_options(model.generation_config)
        with output.publish() as folder:
            spec.save(str(folder))
            tokenizer.save_pretrained(folder)
            (folder / OPTIONS_FILE).write_text(json.dumps(options, indent=2) + "\n", encoding="utf-8")
    return output_dir


# ---------------------------------------------------------------------------------------------------------------
# Reading the model
# ---------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------
# The specification
# ---------------------------------------------------------------------------------------------------------------


def build_spec(model, tokenizer):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights and `tokenizer`'s vocabulary (to validate,
    optimize and save)."""
    from ctranslate2.specs import attention_spec, common_spec, transformer_spec

    config = model.config
    _check_exportable(config)
    pre_norm = config.layer_norm_position == "pre"
    relative = config.position_embedding_type == "relative"
    activation = getattr(common_spec.Activation, ACTIVATIONS[config.activation_function])
    d_model = config.d_model

    def stack_spec(spec_class, layers: int, heads: int):
        options = dict(pre_norm=pre_norm, activation=activation, relative_position=relative)
        # with relative positions each self-attention head is `heads` dimensions wider (see the module docstring).
        # CTranslate2 reads a head's size from the projections' shapes; the spec also records it where the installed
        # version can (the encoder's spec takes `head_dim` from ctranslate2 4.7 on)
        if relative and "head_dim" in inspect.signature(spec_class.__init__).parameters:
            options["head_dim"] = d_model // heads + heads
        return spec_class(layers, heads, **options)

    encoder_spec = stack_spec(
        transformer_spec.TransformerEncoderSpec, config.encoder_layers, config.encoder_attention_heads
    )
    decoder_spec = stack_spec(
        transformer_spec.TransformerDecoderSpec, config.decoder_layers, config.decoder_attention_heads
    )
    if relative:
        # the extra head dimensions belong to self-attention only: cross-attention keeps the true head size
        for layer_spec in decoder_spec.layer:
            layer_spec.attention = attention_spec.MultiHeadAttentionSpec()
    spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)

    base = model.model
    _set_stack(spec.encoder, base.encoder, config)
    _set_stack(spec.decoder, base.decoder, config)
    for layer_spec, layer in zip(spec.encoder.layer, base.encoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual.layer_norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.layer_norm)
    for layer_spec, layer in zip(spec.decoder.layer, base.decoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual.layer_norm)
        _set_cross_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_residual.layer_norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual.layer_norm)
    _set_linear(spec.decoder.projection, model.lm_head)

    vocabulary = _vocabulary_of(tokenizer, config.vocab_size)
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    _set_special_tokens(spec.config, model, tokenizer, vocabulary)
    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)
    return spec


def _check_exportable(config) -> None:
    """Refuse, by name, a config value that the specification cannot hold (none of today's values; this guards the
    options a later version of the config may add)."""
    from ..remote_code.configuration_vaswani import LAYER_NORM_POSITIONS, POSITION_EMBEDDING_TYPES

    for name, allowed in (
        ("activation_function", list(ACTIVATIONS)),
        ("layer_norm_position", list(LAYER_NORM_POSITIONS)),
        ("position_embedding_type", list(POSITION_EMBEDDING_TYPES)),
    ):
        value = getattr(config, name)
        if value not in allowed:
            raise ValueError(
                f"{name}={value!r} cannot be exported to CTranslate2; the exportable values are {allowed}."
            )
    if not config.is_encoder_decoder:
        raise ValueError("is_encoder_decoder=False: only the encoder-decoder can be exported to CTranslate2.")


def _tensor(value: torch.Tensor) -> np.ndarray:
    return value.detach().to(torch.float32).cpu().numpy().copy()


def _set_stack(stack_spec, stack, config) -> None:
    """Embeddings, their scale, positions and (pre-norm) the final LayerNorm of the encoder or the decoder."""
    embeddings = stack.embeddings
    embeddings_spec = stack_spec.embeddings[0] if isinstance(stack_spec.embeddings, list) else stack_spec.embeddings
    embeddings_spec.weight = _tensor(embeddings.embed_tokens.weight)
    stack_spec.scale_embeddings = np.float32(embeddings.embed_scale)
    if config.position_embedding_type == "sinusoidal":
        from ..remote_code.modeling_vaswani import sinusoidal_positions

        positions = torch.arange(config.max_position_embeddings)
        stack_spec.position_encodings.encodings = _tensor(sinusoidal_positions(positions, config.d_model))
    elif config.position_embedding_type == "learned":
        stack_spec.position_encodings.encodings = _tensor(embeddings.embed_positions.weight)
    if stack.layer_norm is not None:
        _set_layer_norm(stack_spec.layer_norm, stack.layer_norm)


def _set_layer_norm(spec, layer_norm) -> None:
    spec.gamma = _tensor(layer_norm.weight)
    spec.beta = _tensor(layer_norm.bias)


def _set_linear(spec, linear) -> None:
    spec.weight = _tensor(linear.weight)
    if linear.bias is not None:
        spec.bias = _tensor(linear.bias)


def _set_fused_linear(spec, linears) -> None:
    spec.weight = np.concatenate([_tensor(linear.weight) for linear in linears])
    spec.bias = np.concatenate([_tensor(linear.bias) for linear in linears])


def _set_self_attention(spec, attention, layer_norm) -> None:
    _set_layer_norm(spec.layer_norm, layer_norm)
    if attention.relative_position_bias is None:
        _set_fused_linear(spec.linear[0], (attention.q_proj, attention.k_proj, attention.v_proj))
        _set_linear(spec.linear[1], attention.out_proj)
        return
    # relative positions: every head gets `heads` extra dimensions (see the module docstring)
    heads, head_dim = attention.num_heads, attention.head_dim

    def widen(linear, query: bool):
        """Rows of a q/k/v projection with `heads` zero rows after each head's rows; the query's bias is 1 at the
        extra dimension of its own head, so that head h's query ends in the one-hot vector e_h."""
        weight = _tensor(linear.weight).reshape(heads, head_dim, -1)
        bias = _tensor(linear.bias).reshape(heads, head_dim)
        extra_weight = np.zeros((heads, heads, weight.shape[-1]), dtype=np.float32)
        extra_bias = np.eye(heads, dtype=np.float32) if query else np.zeros((heads, heads), dtype=np.float32)
        return (
            np.concatenate([weight, extra_weight], axis=1).reshape(heads * (head_dim + heads), -1),
            np.concatenate([bias, extra_bias], axis=1).reshape(-1),
        )

    parts = [widen(attention.q_proj, True), widen(attention.k_proj, False), widen(attention.v_proj, False)]
    spec.linear[0].weight = np.concatenate([weight for weight, _ in parts])
    spec.linear[0].bias = np.concatenate([bias for _, bias in parts])
    out_weight = _tensor(attention.out_proj.weight).reshape(-1, heads, head_dim)
    out_weight = np.concatenate([out_weight, np.zeros((out_weight.shape[0], heads, heads), np.float32)], axis=2)
    spec.linear[1].weight = out_weight.reshape(out_weight.shape[0], -1)
    spec.linear[1].bias = _tensor(attention.out_proj.bias)

    bias = _tensor(attention.relative_position_bias.bias)  # (2 * max_distance + 1, heads), row = offset + max_distance
    keys = np.zeros((bias.shape[0], head_dim + heads), dtype=np.float32)
    keys[:, head_dim:] = bias / np.float32(attention.scaling)
    spec.relative_position_keys = keys
    spec.relative_position_values = np.zeros_like(keys)
    spec.queries_scale = np.float32(attention.scaling)


def _set_cross_attention(spec, attention, layer_norm) -> None:
    _set_layer_norm(spec.layer_norm, layer_norm)
    _set_linear(spec.linear[0], attention.q_proj)
    _set_fused_linear(spec.linear[1], (attention.k_proj, attention.v_proj))
    _set_linear(spec.linear[2], attention.out_proj)


def _set_feed_forward(spec, feed_forward, layer_norm) -> None:
    _set_layer_norm(spec.layer_norm, layer_norm)
    _set_linear(spec.linear_0, feed_forward.fc1)
    _set_linear(spec.linear_1, feed_forward.fc2)


# ---------------------------------------------------------------------------------------------------------------
# Vocabulary, special tokens and decoding options
# ---------------------------------------------------------------------------------------------------------------


def _vocabulary_of(tokenizer, vocab_size: int) -> list[str]:
    """The tokenizer's tokens in id order, `vocab_size` of them: ids the tokenizer never produces (a model whose
    embedding has spare rows) get placeholder names that no text can produce."""
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    too_large = sorted(index for index in by_id if index >= vocab_size)
    if too_large:
        raise ValueError(
            f"The tokenizer has ids up to {too_large[-1]}, but the model's vocab_size is {vocab_size}: they are not "
            "the same vocabulary. Export the model with the tokenizer it was trained with."
        )
    taken = set(by_id.values())
    vocabulary = []
    for index in range(vocab_size):
        token = by_id.get(index)
        if token is None:
            token = f"<unused_{index}>"
            while token in taken:
                token = "<" + token + ">"
        vocabulary.append(token)
    return vocabulary


def _set_special_tokens(ct2_config, model, tokenizer, vocabulary: list[str]) -> None:
    """Decoder start, end and unknown tokens, by the ids that `generate()` uses (the generation config's, else the
    model config's); CTranslate2 adds no token to the source (the tokenizer already ends it with `</s>`)."""
    generation = model.generation_config
    start = generation.decoder_start_token_id
    start = model.config.decoder_start_token_id if start is None else start
    eos = generation.eos_token_id if generation.eos_token_id is not None else model.config.eos_token_id
    if isinstance(eos, (list, tuple)):
        if len(eos) != 1:
            raise ValueError(
                f"eos_token_id={list(eos)}: CTranslate2 models end on a single end-of-sequence token; set one id."
            )
        eos = eos[0]
    for name, value in (("decoder_start_token_id", start), ("eos_token_id", eos)):
        if value is None or not 0 <= value < len(vocabulary):
            raise ValueError(
                f"{name}={value!r}: CTranslate2 needs a token id of the vocabulary (0 to {len(vocabulary) - 1})."
            )
    if tokenizer.unk_token is None or tokenizer.unk_token not in vocabulary:
        raise ValueError(
            f"The tokenizer's unk_token ({tokenizer.unk_token!r}) is not in its vocabulary: CTranslate2 needs an "
            "unknown token to stand for input tokens it does not know."
        )
    bos = model.config.bos_token_id
    ct2_config.decoder_start_token = vocabulary[start]
    ct2_config.eos_token = vocabulary[eos]
    ct2_config.bos_token = vocabulary[bos] if bos is not None and 0 <= bos < len(vocabulary) else vocabulary[start]
    ct2_config.unk_token = tokenizer.unk_token
    ct2_config.add_source_bos = False
    ct2_config.add_source_eos = False


def translate_options(generation_config) -> dict:
    """The `Translator.translate_batch` arguments that decode as `generate()` does with this generation config.

    Checked token for token (tests/serving/test_export_ctranslate2.py): the beam size, the length penalty and the length
    limits. CTranslate2 counts the generated tokens, the end token included, as transformers' `max_new_tokens` does
    (`max_length` also counts the start token). Its `min_decoding_length` defaults to 1 where transformers' minimum is
    0, so it is always given: with 1, an end token among the first step's best candidates is not kept as a finished
    (empty) hypothesis, the search runs longer, and a beam search can end elsewhere.

    One difference no argument removes: CTranslate2's beam search (with a length penalty) stops as soon as `beam_size`
    hypotheses have finished, which is `generate(..., early_stopping=True)`; transformers' default
    (`early_stopping=False`) keeps searching while a running beam might still do better, and on about 2% of
    Multi30k sentences it ends on a longer, better-scored translation. With `length_penalty=0`, CTranslate2 stops when
    its best beam finishes. Greedy search (beam size 1) is identical either way.

    N-gram blocking, the repetition penalty and the number of hypotheses are carried over too. CTranslate2's n-gram
    blocking is not transformers' in beam search: on SAMSum (no_repeat_ngram_size 3, beam 4) its summaries differ from
    `generate`'s (the benchmark's `ct2_fp32_same_tokens`, results/benchmark/README.md); greedy they were the same. The
    other two are not checked token for token. Sampling settings are left out: sampled outputs are not reproducible across two implementations."""
    beams = generation_config.num_beams or 1
    options = {"beam_size": beams}
    if beams > 1:
        penalty = generation_config.length_penalty
        options["length_penalty"] = 1.0 if penalty is None else float(penalty)  # unset: transformers' default
    if generation_config.max_new_tokens is not None:
        options["max_decoding_length"] = generation_config.max_new_tokens
    elif generation_config.max_length is not None:
        options["max_decoding_length"] = generation_config.max_length - 1
    if generation_config.min_new_tokens:
        options["min_decoding_length"] = generation_config.min_new_tokens
    else:
        options["min_decoding_length"] = max((generation_config.min_length or 0) - 1, 0)
    if generation_config.no_repeat_ngram_size:
        options["no_repeat_ngram_size"] = generation_config.no_repeat_ngram_size
    if generation_config.repetition_penalty not in (None, 1.0):
        options["repetition_penalty"] = float(generation_config.repetition_penalty)
    if generation_config.num_return_sequences and generation_config.num_return_sequences > 1:
        options["num_hypotheses"] = generation_config.num_return_sequences
    return options


__all__ = [
    "OPTIONS_FILE",
    "QUANTIZATIONS",
    "build_spec",
    "export_to_ctranslate2",
    "import_ctranslate2",
    "translate_options",
]
