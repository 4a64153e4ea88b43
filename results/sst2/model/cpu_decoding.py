"""Decoding on a CPU at the speed of an inference engine, from the model's own weights: what
`VaswaniForConditionalGeneration.generate` runs on a CPU by default, with the tokens of transformers' loop.

`generate` runs the model's forward once per new token, which is written for training and for every attention
backend: one token at a time it spends most of its time around the arithmetic (on the shipped en->de model, one
thread: a quarter in the flash-attention kernel called for a single query row, an eighth growing the cache by
concatenation, a ninth in an argmax over the vocabulary that is not vectorized). The decoder here computes the same
function for one new token per row, with the model's weights laid out for it (`ModelWeights`):

  * the cache holds every layer's keys and values in one tensor, written in place, in a buffer the thread's next
    call reuses (`Workspace`: pages allocated afresh fault at their first write); it holds the positions so far and
    grows by `MIN_KEYS` keys at a time (one copy), and attention reads it whole, the positions not yet written
    masked: a window of the first positions of a cache sized for the longest output is a strided read, which took
    twice as long as the same keys laid out densely once they were out of the core's cache (75 against 31 us per
    layer for the scores, 87 against 43 for the weighted values, 64 captions, greedy, one thread; whole greedy calls
    on the shipped models 1.04-1.13x faster);
  * self-attention's three projections are one matrix product, and its new key and value reach the cache in one
    copy; every layer's cross-attention keys and values are computed once from each input's encoder output (not once
    per beam), on its real tokens only, each with one product and one copy into the layout the attention's two
    products read (the keys transposed);
  * attention of the one new row is two batched matrix products and a softmax over at least `MIN_KEYS` keys (torch's
    softmax over shorter rows is five times slower; the keys not yet there are zeros, masked); the bias of that row
    (relative positions, the masked keys, the beams' histories, the source's padding) comes from a table laid out
    once per call, sliced once per step for all the layers, and is added by the first product itself (`baddbmm`);
  * beam search never copies the cache: the beams of an input attend to the keys of all its beams at once (a product
    `num_beams` times wider, cheap at these sizes) through a mask that keeps, at each position, the keys of the
    beam's own history, so choosing beams moves a small table of indices (the history's slot at each position), not
    the keys and values; and the first step, where the beams are all alike, computes one row per input;
  * an input whose search is over leaves the batch (`vaswani.search`): its rows are no longer computed (its
    cache slot is freed once `FREED_SHARE` of the slots are, with one copy);
  * the next token is picked with vectorized reductions (`vaswani.search.first_argmax`, `beam_candidates`);
  * on CPUs other than Intel's, the output projection (the largest product of a step: 8,000 x 128 on the shipped
    models) runs through oneDNN with its weights reordered once for oneDNN's kernel (`ONEDNN_VOCAB`), where MKL
    repacks them at every call;
  * the encoder (`encode`, which `generate` is handed as the encoder output) computes its position-wise layers on
    the real tokens only, packed without their padding (a batch of captions is about half padding), its
    self-attention's three projections as one product, its feed-forward network a few hundred rows at a time (the
    inner layer stays in the core's cache), its attention on the inputs sorted by length, eight at a time, each
    group padded to its own longest (`ATTENTION_GROUP`), and its attention mask with rows of a multiple of 16 floats
    (PyTorch's attention copies any other: on SAMSum's 64 x 256 tokens the encoder took 716 ms with that copy, 394
    without);
  * the encoder and the search run in `torch.inference_mode()` (see `CpuDecoding`);
  * the process keeps the memory a call frees for the next call (`keep_freed_memory`, once per process, on Linux with
    glibc): with glibc's defaults, pages given back after a call fault again at their first write in the next.
    Malloc settings given through the environment (`MALLOC_TRIM_THRESHOLD_`, ...) are left as they are, and so are
    they after `leave_freed_memory()` (`for_cpu_inference(model, release_freed_memory=True)`).

The search itself (greedy, beam search with its length penalty, early stopping, `no_repeat_ngram_size`,
`min_length` / `min_new_tokens`) is `vaswani.search`, which follows transformers' step for step. `generate`
still prepares everything (its settings, the encoder's output, the logits processors and stopping criteria) and hands
the loop to `CpuDecoding.decoding_loop` through its `custom_generate` argument; where the call asks for what this path
does not do (sampling, scores or attentions in the output, a streamer, other logits processors, a prompt for the
decoder, a model in training mode or not in float32 on the CPU), the loop is transformers' own, so every call gives what
`generate` gives.

The weights are laid out once (about the model's size again) and laid out anew when a parameter changes (tracked by
its version counter): a model fine-tuned after a call decodes with its new weights.

The decoder runs only for a model it reproduces exactly (`unreproduced`, checked at every call): a model with a
forward hook or pre-hook on any module (or registered for every module), a `forward` set on a module or overridden by
a subclass of the model's class, a module of another class than those laid out here (a PEFT adapter, a custom Linear,
a quantized one other than torch.ao's dynamic int8 `Int8Product` computes, a parametrized or compiled module, an
attention module of one's own), an output projection with a bias, an attention function or mask of one's own, or
called under autocast, runs transformers' loop, which calls the model (and a forward set on it,
`model.forward = torch.compile(model.forward)`) as it is; the logger says why once per reason and model, at info
level. The check walks the modules once a call: 48 us on the shipped en->de model (one
thread, 2-core AMD EPYC of cpu family 25), where the scan it replaced ran twice a call, 330 us in all.

This file is copied into every saved model (with search.py, proc_files.py and model_functions.py, which it
imports), so that a folder alone decodes this way; it imports from this project only with relative imports of those
files.
"""

import ctypes
import functools
import math
import os
import platform
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2CLS
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation.logits_process import (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GENERATION_MODES_MAPPING, GenerationMode
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging, output_capturing

from .model_functions import CACHE_FIELD, NON_FINITE_LOGITS, padding_aware_positions, sinusoidal_positions
from .proc_files import proc_field
from .search import SearchSettings, search


logger = logging.get_logger(__name__)

# the model_kwargs `generate` passes to its decoding loop that this path reads or can ignore
HANDLED_MODEL_KWARGS = {"encoder_outputs", "attention_mask", "use_cache", "cache", "past_key_values"}
OUTPUT_OPTIONS = ("output_attentions", "output_hidden_states", "output_scores", "output_logits")
# the arguments of `generate` meant for its decoding loop
LOOP_ARGUMENTS = ("streamer", "synced_gpus", "assistant_model", "tokenizer", "assistant_tokenizer")
# the settings that ask for a decoding method transformers loads from the Hub (constrained beam search, contrastive
# search, DoLa, group beam search), which `generate` runs only where it is handed no loop of this path's
HUB_METHOD_SETTINGS = ("constraints", "force_words_ids", "penalty_alpha", "dola_layers", "num_beam_groups")
# On CPUs other than Intel's, the output projection of two rows or more goes through oneDNN, its weights reordered
# once into the layout oneDNN's kernel reads (`ModelWeights.vocab_packed`): PyTorch's MKL product repacks the 4 MB
# matrix at every call, which costs most at the few rows of a search's last steps. Rows x 128 times 128 x 8,000 on a
# 2-core AMD EPYC, one thread, caches warm / flushed: 4 rows 111 / 216 us against 211 / 430 through MKL, 8 rows
# 193 / 349 against 301 / 480, 64 rows 1.46 / 1.54 ms against 1.93 / 1.89, 256 rows 5.9 / 5.5 against 7.4 / 7.0
# (oneDNN without the reordered weights: 6.4 at 256 rows flushed; from 16 rows up, whole de->en calls were no faster
# with it than with MKL). One row stays with MKL, whose matrix-vector product is faster (73 / 101 us against
# 87 / 147). Not measured on an Intel CPU, where MKL stays.
ONEDNN_VOCAB_ROWS = 2
ONEDNN_VOCAB = torch.backends.mkldnn.is_available() and proc_field("/proc/cpuinfo", "vendor_id") != "GenuineIntel"
# the row count oneDNN is told to expect when it reorders the weights (any count is computed; measured with 16, 64 and
# 256: within about 10% of each other at 2 to 256 rows)
ONEDNN_VOCAB_HINT = 64

# torch's CPU softmax over fewer than 16 elements per row takes a scalar path: 78 us for 64 x 4 rows of 15 against
# 6 us for rows of 16 (one thread). Attention here always spans at least this many keys, the ones not yet there
# (or padding) masked with -inf and stored as zeros, which leaves the probabilities as they are.
MIN_KEYS = 16


# On AMD CPUs of the Zen 5 family (cpu family 26) and later, the layers' products also go through oneDNN with their
# weights reordered once (`Product`), where MKL takes its slow generic path: one thread on a 2-core EPYC of that family,
# 64 rows x 128 -> 384 (a shipped model's query, key and value) took 63 us through MKL against 37 through oneDNN, 256
# x 512 -> 128 312 against 142; at a few rows MKL's is faster (4 x 128 -> 128: 4 against 12 us), the two meeting
# at about 700,000 multiply-adds a product (`ONEDNN_MIN_WORK`). On the Zen 4 EPYC of the earlier measurements oneDNN
# was slower below 64 rows and 5-20% faster above 256, so that CPU (and Intel's) keep MKL for these products.
ONEDNN_LAYERS = ONEDNN_VOCAB and int(proc_field("/proc/cpuinfo", "cpu family") or 0) >= 26
ONEDNN_MIN_WORK = 700_000


class Product:
    """A linear layer laid out for this path: `product(x)` is `x @ weight.T + bias`, through MKL's `addmm` on the
    weight transposed to (in, out), or where `ONEDNN_LAYERS` and the product is large enough (`ONEDNN_MIN_WORK`)
    through oneDNN on the weight reordered once for its kernel."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        with torch.no_grad():
            self.weight = weight.t().contiguous()  # (in, out)
            self.bias = bias.detach().clone()
            self.packed = None  # (an opaque oneDNN tensor: it cannot be copied, see CpuDecoding.__getstate__)
            if ONEDNN_LAYERS:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), ONEDNN_VOCAB_HINT)
        self.onednn_rows = -(-ONEDNN_MIN_WORK // (self.weight.shape[0] * self.weight.shape[1]))

    @property
    def out_features(self) -> int:
        return self.weight.shape[1]

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if self.packed is not None and x.shape[0] >= self.onednn_rows:
            product = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            return product if out is None else out.copy_(product)
        return torch.addmm(self.bias, x, self.weight, out=out)


# The int8 Linear layers of `vaswani.serving.cpu_inference.for_cpu_inference(model, "int8")`: torch.ao's dynamically
# quantized Linear (int8 weights, a scale per output row; the activations quantized at each call by fbgemm's kernel),
# and the module holding its packed weights, which the layer's forward reads without calling it. A (32 x 512) x
# (512 x 2048) product, one thread on a 2-core EPYC Zen 4: 185 us through this kernel, 616 through oneDNN in fp32, 827
# through MKL; on the shipped models (d_model 128) whole calls were 1.2-1.3x faster than in fp32.
INT8_LINEAR = torch.ao.nn.quantized.dynamic.Linear
INT8_WEIGHTS = torch.ao.nn.quantized.modules.linear.LinearPackedParams


class Int8Product:
    """int8 Linear layers (`INT8_LINEAR`, qint8) reading the same input, laid out for this path: `product(x)` is the
    layer's own kernel, `torch.ops.quantized.linear_dynamic`, on its own packed weights where it is one layer as it
    is; several layers (self-attention's query, key and value), or one scaled (a query carrying the attention's
    1 / sqrt(d_k)), are one product of their int8 weights stacked, each row with its layer's scale (times the
    scaling): the same integer products as the layers', rescaled per row."""

    def __init__(self, layers: list[nn.Module], scalings: list[float]):
        self.reduce_range = _reduce_range(layers[0])
        self.out_features = sum(layer.out_features for layer in layers)
        if len(layers) == 1 and scalings[0] == 1.0:
            self.packed = layers[0]._packed_params._packed_params
            return
        values, scales, biases = [], [], []
        for layer, scaling in zip(layers, scalings):
            weight, bias = layer._packed_params._weight_bias()
            values.append(weight.int_repr())
            scales.append(_row_scales(weight) * scaling)
            biases.append((bias if bias is not None else weight.new_zeros(weight.shape[0], dtype=torch.float32))
                          * scaling)
        scale = torch.cat(scales)
        stacked = torch._make_per_channel_quantized_tensor(torch.cat(values), scale,
                                                          torch.zeros(scale.shape, dtype=torch.long), 0)
        self.packed = torch.ops.quantized.linear_prepack(stacked, torch.cat(biases))

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        product = torch.ops.quantized.linear_dynamic(x, self.packed, reduce_range=self.reduce_range)
        return product if out is None else out.copy_(product)


def _row_scales(weight: torch.Tensor) -> torch.Tensor:
    """The scale of each output row of a symmetrically quantized int8 weight (one scale per tensor or per row)."""
    if weight.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        zero_points = torch.tensor([weight.q_zero_point()])
        scales = torch.full((weight.shape[0],), weight.q_scale(), dtype=torch.float64)
    else:
        zero_points, scales = weight.q_per_channel_zero_points(), weight.q_per_channel_scales().double()
    if bool(zero_points.any()):
        raise ValueError("Int8Product takes int8 weights quantized symmetrically (zero point 0).")
    return scales


def _reduce_range(layer: nn.Module) -> bool:
    """Whether the layer's forward quantizes its input to 7 bits (torch.ao's layers of version 4 and later)."""
    version = getattr(layer, "version", None)
    return version is not None and version >= 4


def _product(layers: list[nn.Module], scalings: list[float] | None = None) -> "Product | Int8Product | Stacked":
    """The product of these Linear layers (of the same input, their outputs side by side), each scaled."""
    scalings = scalings or [1.0] * len(layers)
    if all(type(layer) is INT8_LINEAR for layer in layers) and len({_reduce_range(layer) for layer in layers}) == 1:
        return Int8Product(layers, scalings)
    if any(type(layer) is INT8_LINEAR for layer in layers):
        return Stacked([_product([layer], [scaling]) for layer, scaling in zip(layers, scalings)])
    return Product(torch.cat([layer.weight * scaling for layer, scaling in zip(layers, scalings)]),
                   torch.cat([layer.bias * scaling for layer, scaling in zip(layers, scalings)]))


class Stacked:
    """Products of the same input of different kinds (some layers int8, some not), their outputs side by side."""

    def __init__(self, products: list):
        self.products = products
        self.out_features = sum(product.out_features for product in products)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        product = torch.cat([product(x) for product in self.products], dim=-1)
        return product if out is None else out.copy_(product)


class LayerWeights:
    """One layer's weights (an encoder layer has no cross-attention), each linear layer a `Product`; the query
    projections carry the attention's 1 / sqrt(d_k)."""

    def __init__(self, layer: nn.Module):
        attention = layer.self_attn
        scaling = attention.scaling
        self.heads, self.head_dim = attention.num_heads, attention.head_dim
        self.qkv = _product([attention.q_proj, attention.k_proj, attention.v_proj], [scaling, 1.0, 1.0])
        self.self_out = _product([attention.out_proj])
        self.self_norm = _norm_weights(layer.self_attn_residual.layer_norm)
        cross = getattr(layer, "encoder_attn", None)
        if cross is not None:
            self.cross_query = _product([cross.q_proj], [cross.scaling])
            self.cross_out = _product([cross.out_proj])
            self.cross_norm = _norm_weights(layer.encoder_attn_residual.layer_norm)
        self.fc1 = _product([layer.feed_forward.fc1])
        self.fc2 = _product([layer.feed_forward.fc2])
        self.activation = layer.feed_forward.activation
        self.relu = isinstance(self.activation, nn.ReLU)
        self.feed_forward_norm = _norm_weights(layer.feed_forward_residual.layer_norm)
        bias = attention.relative_position_bias
        self.relative_bias = None if bias is None else (bias.bias.detach().clone(), bias.max_distance)


def _norm_weights(norm: nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor, float]:
    return norm.weight.detach().clone(), norm.bias.detach().clone(), norm.eps


class ModelWeights:
    """A `VaswaniForConditionalGeneration` laid out for this path (see the module docstring): the decoder's layers,
    scaled embedding, cross-attention key and value projections and the output projection, all transposed (the output
    projection also reordered for oneDNN where `ONEDNN_VOCAB`); the encoder (`EncoderWeights`)."""

    def __init__(self, model: nn.Module):
        config = model.config
        decoder = model.get_decoder()
        with torch.no_grad():
            self.config = config
            self.d_model = config.d_model
            self.pre_norm = config.layer_norm_position == "pre"
            self.position_type = config.position_embedding_type
            self.embed, self.positions = _embedding_weights(decoder.embeddings)
            self.layers = [LayerWeights(layer) for layer in decoder.layers]
            self.cross_keys = [_product([layer.encoder_attn.k_proj]) for layer in decoder.layers]
            self.cross_values = [_product([layer.encoder_attn.v_proj]) for layer in decoder.layers]
            self.final_norm = _norm_weights(decoder.layer_norm) if decoder.layer_norm is not None else None
            # the output projection: int8 (`Int8Product`), or transposed (and reordered for oneDNN: ONEDNN_VOCAB)
            self.vocab_int8 = _product([model.lm_head]) if type(model.lm_head) is INT8_LINEAR else None
            self.vocab_weight = model.lm_head.weight.t().contiguous() if self.vocab_int8 is None else None
            self.vocab_packed = None  # (an opaque oneDNN tensor: it cannot be copied, see CpuDecoding.__getstate__)
            if ONEDNN_VOCAB and self.vocab_int8 is None:
                self.vocab_packed = torch.ops.mkldnn._reorder_linear_weight(
                    model.lm_head.weight.detach().contiguous(), ONEDNN_VOCAB_HINT)
            self.encoder = EncoderWeights(model.get_encoder())
        self.versions = _parameter_versions(model)
        self.sinusoids = torch.empty(0, self.d_model)

    def sinusoid_rows(self, count: int) -> torch.Tensor:
        """The first `count` rows of the sinusoidal position table (the model's `sinusoidal_positions`, element for
        element), computed once for the longest asked so far."""
        if count > self.sinusoids.shape[0]:
            self.sinusoids = sinusoidal_positions(torch.arange(max(count, 2 * self.sinusoids.shape[0])), self.d_model)
        return self.sinusoids[:count]


class EncoderWeights:
    """The encoder laid out for `encode`: the scaled token table, the learned position table (or None), the layers,
    the closing LayerNorm of a pre-LN stack (or None)."""

    def __init__(self, encoder: nn.Module):
        self.embed, self.positions = _embedding_weights(encoder.embeddings)
        self.layers = [LayerWeights(layer) for layer in encoder.layers]
        self.final_norm = _norm_weights(encoder.layer_norm) if encoder.layer_norm is not None else None


def _embedding_weights(embeddings: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token table times the embedding scale (the same products the model computes for each token), and the
    learned position table (None for the other position types)."""
    table = (embeddings.embed_tokens.weight * embeddings.embed_scale).contiguous()
    positions = embeddings.embed_positions
    return table, (positions.weight.detach().clone() if positions is not None else None)


def _absolute_positions(weights: ModelWeights, learned: torch.Tensor | None, positions: torch.Tensor):
    """The absolute-position term of `positions` (any shape, then d_model), or None (relative positions)."""
    if weights.position_type == "sinusoidal":
        return weights.sinusoid_rows(int(positions.max()) + 1 if positions.numel() else 0)[positions]
    if weights.position_type == "learned":
        return learned[positions]
    return None


def _parameter_versions(model: nn.Module) -> list[tuple[int, int]]:
    """Where each parameter's values live and how often they were changed in place: a change in either (a parameter
    or module replaced, weights loaded or trained) means new weights. The modules are walked through their
    `_modules` directly: `model.parameters()` took 0.6 ms a call, a quarter of it this walk."""
    versions, modules = [], [model]
    while modules:
        module = modules.pop()
        versions.extend((parameter.data_ptr(), parameter._version)
                        for parameter in module._parameters.values() if parameter is not None)
        if type(module) is INT8_WEIGHTS:  # an int8 layer's weights, packed (new ones are a new object)
            versions.append((id(module._packed_params), -1))
        modules.extend(child for child in module._modules.values() if child is not None)
    return versions


def _relative_biases(layer: LayerWeights, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """The model's `VaswaniRelativePositionBias`: (heads, queries, keys)."""
    table, max_distance = layer.relative_bias
    offsets = (key_positions[None, :] - query_positions[:, None]).clamp(-max_distance, max_distance) + max_distance
    return table[offsets].permute(2, 0, 1)


def _residual(weights: ModelWeights, hidden: torch.Tensor, norm, sublayer) -> torch.Tensor:
    """A sub-layer in its residual connection: post-LN (the paper) or pre-LN, as the model's `VaswaniResidual`."""
    if weights.pre_norm:
        return hidden + sublayer(_layer_norm(hidden, norm))
    return _layer_norm(hidden + sublayer(hidden), norm)


# the feed-forward network takes at most this many inner activations at a time (512 KB of float32), so that its inner
# layer stays in the core's cache between its two products: the SAMSum encoder's 9,226 tokens x 512 would be 19 MB
FEED_FORWARD_BLOCK = 2**17


def _feed_forward(layer: LayerWeights, hidden: torch.Tensor) -> torch.Tensor:
    rows = hidden.shape[0]
    block = max(1, FEED_FORWARD_BLOCK // layer.fc1.out_features)
    if rows <= block:
        return layer.fc2(_inner_activations(layer, hidden))
    output = hidden.new_empty(rows, layer.fc2.out_features)
    for start in range(0, rows, block):
        layer.fc2(_inner_activations(layer, hidden[start : start + block]), out=output[start : start + block])
    return output


def _inner_activations(layer: LayerWeights, hidden: torch.Tensor) -> torch.Tensor:
    inner = layer.fc1(hidden)
    return inner.relu_() if layer.relu else layer.activation(inner)


def _padding_bias(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The additive mask of a (batch, length) padding mask, (batch, 1, 1, length): 0 at real tokens, the dtype's
    lowest value at padding, as the model masks it; None where nothing is padding."""
    if mask is None or bool(mask.all()):
        return None
    return torch.where(mask.bool(), 0.0, torch.finfo(dtype).min)[:, None, None, :].to(dtype)


def _real_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The rows of the real tokens of a (batch, length) padding mask in (batch * length), or None where nothing is
    padding (the layers then run on every row as they are)."""
    if mask is None or bool(mask.all()):
        return None
    return mask.reshape(-1).nonzero().squeeze(1)


# the encoder's attention takes the inputs in groups of this many, of about the same length, each on the columns
# where one of its inputs has a token: its cost grows with the square of the padded length, and a batch of captions
# padded to its longest has several times the area of its real tokens (64 de captions: 64 x 37^2 = 87,616 against
# 16,644, the sum of their squared lengths; in groups of 8, 23,352)
ATTENTION_GROUP = 8


@dataclass
class AttentionGroup:
    """Consecutive inputs of the encoder's sorted layout (`first` to `last` - 1) whose attention is computed
    together, on the columns `start` to `end` - 1 (the others are padding for each of them)."""

    first: int
    last: int
    start: int
    end: int


def _length_order(mask: torch.Tensor) -> tuple[torch.Tensor, list[AttentionGroup]]:
    """The inputs sorted by the span of their real tokens (stable), and the `ATTENTION_GROUP`s of that order."""
    batch, length = mask.shape
    real = mask.bool()
    first = real.int().argmax(1)  # an input without any real token takes every column
    last = torch.where(real.any(1), length - 1 - real.flip(1).int().argmax(1), length - 1)
    order = (last - first).argsort(stable=True)
    first, last = first[order].tolist(), last[order].tolist()
    groups = [
        AttentionGroup(index, min(index + ATTENTION_GROUP, batch), min(first[index : index + ATTENTION_GROUP]),
                       max(last[index : index + ATTENTION_GROUP]) + 1)
        for index in range(0, batch, ATTENTION_GROUP)
    ]
    return order, groups


def encode(weights: ModelWeights, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
           workspace: "Workspace | None" = None) -> torch.Tensor:
    """The model's encoder output, (batch, length, d_model), with every position-wise product (the projections,
    the feed-forward network, the LayerNorms) computed on the real tokens only, packed without their padding, as
    CTranslate2 does: captions padded to the longest in a batch are about half padding. The attention (PyTorch's
    fused kernel) runs on a padded layout of the inputs sorted by length, a group of them at a time, each group
    padded to its own longest (`ATTENTION_GROUP`). Padding positions come out as zeros (the decoder never reads
    them)."""
    encoder, d_model = weights.encoder, weights.d_model
    batch, length = input_ids.shape
    positions = padding_aware_positions(attention_mask, batch, length, input_ids.device)
    hidden = F.embedding(input_ids, encoder.embed)
    terms = _absolute_positions(weights, encoder.positions, positions)
    if terms is not None:
        hidden = hidden + terms
    workspace = workspace if workspace is not None else Workspace()
    packed = hidden.reshape(batch * length, d_model)
    padding = _padding_bias(attention_mask, hidden.dtype)
    if padding is None:  # no padding: the layers run on every row as they are, the attention on the whole batch
        layout, groups = None, [AttentionGroup(0, batch, 0, length)]
    else:
        # the attention's layout: the inputs sorted by length, the padding rows zeros (every layer writes the real
        # rows only); the packed rows are the real tokens in that order
        order, groups = _length_order(attention_mask)
        padding = padding[order]
        sorted_real = attention_mask[order].reshape(-1).nonzero().squeeze(1)  # the real rows of the layout
        real = (order[:, None] * length + torch.arange(length)).view(-1)[sorted_real]  # and of the batch
        packed = packed.index_select(0, real)
        padded = workspace.take("padded", (batch * length, 3 * d_model), packed).zero_()
        layout = (sorted_real, padded)
    key_positions = torch.arange(length)
    for layer in encoder.layers:
        bias = None
        if layer.relative_bias is not None:
            bias = _relative_biases(layer, key_positions, key_positions)[None]  # (1, heads, length, length)
        attention = functools.partial(_encoder_self_attention, layer, layout=layout, groups=groups, bias=bias,
                                      padding=padding, workspace=workspace)
        packed = _residual(weights, packed, layer.self_norm, attention)
        packed = _residual(weights, packed, layer.feed_forward_norm, lambda x: _feed_forward(layer, x))
    if encoder.final_norm is not None:
        packed = _layer_norm(packed, encoder.final_norm)
    if layout is None:
        return packed.view(batch, length, d_model)
    return packed.new_zeros(batch * length, d_model).index_copy_(0, real, packed).view(batch, length, d_model)


def _encoder_self_attention(layer: LayerWeights, packed: torch.Tensor, *, layout, groups: list[AttentionGroup],
                            bias: torch.Tensor | None, padding: torch.Tensor | None, workspace: "Workspace"):
    """Self-attention of the packed tokens: one product for the three projections, the attention itself on the
    padded layout (`layout`: the real rows and the layout, whose padding rows stay zeros, hidden from every query
    by the mask; None: the packed rows are the layout), a group at a time, with the relative-position `bias` (1,
    heads, length, length) or None and the `padding` bias (batch, 1, 1, length) or None; the output projection
    packed."""
    heads, head_dim = layer.heads, layer.head_dim
    projected = layer.qkv(packed)
    if layout is not None:
        projected = layout[1].index_copy_(0, layout[0], projected)
    batch = groups[-1].last
    projected = projected.view(batch, -1, 3, heads, head_dim)
    output = projected.new_empty(batch, projected.shape[1], heads, head_dim)  # a group's padding rows: never read
    for group in groups:
        inputs, columns = slice(group.first, group.last), slice(group.start, group.end)
        mask = padding[inputs, ..., columns] if padding is not None else None
        if bias is not None:
            span = group.end - group.start
            if mask is not None:
                # written with rows of a multiple of 16 floats: PyTorch's attention copies a mask whose rows are not
                # (0.36 ms a layer for 64 x 4 x 33 x 33)
                aligned = workspace.take("mask", (group.last - group.first, heads, span, -(-span // 16) * 16), packed)
                mask = torch.add(bias[..., :span, :span], mask, out=aligned[..., :span])
            else:
                mask = bias[..., :span, :span]  # (the relative bias depends on the distance only)
        query, key, value = projected[inputs, columns].permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=1.0)  # the query is scaled
        output[inputs, columns] = attended.transpose(1, 2)
    output = output.view(-1, heads * head_dim)
    output = output.index_select(0, layout[0]) if layout is not None else output
    return layer.self_out(output)


class Workspace(threading.local):
    """The large buffers of a decoding call (the self-attention cache, the logits), kept for the thread's next call.

    A buffer allocated afresh at every call comes from the system as new pages, and each page's first write faults:
    on the shipped en->de model, 64 captions, greedy, setting up the decoder took 15-18 ms with glibc's defaults
    against 8 ms with the memory kept (one thread, 2-core Xeon). The cache grows to 8 MB there (32 positions), 34 MB
    with 4 beams, and glibc maps anything over 32 MB afresh whatever its settings (`keep_freed_memory`). Each thread
    has its own buffers (threading.local), so calls from several threads never share one. A buffer larger than
    `MAX_BYTES` is not kept."""

    MAX_BYTES = 256 * 2**20

    def __init__(self):
        self.buffers: dict[str, torch.Tensor] = {}

    def __reduce__(self):  # a copy of a model set up for this path (deepcopy, pickle) starts with empty buffers
        return Workspace, ()

    def take(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialized tensor of this shape, with `like`'s dtype and device, from the buffer called `name`
        (valid until the thread takes that buffer again)."""
        size = math.prod(shape)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.numel() < size or buffer.dtype != like.dtype or buffer.device != like.device:
            buffer = like.new_empty(size)
            if size * buffer.element_size() <= self.MAX_BYTES:
                self.buffers[name] = buffer
        return buffer[:size].view(shape)


# The memory a decoding call frees, kept by the process for its next call (`keep_freed_memory`): a call allocates and
# frees many tensors of a few hundred KB to a few MB, and with glibc's defaults part of that memory goes back to the
# system after each call, every page of it faulting again at its first write in the next: about 3,600 faults a greedy
# call on the shipped en->de model, 64 captions, one thread, against none with the memory kept (`ru_minflt` around
# the call). glibc's mallopt parameters (malloc.h) and the values set:
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEPT_ALLOCATION_BYTES = 32 * 2**20  # allocations up to this size come from the heap (M_MMAP_THRESHOLD's maximum)
KEPT_FREE_BYTES = 512 * 2**20  # the heap returns free memory to the system beyond this much (M_TRIM_THRESHOLD)
# the environment through which a user gives glibc's malloc settings of their own, which are then left as given
MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


class FreedMemory:
    """Whether the process's malloc settings are decided: by the CPU path's first call (`keep_freed_memory`), or by
    `leave_freed_memory` (`for_cpu_inference(model, release_freed_memory=True)`). Decided once per process."""

    lock = threading.Lock()
    decided = False


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory the process frees for its next allocations, as PyTorch's CPU tuning guide
    does by loading jemalloc or tcmalloc: the process holds up to `KEPT_FREE_BYTES` of freed memory. The CPU path's
    first call does this once per process. True where it applied; False where the C library is not glibc (macOS,
    musl) or the environment gives malloc settings of its own (`MALLOC_VARIABLES`, `glibc.malloc` tunables), which
    are left as they are."""
    with FreedMemory.lock:
        FreedMemory.decided = True
        if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or _malloc_set_by_environment():
            return False
        mallopt = _mallopt()
        return bool(mallopt(M_MMAP_THRESHOLD, KEPT_ALLOCATION_BYTES) and mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES))


def leave_freed_memory() -> None:
    """Leave the process's malloc settings as they are: the CPU path will not change them."""
    with FreedMemory.lock:
        FreedMemory.decided = True


def _malloc_set_by_environment() -> bool:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in MALLOC_VARIABLES) or "glibc.malloc." in tunables


def _mallopt() -> Callable[[int, int], int]:
    return ctypes.CDLL(None).mallopt


# The slots of the inputs whose search is over are freed (`CpuDecoder.free_slots`: the others' cache and cross-attention
# keys and values copied to the first slots) once this share of the slots is over; until then their rows are computed
# with the others'. On the shipped en->de model's 64 captions, freeing at half computed 13-14% of the rows for inputs
# already over (greedy and beam 4), at 3/8 (one thread, paired calls) 0-4% faster greedy and 1-6% with 4 beams.
FREED_SHARE = 3 / 8


class CpuDecoder:
    """The decoder's state during one search: `step` and `keep`, as `vaswani.search` drives them.

    The inputs' rows sit in slots, `beams` rows each. Every layer's self-attention keys and values are one tensor,
    `cache` (layers, 2 (keys, values), slots, heads, capacity, beams, head_dim), so that one copy writes a layer's
    new key and value: beam j's key at position p is in row (p, history[a, j, p]) of its slot's (capacity, beams)
    block. The capacity starts at `min_span` positions and grows by as many (`grow`); attention reads every
    position of it, those after the current one masked (zeros, never NaN). Every layer's cross-attention keys and
    values are computed at the start, as the attention's two batched products read them: keys (slots * heads,
    head_dim, source), values (slots * heads, source, head_dim).

    Beam search's first step takes one row per input (`first_step_per_input`: the beams are all alike then), whose
    key and value go to beam slot 0 of position 0, where every beam's history points.
    """

    first_step_per_input = True

    def __init__(self, weights: ModelWeights, encoder_states: torch.Tensor, source_mask: torch.Tensor | None,
                 beams: int, max_length: int, workspace: Workspace | None = None):
        self.weights, self.beams = weights, beams
        self.row_beams = beams  # the rows each slot has in this step: 1 at beam search's first step (see above)
        self.workspace = workspace if workspace is not None else Workspace()
        self.cache_name = 0  # the cache alternates between two buffers when slots are freed
        inputs, source_length, d_model = encoder_states.shape
        first = weights.layers[0]
        self.heads, self.head_dim = first.heads, first.head_dim
        self.max_positions = max_length - 1  # the last token generated is never fed
        self.min_span = -(-MIN_KEYS // beams)  # the fewest positions self-attention spans (MIN_KEYS)
        self.most_positions = max(self.max_positions, self.min_span)  # the most the cache ever holds
        self.position = 0
        self.slots = torch.arange(inputs)  # the slot of each input still decoding
        self.slot_count = inputs
        self.capacity = min(self.most_positions, self.min_span)  # the positions the cache holds now (`grow`)
        shape = (len(weights.layers), 2, inputs, self.heads, self.capacity, beams, self.head_dim)
        self.cache = self.workspace.take("cache0", shape, encoder_states)
        self.cache.zero_()  # read (masked) before they are written: zeros, not NaN
        # the cross-attention keys, (slots, heads, head_dim, source) (a product with a contiguous right-hand side is
        # about twice as fast as with a transposed view at these sizes), and values, (slots, heads, source,
        # head_dim): one product and one copy each (one product for all layers and one six-dimensional copy took
        # longer). The products are computed on the real tokens only, as the encoder's: the padding's keys and
        # values are zeros, hidden by `source_bias`.
        states = encoder_states.reshape(-1, d_model)
        real = _real_rows(source_mask)
        packed = states.index_select(0, real) if real is not None else states
        padded = states.new_zeros(states.shape) if real is not None else None

        def project(product: Product) -> torch.Tensor:
            projected = product(packed)
            return (padded.index_copy_(0, real, projected) if real is not None else projected).view(split)

        split = (inputs, source_length, self.heads, self.head_dim)
        keys = [project(product).permute(0, 2, 3, 1).contiguous() for product in weights.cross_keys]
        values = [project(product).permute(0, 2, 1, 3).contiguous() for product in weights.cross_values]
        self.source_bias = _padding_bias(source_mask, encoder_states.dtype)  # (slots, 1, 1, source) or None
        if source_length < MIN_KEYS:  # a short source: zero keys and values after it, masked (MIN_KEYS)
            extra = MIN_KEYS - source_length
            keys = [F.pad(layer_keys, (0, extra)) for layer_keys in keys]
            values = [F.pad(layer_values, (0, 0, 0, extra)) for layer_values in values]
            bias = self.source_bias
            bias = bias if bias is not None else encoder_states.new_zeros(inputs, 1, 1, source_length)
            self.source_bias = F.pad(bias, (0, extra), value=-float("inf"))
        self.set_cross_attention(keys, values)
        self.position_terms = _absolute_positions(weights, weights.positions, torch.arange(self.max_positions))
        self.relative = first.relative_bias is not None
        self.position_bias = self.position_bias_table()
        # beam j's history: the beam slot holding its key at each position (before any choice, its own)
        self.history = torch.arange(beams).view(1, beams, 1).repeat(inputs, 1, self.most_positions)
        self.beam_ids = torch.arange(beams)
        # the logits of the steps MKL computes (all of them, or those of one row: ONEDNN_VOCAB)
        if weights.vocab_int8 is None:
            logit_rows = inputs * beams if weights.vocab_packed is None else min(inputs * beams, ONEDNN_VOCAB_ROWS - 1)
            self.logits = self.workspace.take("logits", (logit_rows, weights.vocab_weight.shape[1]), encoder_states)

    def position_bias_table(self) -> torch.Tensor:
        """Every layer's additive bias of a query at the last position over every key position, repeated for every
        beam slot, then -inf for `min_span` positions after it: (layers, heads, max_positions + min_span, beams)
        (heads 1 without relative positions: zeros, then -inf). The query at position t takes the `capacity` columns
        from max_positions - 1 - t: its relative biases over positions 0..t, -inf over the later positions (the
        capacity is never more than `min_span` positions past t + 1: `grow`)."""
        positions = torch.arange(self.max_positions)
        if self.relative:
            last = positions[-1:]
            rows = torch.stack([_relative_biases(layer, last, positions)[:, 0] for layer in self.weights.layers])
        else:
            rows = torch.zeros(len(self.weights.layers), 1, self.max_positions)
        rows = F.pad(rows, (0, self.min_span), value=-float("inf"))
        return rows[..., None].expand(-1, -1, -1, self.beams).contiguous()

    @property
    def rows(self) -> torch.Tensor:
        """The decoder rows (slot-major) of the rows still decoding."""
        return (self.slots[:, None] * self.beams + self.beam_ids).view(-1)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed each row's last token; the logits of the next one (rows, vocab), valid until the next step."""
        weights, position = self.weights, self.position
        if position >= self.max_positions:
            raise ValueError(f"The decoder was set up for {self.max_positions} positions; it cannot take more.")
        if position >= self.capacity:
            self.grow()
        self.row_beams = 1 if position == 0 and tokens.shape[0] == self.slot_count else self.beams
        every_slot_decodes = self.slots.shape[0] == self.slot_count
        if not every_slot_decodes:  # inputs that are over keep their slots until they are freed: give them any token
            all_tokens = tokens.new_zeros(self.slot_count * self.beams)
            all_tokens[self.rows] = tokens
            tokens = all_tokens
        hidden = F.embedding(tokens, weights.embed)
        if self.position_terms is not None:
            hidden = hidden + self.position_terms[position]
        attention = self.self_attention_inputs(position)
        for index, layer in enumerate(weights.layers):
            hidden = _residual(weights, hidden, layer.self_norm,
                               lambda x: self.self_attention(index, layer, x, attention))
            hidden = _residual(weights, hidden, layer.cross_norm, lambda x: self.cross_attention(index, layer, x))
            hidden = _residual(weights, hidden, layer.feed_forward_norm, lambda x: _feed_forward(layer, x))
        if weights.final_norm is not None:
            hidden = _layer_norm(hidden, weights.final_norm)
        if not every_slot_decodes:
            hidden = hidden[self.rows]
        self.position += 1
        if weights.vocab_int8 is not None:
            logits = weights.vocab_int8(hidden)
        elif hidden.shape[0] >= ONEDNN_VOCAB_ROWS and weights.vocab_packed is not None:
            logits = torch.ops.mkldnn._linear_pointwise(hidden, weights.vocab_packed, None, "none", [], "")
        else:
            logits = torch.mm(hidden, weights.vocab_weight, out=self.logits[: hidden.shape[0]])
        if position == 0 and not logits.sum(dtype=torch.float32).isfinite():  # (as the model's forward warns)
            logger.warning_once(NON_FINITE_LOGITS)
        return logits

    def set_cross_attention(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Each layer's cross-attention keys (slots, heads, head_dim, source) and values (slots, heads, source,
        head_dim) as the attention's batched products read them, (slots * heads, ...), and the source padding's bias
        as `baddbmm` adds it to the scores, (slots * heads, 1, source), or None (no padding)."""
        slots, heads, head_dim, source = keys[0].shape
        self.cross_keys = [layer_keys.view(slots * heads, head_dim, source) for layer_keys in keys]
        self.cross_values = [layer_values.view(slots * heads, source, head_dim) for layer_values in values]
        self.cross_bias = None
        if self.source_bias is not None:
            self.cross_bias = self.source_bias.expand(slots, heads, 1, source).reshape(slots * heads, 1, source)

    def self_attention_inputs(self, position: int):
        """What every layer's self-attention reads at this step: the new key and value's place in the cache, the
        keys (transposed) and values of every position the cache holds (at least `min_span`: MIN_KEYS) as batched
        products read them, and the bias `baddbmm` adds to the scores (the relative positions, -inf after
        `position`, and with beams the mask of each beam's own history), (layers, slots * heads or 1, rows or 1,
        keys), or None. (`baddbmm` took 46 us where `bmm` and an in-place addition took 72, greedy, 64 captions.)"""
        slots, beams = self.slot_count, self.beams
        span = self.capacity
        seen = span * beams
        layers = self.cache.shape[0]
        window = self.cache.view(layers, 2, slots * self.heads, seen, self.head_dim)
        start = self.max_positions - 1 - position
        bias = None
        if self.relative or span > position + 1:
            bias = self.position_bias[:, :, start : start + span].reshape(-1, 1, self.position_bias.shape[1], 1, seen)
        if beams > 1:
            mask = self.beam_mask(position, span)[:, :, : self.row_beams]  # (slots, 1, row_beams, seen)
            bias = mask.expand(layers, *mask.shape) if bias is None else bias + mask  # (layers, slots, heads, ...)
        if bias is not None:
            if bias.shape[1] == bias.shape[2] == 1:  # the same for every slot and head: broadcast
                bias = bias.view(layers, 1, bias.shape[3], seen)
            else:
                bias = bias.expand(layers, slots, self.heads, -1, seen).reshape(layers, slots * self.heads, -1, seen)
        new = self.cache[:, :, :, :, position]  # (layers, 2, slots, heads, beams, head_dim)
        if self.row_beams < beams:
            new = new[..., : self.row_beams, :]
        # each layer's part, in one operation for all the layers
        return new.unbind(), window[:, 0].transpose(-1, -2).unbind(), window[:, 1].unbind(), \
            bias.unbind() if bias is not None else [None] * layers

    def self_attention(self, index: int, layer: LayerWeights, hidden: torch.Tensor, attention) -> torch.Tensor:
        """Self-attention of the new rows: their query, key and value in one product, the key and value written to
        the cache in one copy, then two batched products and a softmax over the keys so far."""
        new, keys, values, bias = attention
        slots, beams, heads, head_dim = self.slot_count, self.row_beams, self.heads, self.head_dim
        projected = layer.qkv(hidden).view(slots, beams, 3, heads, head_dim)
        new[index].copy_(projected[:, :, 1:].permute(2, 0, 3, 1, 4))
        query = projected[:, :, 0].transpose(1, 2).reshape(slots * heads, beams, head_dim)
        if bias[index] is not None:
            scores = torch.baddbmm(bias[index], query, keys[index])  # (slots * heads, beams, seen)
        else:
            scores = torch.bmm(query, keys[index])
        output = torch.bmm(torch.softmax(scores, dim=-1), values[index])
        return layer.self_out(self.merge_heads(output))

    def merge_heads(self, states: torch.Tensor) -> torch.Tensor:
        """(slots * heads, row_beams, head_dim) -> (slots * row_beams, heads * head_dim)"""
        if self.row_beams == 1:
            return states.view(self.slot_count, -1)
        return states.view(self.slot_count, self.heads, self.row_beams, self.head_dim).transpose(1, 2).reshape(
            self.slot_count * self.row_beams, -1)

    def beam_mask(self, position: int, span: int) -> torch.Tensor:
        """(slots, 1, beams, span * beams): 0 where a beam's query may see a key (the key of its own history at that
        position), -inf elsewhere (positions after `position` are masked by `position_bias`)."""
        self.history[:, :, position] = self.beam_ids
        own = self.history[:, :, :span, None] == self.beam_ids
        return torch.where(own, 0.0, -float("inf")).view(self.slot_count, 1, self.beams, -1)

    def cross_attention(self, index: int, layer: LayerWeights, hidden: torch.Tensor) -> torch.Tensor:
        slots, beams, heads, head_dim = self.slot_count, self.row_beams, self.heads, self.head_dim
        query = layer.cross_query(hidden)
        if beams == 1:
            query = query.view(slots * heads, 1, head_dim)
        else:
            query = query.view(slots, beams, heads, head_dim).transpose(1, 2).reshape(slots * heads, beams, head_dim)
        keys, values = self.cross_keys[index], self.cross_values[index]
        if self.cross_bias is not None:
            scores = torch.baddbmm(self.cross_bias, query, keys)
        else:
            scores = torch.bmm(query, keys)
        output = torch.bmm(torch.softmax(scores, dim=-1), values)
        return layer.cross_out(self.merge_heads(output))

    def keep(self, rows: torch.Tensor, inputs: torch.Tensor | None) -> None:
        """Go on with these rows (indices into the rows still decoding) of these inputs (see
        `vaswani.search`)."""
        if inputs is not None:
            self.slots = self.slots[inputs]
        if self.beams > 1:
            # each new beam's history is the one of the beam it continues (the row `rows % beams` of its slot)
            histories = self.history.view(-1, self.history.shape[2])
            origins = self.slots.repeat_interleave(self.beams) * self.beams + rows % self.beams
            continued = histories.index_select(0, origins)
            if self.slots.shape[0] == self.slot_count:  # every slot decodes: they are 0, 1, ... in order
                self.history = continued.view(self.history.shape)
            else:
                histories.index_copy_(0, self.rows, continued)
        if inputs is not None and self.slots.shape[0] <= self.slot_count * (1 - FREED_SHARE):
            self.free_slots()

    def grow(self) -> None:
        """Make room for `min_span` more positions in the cache (one copy of what was written): at most
        `min_span` - 1 positions past the current one are read, masked."""
        self.move_cache(None, min(self.most_positions, self.capacity + self.min_span))

    def move_cache(self, slots: torch.Tensor | None, capacity: int) -> None:
        """Copy what the cache holds of these slots (all: None) into the other buffer, sized for `capacity`
        positions, the positions not yet written zeros (read, masked, before they are written)."""
        written = self.position
        self.cache_name = 1 - self.cache_name
        layers, pair, slot_count, heads, _, beams, head_dim = self.cache.shape
        shape = (layers, pair, slot_count if slots is None else slots.shape[0], heads, capacity, beams, head_dim)
        cache = self.workspace.take(f"cache{self.cache_name}", shape, self.cache)
        kept = self.cache[:, :, :, :, :written]
        cache[:, :, :, :, :written] = kept if slots is None else kept.index_select(2, slots)
        cache[:, :, :, :, written:].zero_()
        self.cache, self.capacity = cache, capacity

    def free_slots(self) -> None:
        """Move the inputs still decoding to the first slots and drop the others (one copy of what was written)."""
        slots = self.slots
        self.move_cache(slots, self.capacity)
        heads = self.heads
        keys = [keys.view(-1, heads, *keys.shape[1:]).index_select(0, slots) for keys in self.cross_keys]
        values = [values.view(-1, heads, *values.shape[1:]).index_select(0, slots) for values in self.cross_values]
        if self.source_bias is not None:
            self.source_bias = self.source_bias.index_select(0, slots)
        self.set_cross_attention(keys, values)
        self.history = self.history.index_select(0, slots)
        self.slots = torch.arange(slots.shape[0])
        self.slot_count = slots.shape[0]


def _layer_norm(hidden: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor, float]) -> torch.Tensor:
    weight, bias, eps = norm
    return torch.layer_norm(hidden, weight.shape, weight, bias, eps)


# ---------------------------------------------------------------------------------------------------------------
# What `model.generate` becomes, and the decoding loop it hands to `generate` (its `custom_generate` argument)
# ---------------------------------------------------------------------------------------------------------------


class CallWeights(threading.local):
    """The weights the thread's current `generate` call checked (`CpuDecoding.current_weights`), so that its encoder
    and its decoder check them once (0.3-0.6 ms a check)."""

    weights: ModelWeights | None = None

    def __reduce__(self):  # a copy of a model set up for this path (deepcopy, pickle) starts with none
        return CallWeights, ()


class CpuDecoding:
    """`generate` on a CPU (what `VaswaniForConditionalGeneration.generate` calls there by default): transformers'
    `generate` itself, `generate` below, handing its decoding loop to `decoding_loop` (this path where it applies,
    transformers' own elsewhere). Holds the laid-out weights and the threads' buffers.

    The encoder and the search run in `torch.inference_mode()`, where each operation skips the version counting and
    view tracking that `no_grad` keeps (which `generate` runs in): a decoding step is 140-190 small operations, and
    paired calls on 64 captions (one thread, 2-core EPYC) were 1.04x (de->en greedy and beam 4) and 1.05x (en->de
    greedy) faster. Their tensors (the workspace's buffers, the laid-out weights) are inference tensors, written only
    here; the output is copied into an ordinary tensor."""

    def __init__(self, model: nn.Module, generate: Callable | None = None):
        self.model = model
        # the `generate` that prepares the call and runs the loop it is handed (default: the model class's own)
        self.generate = generate or type(model).generate
        self.weights: ModelWeights | None = None
        self.workspace = Workspace()
        self.call = CallWeights()
        self.said: set[str] = set()  # why the model ran transformers' loop, each said once (`computes`)

    def __getstate__(self):
        """A copy (deepcopy, pickle) lays its weights out anew at its first call, from its own model's parameters
        (oneDNN's reordered output projection cannot be copied)."""
        return {**self.__dict__, "weights": None, "said": set()}

    def __call__(self, *args, **kwargs):
        model = self.model
        # transformers hands a callable `custom_generate` none of these: such a call keeps transformers' own loop
        config = kwargs.get("generation_config") or model.generation_config
        if (kwargs.get("custom_generate") is None and not any(kwargs.get(name) is not None for name in LOOP_ARGUMENTS)
                and not _asks_for_a_hub_method(kwargs, config) and not _asks_for_a_cache(kwargs, config)
                and not _asks_for_more_than_tokens(kwargs, config)):
            if self.computes(model):
                kwargs["custom_generate"] = self.decoding_loop
                if not FreedMemory.decided:
                    keep_freed_memory()
                if (input_ids := self.encodable_inputs(args, kwargs)) is not None:
                    self.call.weights = self.current_weights()
                    with torch.inference_mode():
                        states = encode(self.call.weights, input_ids, kwargs.get("attention_mask"), self.workspace)
                    kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=states)
            # generate would build a cache from the model's config for every call (about 3.5 ms of a 120 ms greedy
            # call on the shipped en->de model, most of it copying the config); this loop needs none, and where
            # transformers' loop runs instead, the model fills an empty one as it would its own
            kwargs[CACHE_FIELD] = EncoderDecoderCache(DynamicCache(), DynamicCache())
        try:
            return self.generate(model, *args, **kwargs)
        finally:
            self.call.weights = None

    def computes(self, model: nn.Module) -> bool:
        """Whether this path computes the model as it is now (`_model_runs_here`, `unreproduced`). Where it does
        not because of what was done to the model (a hook, a forward replaced, a module of another class, ...),
        transformers' loop runs the model itself, and says why once per reason, at info level."""
        if not _model_runs_here(model):
            return False  # (a model in training mode, cast or moved: generate's docstring says so)
        reason = unreproduced(model)
        if reason is None:
            return True
        if reason not in self.said:
            self.said.add(reason)
            logger.info(f"generate: transformers' loop, not the CPU decoder: {reason}.")
        return False

    def encodable_inputs(self, args, kwargs) -> torch.Tensor | None:
        """The call's input ids where `encode` gives generate its encoder output: token ids with no encoder output
        given, no attentions or hidden states asked for (the model's own encoder records those), for a model this
        path computes (the caller checked: `computes`)."""
        inputs = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
        if not torch.is_tensor(inputs) or inputs.dim() != 2 or inputs.is_floating_point():
            return None
        if any(kwargs.get(name) is not None for name in ("encoder_outputs", "inputs_embeds")):
            return None
        config = kwargs.get("generation_config") or self.model.generation_config
        for name in ("output_attentions", "output_hidden_states"):
            if kwargs.get(name, getattr(config, name, False)):
                return None
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.shape != inputs.shape:
            return None
        model_config = self.model.config
        if inputs.shape[1] > model_config.max_position_embeddings or (
            inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) >= model_config.vocab_size)
        ):
            return None  # the model's encoder says what is wrong with such an input
        return inputs

    def current_weights(self) -> ModelWeights:
        if self.weights is None or self.weights.versions != _parameter_versions(self.model):
            self.weights = ModelWeights(self.model)
        return self.weights

    def decoding_loop(self, model, input_ids, logits_processor, stopping_criteria, generation_config, **kwargs):
        """`generate`'s loop for greedy and beam search (see the module docstring); transformers' own otherwise."""
        mode = generation_config.get_generation_mode()
        settings = search_settings(model, input_ids, logits_processor, stopping_criteria, generation_config, kwargs)
        if settings is None:
            name = GENERATION_MODES_MAPPING[mode]
            if "/" in name:
                raise ValueError(
                    f"{mode.name.lower()} is a decoding method transformers loads from the Hub ({name}); the CPU "
                    "decoding path does not run it. Call generate with cpu_decoding=False, or "
                    "pass custom_generate yourself."
                )
            method = getattr(type(model), name)
            return method(model, input_ids, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                          generation_config=generation_config, **kwargs)
        beams = settings.num_beams
        encoder_states = kwargs["encoder_outputs"].last_hidden_state[::beams]
        source_mask = kwargs.get("attention_mask")
        source_mask = source_mask[::beams] if source_mask is not None else None
        weights = self.call.weights or self.current_weights()
        with torch.inference_mode():  # (see the class docstring)
            decoder = CpuDecoder(weights, encoder_states, source_mask, beams, settings.max_length, self.workspace)
            output = search(decoder, encoder_states.shape[0], int(input_ids[0, 0]), settings)
        return output.clone()  # an ordinary tensor, which the caller may change in place


def _asks_for_a_hub_method(kwargs: dict, config) -> bool:
    """Whether a call's settings choose a decoding method transformers loads from the Hub (`HUB_METHOD_SETTINGS`)."""
    for name in HUB_METHOD_SETTINGS:
        value = _setting(kwargs, config, name)
        if value is not None and (name != "num_beam_groups" or value > 1) and (name != "penalty_alpha" or value > 0):
            return True
    return False


def _setting(kwargs: dict, config, name: str):
    """A call's setting: its argument, else the generation config's."""
    return kwargs[name] if name in kwargs else getattr(config, name, None)


def _asks_for_more_than_tokens(kwargs: dict, config) -> bool:
    """Whether a call asks for sampling or for more than the tokens (scores, attentions, hidden states, a dict): that
    is transformers' loop, over the model's own encoder (this path's encoder agrees with it to float32 rounding only,
    and does not record attentions). Other settings this path does not run are found in `search_settings`, once
    `generate` has made its processors; such a call runs transformers' loop over this path's encoder output."""
    return bool(_setting(kwargs, config, "do_sample")) or any(
        _setting(kwargs, config, name) for name in ("return_dict_in_generate", *OUTPUT_OPTIONS))


def _asks_for_a_cache(kwargs: dict, config) -> bool:
    """Whether a call brings a cache of its own or names the kind it wants (a static cache, to compile the forward):
    that is for transformers' loop."""
    if any(kwargs.get(name) is not None for name in ("cache", "past_key_values", "cache_implementation")):
        return True
    return getattr(config, "cache_implementation", None) is not None


def _model_runs_here(model: nn.Module) -> bool:
    """This path computes a model in eval mode with float32 weights on the CPU (and its modules as this project
    builds them: `unreproduced`)."""
    parameter = next(model.parameters())
    return not model.training and parameter.device.type == "cpu" and parameter.dtype == torch.float32


# ---------------------------------------------------------------------------------------------------------------
# Which models this path reproduces: the model as this project builds it, nothing changed around its modules
# ---------------------------------------------------------------------------------------------------------------


# The classes of the modules this path lays out, exactly (a subclass may compute something else): the project's own,
# by name, as a modeling_vaswani.py defines them (the package's, or a saved model's copy: `for_cpu_inference` puts the
# package's decoder in front of a model of older code), and torch's and transformers' classes among them (the
# activations this path calls as the model does). A class that computes one of these from the same parameters says so
# in its own body, `cpu_decoder_reads_as = nn.Linear` (vaswani.serving.cpu_inference.OneDNNLinear); its subclasses
# do not inherit that.
PROJECT_CLASSES = frozenset({
    "VaswaniModel", "VaswaniEncoder", "VaswaniDecoder", "VaswaniEmbeddings", "VaswaniEncoderLayer",
    "VaswaniDecoderLayer", "VaswaniAttention", "VaswaniRelativePositionBias", "VaswaniResidual", "VaswaniFeedForward",
})
MODEL_CLASS = "VaswaniForConditionalGeneration"
READ_AS = "cpu_decoder_reads_as"
TORCH_CLASSES = frozenset({nn.Linear, nn.LayerNorm, nn.Embedding, nn.ModuleList})
ACTIVATION_CLASSES = frozenset(entry[0] if isinstance(entry, tuple) else entry for entry in ACT2CLS.values())
# the classes found to be these (filled as they are met: a model's modules are a dozen classes)
_REPRODUCED_CLASSES: set[type] = set(TORCH_CLASSES | ACTIVATION_CLASSES | {INT8_WEIGHTS})
# what a subclass of the model's class may not define: what transformers' loop calls, step by step
STEP_METHODS = ("forward", "__call__", "_call_impl", "_wrapped_call_impl", "prepare_inputs_for_generation")
_REPRODUCED_MODEL_CLASSES: set[type] = set()
# the attention implementations whose function this path computes, and their masks: transformers' own
ATTENTION = {"eager": (None, eager_mask), "sdpa": (sdpa_attention_forward, sdpa_mask)}


def unreproduced(model: nn.Module) -> str | None:
    """What this path would not compute of `model` as it is, in a few words; None where it computes the model's own
    function (greedy and beam search then give the tokens of transformers' loop).

    Anything done to the model that its forward would honour and this path would not: a forward hook or pre-hook on
    any module (transformers' own output recorders aside: they record only when a call asks for attentions or hidden
    states, which runs transformers' loop), or registered for every module (`register_module_forward_hook`); a
    `forward` (or `_call_impl`) set on a module, or a module compiled in place (`module.compile()`); a subclass of the
    model's class that defines a method transformers' loop calls (`STEP_METHODS`); a module of any other class than
    those this path lays out (`PROJECT_CLASSES`, `TORCH_CLASSES`, torch.ao's dynamic int8 Linear, the activations: a
    PEFT adapter, a custom Linear, a float16 dynamic one, a parametrized module, an attention module of one's own, a
    torch.compile wrapper); an output projection with a bias; an attention function or mask other than transformers'
    eager and sdpa; autocast on.

    Scanned at every call, walking the modules once (about 160 on the shipped models): nothing here is kept between
    calls but which classes were found to be the project's, so that a hook added or a module replaced after a call
    counts at the next."""
    module_globals = torch.nn.modules.module
    for kind, hooks in (("forward hook", module_globals._global_forward_hooks),
                        ("forward pre-hook", module_globals._global_forward_pre_hooks),
                        ("forward hook", getattr(module_globals, "_global_forward_hooks_always_called", None))):
        if hooks:
            return f"a {kind} registered for every module ({_named_hooks(hooks.values())})"
    if torch.is_autocast_enabled("cpu"):
        return f"autocast is on ({torch.get_autocast_dtype('cpu')})"
    implementation = model.config._attn_implementation
    function, mask = ATTENTION.get(implementation, (None, None)) if isinstance(implementation, str) else (None, None)
    if (mask is None or ALL_ATTENTION_FUNCTIONS.get(implementation) is not function
            or ALL_MASK_ATTENTION_FUNCTIONS.get(implementation) is not mask):
        return f"the attention implementation {implementation!r} is not transformers' own eager or sdpa"
    if type(model) not in _REPRODUCED_MODEL_CLASSES and (problem := _model_class_problem(type(model))):
        return problem
    for name in STEP_METHODS:
        if name in model.__dict__:
            return f"{name} set on the model ({_named_hooks([model.__dict__[name]])})"
    modules = [model]
    while modules:
        module = modules.pop()
        if module is None:
            continue
        state = module.__dict__
        if (state["_forward_hooks"] or state["_forward_pre_hooks"] or "forward" in state or "_call_impl" in state
                or state.get("_compiled_call_impl") is not None
                or (module is not model and type(module) not in _REPRODUCED_CLASSES)):
            if (problem := _module_problem(model, module)) is not None:
                return problem
        modules.extend(state["_modules"].values())
    if type(model.lm_head) is not INT8_LINEAR and model.lm_head.bias is not None:
        return "lm_head has a bias, which this decoder does not add"
    return None


def _is_project_class(cls: type, name: str) -> bool:
    """Whether `cls` is the class `name` of a modeling_vaswani.py (the package's or a saved model's copy)."""
    module = cls.__module__
    return (cls.__name__ == name and module.rpartition(".")[2] == "modeling_vaswani"
            and getattr(sys.modules.get(module), name, None) is cls)


def _model_class_problem(cls: type) -> str | None:
    """Why this path does not compute a model of class `cls` (None where it does: kept in
    `_REPRODUCED_MODEL_CLASSES`): the class is, or derives from, the project's model class without defining a method
    transformers' loop calls (a class of older code, or a user's subclass adding methods of its own, computes the
    same)."""
    for base in cls.__mro__:
        if _is_project_class(base, MODEL_CLASS):
            break
        overridden = [name for name in STEP_METHODS if name in vars(base)]
        if overridden:
            return f"the model's class {base.__qualname__} defines {overridden[0]}"
    else:
        return f"the model is a {cls.__module__}.{cls.__qualname__}, not a {MODEL_CLASS}"
    _REPRODUCED_MODEL_CLASSES.add(cls)
    return None


def _module_problem(model: nn.Module, module: nn.Module) -> str | None:
    """What about `module` (the model or one of its modules) this path would not compute, or None (its class then
    kept in `_REPRODUCED_CLASSES`)."""
    problem = _problem_of(module, module is model)
    if problem is None:
        return None
    name = "the model" if module is model else next(
        (name for name, found in model.named_modules() if found is module), "a module")
    return problem.replace("{name}", name, 1)


def _problem_of(module: nn.Module, is_model: bool) -> str | None:
    """`_module_problem`, the module named `{name}`."""
    cls = type(module)
    if cls is INT8_LINEAR and module._packed_params.dtype != torch.qint8:
        return f"{{name}} is a {cls.__module__}.{cls.__qualname__} of {module._packed_params.dtype}, not qint8"
    if not is_model and cls not in _REPRODUCED_CLASSES and cls is not INT8_LINEAR:
        if not (any(_is_project_class(cls, project) for project in PROJECT_CLASSES)
                or vars(cls).get(READ_AS) in TORCH_CLASSES):
            return f"{{name}} is a {cls.__module__}.{cls.__qualname__}, a class this decoder does not lay out"
        _REPRODUCED_CLASSES.add(cls)
    state = module.__dict__
    for kind, hooks in (("forward hook", state["_forward_hooks"]), ("forward pre-hook", state["_forward_pre_hooks"])):
        own = [hook for hook in hooks.values() if getattr(hook, "__module__", None) != output_capturing.__name__]
        if own:
            return f"a {kind} on {{name}} ({_named_hooks(own)})"
    for attribute in ("forward", "_call_impl"):
        if attribute in state:
            return f"{attribute} set on {{name}} ({_named_hooks([state[attribute]])})"
    if state.get("_compiled_call_impl") is not None:
        return "{name} compiled in place (Module.compile)"
    return None


def _named_hooks(hooks) -> str:
    return ", ".join(getattr(hook, "__qualname__", None) or type(hook).__qualname__ for hook in hooks)


def search_settings(model, input_ids, logits_processor, stopping_criteria, generation_config, kwargs):
    """The `SearchSettings` of this `generate` call, or None where this path does not do what the call asks."""
    mode = generation_config.get_generation_mode()
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.BEAM_SEARCH):
        return None
    if generation_config.return_dict_in_generate or any(getattr(generation_config, name, False) for name in OUTPUT_OPTIONS):
        return None
    if kwargs.get("streamer") is not None or kwargs.get("synced_gpus") or kwargs.get("assistant_model") is not None:
        return None
    model_kwargs = {key: value for key, value in kwargs.items()
                    if key not in ("streamer", "synced_gpus", "assistant_model", "tokenizer", "assistant_tokenizer")}
    if set(model_kwargs) - HANDLED_MODEL_KWARGS or "encoder_outputs" not in model_kwargs:
        return None
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        return None
    if not _model_runs_here(model) or torch.is_grad_enabled():
        return None
    if input_ids.shape[1] != 1 or not bool((input_ids == input_ids[0, 0]).all()):
        return None  # a prompt for the decoder, or different start tokens

    max_length, eos = None, ()
    for criterion in stopping_criteria:
        if type(criterion) is MaxLengthCriteria and max_length is None:
            max_length = criterion.max_length
        elif type(criterion) is EosTokenCriteria and not eos:
            eos = tuple(int(token) for token in criterion.eos_token_id.view(-1).tolist())
        else:
            return None
    if max_length is None or max_length < 2:
        return None
    if max_length - 1 > model.config.max_position_embeddings:
        return None  # transformers' loop, whose model says where the positions run out (if the search gets there)
    no_repeat, min_length = 0, 0
    for processor in logits_processor:
        if type(processor) is NoRepeatNGramLogitsProcessor and not no_repeat:
            no_repeat = processor.ngram_size
        elif type(processor) in (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor):
            if set(processor.eos_token_id.view(-1).tolist()) != set(eos):
                return None
            if type(processor) is MinLengthLogitsProcessor:
                min_length = max(min_length, processor.min_length)
            else:
                min_length = max(min_length, processor.prompt_length_to_skip + processor.min_new_tokens)
        else:
            return None
    pad = generation_config._pad_token_tensor
    beams = generation_config.num_beams or 1
    return SearchSettings(
        max_length=max_length,
        eos_token_ids=eos,
        pad_token_id=None if pad is None else int(pad),
        num_beams=beams,
        length_penalty=generation_config.length_penalty if beams > 1 else 1.0,
        early_stopping=generation_config.early_stopping if beams > 1 else False,
        num_return_sequences=generation_config.num_return_sequences or 1,
        no_repeat_ngram_size=no_repeat,
        min_length=min_length,
    )


__all__ = ["CpuDecoder", "CpuDecoding", "ModelWeights", "search_settings"]
