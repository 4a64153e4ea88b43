"""The original Transformer ("Attention Is All You Need", Vaswani et al., 2017) as Hugging Face models.

Read top to bottom, this file follows the paper:

    positional encodings (3.5)  ->  multi-head attention (3.2)  ->  position-wise feed-forward network (3.3)
    ->  encoder and decoder layers with residual connections and LayerNorm (3.1)  ->  the two stacks
    ->  the encoder-decoder with shared embeddings (3.4)  ->  the task heads.

Last come the helpers of a saved model: the weights' permissions and the code files it carries. The checks on
loading (the files of a folder from elsewhere, whether the weights fit in memory) are loading_checks.py's.

Attention goes through transformers' attention-function interface (`eager`, `sdpa`, `flash_attention_2`), decoding
uses transformers' cache classes, and the outputs are transformers' output classes, so that `generate()`, the
pipelines, `Trainer`, gradient checkpointing and `output_attentions` work as for any model in the library.

This file is copied into every saved model, so it imports from this project only with relative imports.
"""

import inspect
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import (
    ALL_MASK_ATTENTION_FUNCTIONS,
    create_bidirectional_mask,
    create_causal_mask,
    flash_attention_mask,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple, logging
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vaswani import MAX_SIZES, VaswaniConfig
from .loading_checks import (
    check_fits_in_memory,
    check_generation_fits,
    check_model_files,
    loading_device,
    loading_dtype,
)
from .model_functions import CACHE_FIELD, NON_FINITE_LOGITS, padding_aware_positions, sinusoidal_positions
from .pipeline_tasks import register_pipeline_tasks


logger = logging.get_logger(__name__)


def register_cache_for_export() -> None:
    """Let `torch.export.export` of the forward return the decoder's cache, as it does by default (use_cache=True):
    torch.export flattens a program's outputs into tensors and refuses a type it does not know. The cache's type is
    registered as a pytree node with transformers' own flattener, the one its Dynamo exporter registers for every
    cache type (`register_cache_pytrees_for_model`)."""
    try:
        from transformers.exporters.exporter_dynamo import register_pytree_node
    except ImportError:  # a transformers without its exporters: export the forward with use_cache=False
        return
    register_pytree_node(EncoderDecoderCache)


register_cache_for_export()


# Adapted from transformers.models.bart.modeling_bart.shift_tokens_right (same behaviour; errors that say which
# config field is missing).
def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing (section 3.1): the decoder reads the target shifted one position to the right, starting
    from `decoder_start_token_id`, so that position i predicts token i having seen only tokens before it."""
    if decoder_start_token_id is None:
        raise ValueError("`config.decoder_start_token_id` must be set to build decoder inputs from labels.")
    if pad_token_id is None:
        raise ValueError("`config.pad_token_id` must be set to build decoder inputs from labels.")
    shifted = input_ids.new_full(input_ids.shape, pad_token_id)
    shifted[:, 1:] = input_ids[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    # labels mark ignored positions with -100; the decoder must read a real token there
    return shifted.masked_fill(shifted == -100, pad_token_id)


def check_token_ids(input_ids: torch.Tensor | None, name: str) -> None:
    """Token ids index an embedding table: floats would be truncated silently, so say what is wrong instead."""
    if input_ids is not None and (input_ids.is_floating_point() or input_ids.is_complex()):
        raise TypeError(
            f"`{name}` must be an integer tensor of token ids (torch.long), got dtype {input_ids.dtype}. "
            "Use the tokenizer to produce ids, or convert with `.long()`."
        )


# ---------------------------------------------------------------------------------------------------------------
# Positional encoding (section 3.5): the sinusoidal table is model_functions.py's `sinusoidal_positions` (the CPU
# decoder computes it too); the learned and relative alternatives follow
# ---------------------------------------------------------------------------------------------------------------


class VaswaniRelativePositionBias(nn.Module):
    """A learned scalar per head for each key-query offset, added to the attention scores:

        score(q, k) = q . k / sqrt(d_k) + pi[k - q]

    Offsets beyond `max_distance` in either direction share the outermost entry, so the table has
    2 * max_distance + 1 rows whatever the sequence length.
    """

    def __init__(self, num_heads: int, max_distance: int):
        super().__init__()
        self.max_distance = max_distance
        self.bias = nn.Parameter(torch.zeros(2 * max_distance + 1, num_heads))

    def forward(self, query_length: int, key_length: int, device: torch.device,
                query_offset: int | torch.Tensor | None = None) -> torch.Tensor:
        """The bias of `query_length` queries at positions `query_offset`, `query_offset` + 1, ... over keys at
        positions 0 to `key_length` - 1. Unset, the queries are the last positions of the keys (a sequence attending
        to itself, or decoding with a cache that grows); a static cache holds keys beyond the queries (slots not
        filled yet, which the mask hides), and gives the offset: the tokens it holds, counted on the device."""
        if query_offset is None:
            query_offset = key_length - query_length
        query_positions = torch.arange(query_length, device=device) + query_offset
        key_positions = torch.arange(key_length, device=device)
        offsets = key_positions[None, :] - query_positions[:, None]
        offsets = offsets.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.bias[offsets].permute(2, 0, 1).unsqueeze(0)  # (1, heads, query, key)


# ---------------------------------------------------------------------------------------------------------------
# Multi-head attention (section 3.2)
# ---------------------------------------------------------------------------------------------------------------


# Adapted from transformers.models.bart.modeling_bart.eager_attention_forward: the same signature, so that sdpa and
# flash attention plug in through ALL_ATTENTION_FUNCTIONS; new here is the relative-position bias.
def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V, for all heads at once.

    `attention_mask` is additive: 0 where a query may attend, a large negative number where it may not (padding,
    and future positions in the decoder). `position_bias` holds the relative-position terms, if any.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (batch, query, heads, head_dim)
    return output, weights


def eager_mask_from(
    attention_mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, is_causal: bool, implementation: str
) -> torch.Tensor | None:
    """The additive mask eager attention takes, from the mask built for another attention implementation, so that a
    call asking for the attention weights can run eagerly (sdpa and flash attention return none).

    sdpa's mask is boolean (True where a query may attend), or absent where sdpa hides the future by its `is_causal`
    flag (counted from the first key). Flash attention's is a 2D padding mask over the keys, or absent, and its causal
    mask is counted from the last key (the queries are the newest positions). A float mask is additive already.
    """
    if attention_mask is not None and attention_mask.is_floating_point():
        return attention_mask
    query_length, key_length = query.shape[2], key.shape[2]
    allowed, known_keys = attention_mask, key_length
    if allowed is not None and allowed.dim() == 2:  # (batch, keys): padding only
        known_keys = allowed.shape[-1]  # a static cache's slots beyond them are empty
        allowed = F.pad(allowed.bool(), (0, key_length - known_keys))[:, None, None, :]
    if is_causal and query_length > 1 and (attention_mask is None or attention_mask.dim() == 2):
        from_last_key = ALL_MASK_ATTENTION_FUNCTIONS.get(implementation) is flash_attention_mask
        causal = torch.ones(query_length, key_length, dtype=torch.bool, device=query.device).tril(
            known_keys - query_length if from_last_key else 0
        )
        allowed = causal if allowed is None else allowed & causal
    if allowed is None:
        return None
    return torch.where(allowed, 0.0, torch.finfo(query.dtype).min).to(query.dtype)


def repeated_rows(states: torch.Tensor) -> int:
    """k where `states` is each of batch / k rows repeated k times in a row (beam search's expanded encoder output),
    else 1. Two comparisons of the rows, far cheaper than the projections they save."""
    batch, count = states.shape[0], 1
    while count < batch and torch.equal(states[count], states[0]):
        count += 1
    if count == 1 or batch % count or not torch.equal(states, states[::count].repeat_interleave(count, dim=0)):
        return 1
    return count


# Follows the structure of transformers.models.bart.modeling_bart.BartAttention (projections, cache update,
# attention interface); new here are the relative-position bias and the single projection of repeated encoder rows.
class VaswaniAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h projections of each kind are held in one d_model x d_model matrix and split into heads by a reshape.
    Self-attention takes queries, keys and values from one sequence; encoder-decoder ("cross") attention takes
    queries from the decoder and keys and values from the encoder output (`key_value_states`).
    """

    def __init__(
        self,
        config: VaswaniConfig,
        num_heads: int,
        is_causal: bool,
        layer_idx: int | None = None,
        is_cross_attention: bool = False,
    ):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5  # the 1 / sqrt(d_k) of scaled dot-product attention
        self.dropout = config.attention_dropout
        # read by the sdpa and flash paths: only the decoder's self-attention may hide the future
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx

        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

        use_relative = config.position_embedding_type == "relative" and not is_cross_attention
        self.relative_position_bias = (
            VaswaniRelativePositionBias(num_heads, config.relative_attention_max_distance) if use_relative else None
        )

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        return states.view(*states.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query = self._split_heads(self.q_proj(hidden_states))

        # With a cache, self-attention keys/values grow by one step per call; cross-attention keys/values depend
        # only on the encoder output, so they are computed on the first call and reused after that.
        layer_cache, reuse_cross = past_key_values, False
        if isinstance(past_key_values, EncoderDecoderCache):
            if self.is_cross_attention:
                layer_cache = past_key_values.cross_attention_cache
                reuse_cross = past_key_values.is_updated.get(self.layer_idx, False)
            else:
                layer_cache = past_key_values.self_attention_cache

        if reuse_cross:
            key = layer_cache.layers[self.layer_idx].keys
            value = layer_cache.layers[self.layer_idx].values
        else:
            source = key_value_states if self.is_cross_attention else hidden_states
            # beam search repeats each encoder output once per beam: project each distinct one once (in eager mode:
            # finding the repeats reads the rows' values, which a compiled graph cannot branch on)
            find_repeats = self.is_cross_attention and layer_cache is not None and not torch.compiler.is_compiling()
            repeats = repeated_rows(source) if find_repeats else 1
            distinct = source[::repeats] if repeats > 1 else source
            key = self._split_heads(self.k_proj(distinct))
            value = self._split_heads(self.v_proj(distinct))
            if repeats > 1:
                key, value = key.repeat_interleave(repeats, dim=0), value.repeat_interleave(repeats, dim=0)
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)
                if self.is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

        query_offset = kwargs.pop("query_offset", None)  # where the queries are, given by the decoder
        # The relative-position bias reaches SDPA as an additive float mask (transformers' sdpa path adds it to the
        # padding mask): SDPA then runs its memory-efficient kernel on a GPU (flash takes no bias) and its fused CPU
        # kernel. flex_attention with the bias as a score_mod gives the same outputs (within 1e-6) but was slower on a
        # CPU: 8-8.5x eager, 1.3-1.7x compiled by inductor (batch 16, 8 heads, 40 positions, head size 64).
        if self.relative_position_bias is not None:
            position_bias = self.relative_position_bias(query.shape[2], key.shape[2], query.device, query_offset)
            kwargs["position_bias"] = position_bias.to(query.dtype)

        implementation = self.config._attn_implementation
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        # Only eager attention computes the weights: a call that asks for them (as `capture_outputs` reads the
        # request: the argument, else the config) runs eagerly whatever the implementation, so that
        # `output_attentions=True` gives eager's weights. Calls that do not ask keep the chosen implementation.
        if implementation != "eager" and kwargs.get("output_attentions", self.config.output_attentions):
            attention_interface = eager_attention_forward
            is_causal = kwargs.get("is_causal", self.is_causal)
            attention_mask = eager_mask_from(attention_mask, query, key, is_causal, implementation)
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1))
        return output, weights


# ---------------------------------------------------------------------------------------------------------------
# Position-wise feed-forward network (section 3.3)
# ---------------------------------------------------------------------------------------------------------------


class VaswaniFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position separately and identically."""

    def __init__(self, config: VaswaniConfig, inner_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, inner_dim)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc2 = nn.Linear(inner_dim, config.d_model)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation(self.fc1(hidden_states))
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


# ---------------------------------------------------------------------------------------------------------------
# Encoder and decoder layers (section 3.1)
# ---------------------------------------------------------------------------------------------------------------


class VaswaniResidual(nn.Module):
    """A residual connection around a sub-layer, with dropout on the sub-layer output and a LayerNorm:

        post-LN (the paper):  LayerNorm(x + Dropout(Sublayer(x)))
        pre-LN:               x + Dropout(Sublayer(LayerNorm(x)))
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = config.dropout
        self.pre_norm = config.layer_norm_position == "pre"

    def forward(self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.pre_norm:
            return hidden_states + F.dropout(sublayer(self.layer_norm(hidden_states)), self.dropout, self.training)
        return self.layer_norm(hidden_states + F.dropout(sublayer(hidden_states), self.dropout, self.training))


class VaswaniEncoderLayer(GradientCheckpointingLayer):
    """Multi-head self-attention, then the feed-forward network, each inside a residual connection."""

    def __init__(self, config: VaswaniConfig, layer_idx: int):
        super().__init__()
        self.self_attn = VaswaniAttention(config, config.encoder_attention_heads, is_causal=False, layer_idx=layer_idx)
        self.self_attn_residual = VaswaniResidual(config)
        self.feed_forward = VaswaniFeedForward(config, config.encoder_ffn_dim)
        self.feed_forward_residual = VaswaniResidual(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        hidden_states = self.self_attn_residual(
            hidden_states, lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0]
        )
        return self.feed_forward_residual(hidden_states, self.feed_forward)


class VaswaniDecoderLayer(GradientCheckpointingLayer):
    """Masked multi-head self-attention, multi-head attention over the encoder output, then the feed-forward
    network, each inside a residual connection."""

    def __init__(self, config: VaswaniConfig, layer_idx: int):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = VaswaniAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_residual = VaswaniResidual(config)
        self.encoder_attn = VaswaniAttention(
            config, heads, is_causal=False, layer_idx=layer_idx, is_cross_attention=True
        )
        self.encoder_attn_residual = VaswaniResidual(config)
        self.feed_forward = VaswaniFeedForward(config, config.decoder_ffn_dim)
        self.feed_forward_residual = VaswaniResidual(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        hidden_states = self.self_attn_residual(
            hidden_states,
            lambda x: self.self_attn(x, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs)[0],
        )
        hidden_states = self.encoder_attn_residual(
            hidden_states,
            lambda x: self.encoder_attn(
                x,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )[0],
        )
        return self.feed_forward_residual(hidden_states, self.feed_forward)


# ---------------------------------------------------------------------------------------------------------------
# The shared base class: initialization and what transformers needs to know about the model
# ---------------------------------------------------------------------------------------------------------------


class VaswaniPreTrainedModel(PreTrainedModel):
    config: VaswaniConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniEncoderLayer", "VaswaniDecoderLayer"]
    _skip_keys_device_placement = [CACHE_FIELD]
    _supports_sdpa = True
    _supports_flash_attn = True
    _can_compile_fullgraph = True

    def _check_and_adjust_attn_implementation(self, attn_implementation, *args, **kwargs):
        # Flash attention takes no additive bias, so it cannot add the relative-position terms to the scores.
        if self.config.position_embedding_type == "relative" and attn_implementation is not None:
            if attn_implementation.startswith("flash_attention"):
                raise ValueError(
                    f"attn_implementation={attn_implementation!r} cannot add the learned relative-position bias to "
                    "the attention scores; use 'sdpa' or 'eager' with position_embedding_type='relative'."
                )
        return super()._check_and_adjust_attn_implementation(attn_implementation, *args, **kwargs)

    def post_init(self):
        """As in transformers, then the pipeline tasks the model's config declares are registered with
        `transformers.pipeline`, so that it serves them from this model object as from its folder
        (pipeline_tasks.py)."""
        super().post_init()
        register_pipeline_tasks(self.config)

    def _init_weights(self, module: nn.Module):
        """Xavier-uniform projections (as in tensor2tensor and fairseq), zero biases, and token embeddings drawn
        from N(0, d_model^-0.5), so that after the sqrt(d_model) scaling they have unit variance."""
        d_model = self.config.d_model
        if isinstance(module, nn.Linear):
            if module is getattr(self, "lm_head", None):
                # the output projection is the embedding matrix when tied; otherwise it is initialized like one
                if not self.config.tie_word_embeddings:
                    init.normal_(module.weight, mean=0.0, std=d_model**-0.5)
                return
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=d_model**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, VaswaniRelativePositionBias):
            # every offset starts neutral; the model learns which ones matter
            init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def get_position_embeddings(self) -> nn.Embedding | tuple[nn.Embedding, ...] | None:
        """The learned position tables (the encoder's, then the decoder's), or None: sinusoidal positions are
        computed for any position and relative ones are biases per offset, so neither has a table to return."""
        tables = tuple(
            module.embed_positions
            for module in self.modules()
            if isinstance(module, VaswaniEmbeddings) and module.embed_positions is not None
        )
        return (tables[0] if len(tables) == 1 else tables) if tables else None

    def resize_position_embeddings(self, new_num_position_embeddings: int) -> None:
        """Accept inputs of up to `new_num_position_embeddings` tokens (what transformers' example scripts call for a
        longer --max_source_length). Learned tables keep their trained rows and get new rows initialized like at the
        start (or lose rows from the end); sinusoidal and relative positions need no table, so only the limit moves.
        Adapted from the contract of transformers' Pegasus / BART `resize_position_embeddings`."""
        size = new_num_position_embeddings
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= MAX_SIZES["max_position_embeddings"]:
            raise ValueError(
                f"new_num_position_embeddings must be an integer from 1 to {MAX_SIZES['max_position_embeddings']:,}, "
                f"got {size!r}."
            )
        for module in self.modules():
            if isinstance(module, VaswaniEmbeddings) and module.embed_positions is not None:
                old = module.embed_positions
                table = nn.Embedding(size, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype)
                init.normal_(table.weight, mean=0.0, std=self.config.d_model**-0.5)
                kept = min(size, old.num_embeddings)
                with torch.no_grad():
                    table.weight[:kept] = old.weight[:kept]
                module.embed_positions = table
        self.config.max_position_embeddings = size

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """As in transformers, except that a local folder's files are checked first (`check_model_files`: a damaged
        or hostile file is named, pickled weights are refused) and a model too large for the memory it would load
        into is refused before anything is allocated (`check_fits_in_memory`)."""
        folder = Path(str(pretrained_model_name_or_path)) / (kwargs.get("subfolder") or "")
        if folder.is_dir():
            check_model_files(folder)
            config = kwargs.get("config")
            if not isinstance(config, VaswaniConfig):
                config = VaswaniConfig.from_pretrained(folder)
            dtype = kwargs.get("dtype") or kwargs.get("torch_dtype") or "auto"  # transformers' default: "auto"
            check_fits_in_memory(config, loading_dtype(dtype, config), loading_device(kwargs.get("device_map")))
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def _from_config(cls, config, **kwargs):
        """`from_config`, after checking that the weights fit in the memory they will be built in."""
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype", getattr(config, "dtype", None)))
        check_fits_in_memory(config, loading_dtype(dtype, config))
        return super()._from_config(config, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save as usual, and put beside the weights the code files a model needs to load, with
        `trust_remote_code=True`, where this package is not installed: the tokenizer and the pipelines."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            # the weights are written through a private temporary file (0600): give them the permissions of every
            # other file the user writes, so that a shared or served model folder is readable as a whole
            umask = current_umask()
            for weights_file in Path(save_directory).glob("*.safetensors"):
                weights_file.chmod(0o666 & ~umask)
            for source in code_files_to_ship(extra_folders=[Path(str(self.name_or_path))]):
                target = Path(save_directory) / source.name
                if source.resolve() != target.resolve():
                    shutil.copyfile(source, target)


# ---------------------------------------------------------------------------------------------------------------
# Embeddings and the two stacks
# ---------------------------------------------------------------------------------------------------------------


class VaswaniEmbeddings(nn.Module):
    """Token embedding times sqrt(d_model), plus the absolute positional encoding (section 3.4 and 3.5), then
    dropout. With relative positions there is no absolute term: position enters the attention scores instead."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = (
            nn.Embedding(config.max_position_embeddings, config.d_model)
            if config.position_embedding_type == "learned"
            else None
        )
        self.dropout = config.dropout

    def forward(self, input_ids=None, inputs_embeds=None, position_ids=None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        hidden_states = inputs_embeds * self.embed_scale
        if self.config.position_embedding_type == "sinusoidal":
            hidden_states = hidden_states + sinusoidal_positions(position_ids, self.config.d_model).to(
                hidden_states.dtype
            )
        elif self.config.position_embedding_type == "learned":
            hidden_states = hidden_states + self.embed_positions(position_ids)
        return F.dropout(hidden_states, p=self.dropout, training=self.training)


def check_length(length: int, config: VaswaniConfig, what: str) -> None:
    if length > config.max_position_embeddings:
        raise ValueError(
            f"The {what} is {length} tokens long, but this model accepts at most max_position_embeddings="
            f"{config.max_position_embeddings}. Truncate the input (tokenizer(..., truncation=True)) or generate "
            "fewer tokens."
        )


def check_target_length(past_length: int | torch.Tensor, length: int, cache: Cache | None,
                        config: VaswaniConfig) -> None:
    """The decoder's positions stay within max_position_embeddings. A static cache (what compiled decoding uses)
    counts its tokens on the device: it is checked by what it can hold, which bounds every position it gives and is
    known on the host, since reading the count would make each step wait for the device and is a branch on a
    tensor's value that a compiled graph cannot hold."""
    if not torch.is_tensor(past_length):
        check_length(past_length + length, config, "target (with what was generated so far)")
        return
    if isinstance(cache, EncoderDecoderCache):
        cache = cache.self_attention_cache
    # `get_max_length` since transformers 5.24, `get_max_cache_shape` before
    capacity = (cache.get_max_length() if hasattr(cache, "get_max_length") else cache.get_max_cache_shape())
    check_length(capacity, config, "longest target the static cache holds (generation's max_length)")


def may_skip_padding_mask(training: bool) -> bool:
    """Whether transformers may drop an attention mask that hides nothing (no padding), which lets SDPA take its
    flash kernel: not in training, where finding out reads the mask back from the GPU, a synchronization per
    forward pass that leaves the GPU idle, and where a batch nearly always holds padding anyway."""
    return not training


class VaswaniEncoder(VaswaniPreTrainedModel):
    """A stack of `encoder_layers` identical layers over the embedded source."""

    _can_record_outputs = {"hidden_states": VaswaniEncoderLayer, "attentions": VaswaniAttention}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.embeddings = VaswaniEmbeddings(config)
        self.layers = nn.ModuleList([VaswaniEncoderLayer(config, i) for i in range(config.encoder_layers)])
        # pre-LN leaves the residual stream un-normalized; one LayerNorm closes the stack
        self.layer_norm = nn.LayerNorm(config.d_model, config.layer_norm_eps) if _pre_norm(config) else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value):
        self.embeddings.embed_tokens = value

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` or `inputs_embeds` to the encoder.")
        check_token_ids(input_ids, "input_ids")
        batch, length = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
        check_length(length, self.config, "input")
        device = (input_ids if input_ids is not None else inputs_embeds).device
        position_ids = padding_aware_positions(attention_mask, batch, length, device)
        hidden_states = self.embeddings(input_ids, inputs_embeds, position_ids)

        # padding is hidden from every query; nothing else is (the encoder sees the whole source)
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask,
            allow_is_bidirectional_skip=may_skip_padding_mask(self.training),
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniPreTrainedModel):
    """A stack of `decoder_layers` identical layers over the embedded (shifted) target, attending to the encoder."""

    _can_record_outputs = {
        "hidden_states": VaswaniDecoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.embeddings = VaswaniEmbeddings(config)
        self.layers = nn.ModuleList([VaswaniDecoderLayer(config, i) for i in range(config.decoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model, config.layer_norm_eps) if _pre_norm(config) else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value):
        self.embeddings.embed_tokens = value

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` or `decoder_inputs_embeds` to the decoder.")
        # transformers 5.24 renamed `past_key_values` to `cache` (generate passes it under that name, down to here
        # through the models' **kwargs); take either, so that decoding keeps its history on both sides of the rename
        if cache is not None:
            if past_key_values is not None and past_key_values is not cache:
                raise ValueError("Pass the decoder's cache once, as `past_key_values` or as `cache`, not both.")
            past_key_values = cache
        check_token_ids(input_ids, "decoder_input_ids")
        reference = input_ids if input_ids is not None else inputs_embeds
        batch, length = reference.shape[:2]

        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if torch.is_tensor(past_length):
            past_length = past_length.clone()  # a static cache's own counter, which its first update moves on
        check_target_length(past_length, length, past_key_values, self.config)
        position_ids = (torch.arange(length, device=reference.device) + past_length).expand(batch, length)
        hidden_states = self.embeddings(input_ids, inputs_embeds, position_ids)

        # the mask of section 3.2.3: position i attends to positions <= i (and to no padding)
        self_attention_cache = (
            past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache) else None
        )
        # the cache goes by position: its keyword is `past_key_values` before transformers 5.24 and `cache` after
        causal_mask = create_causal_mask(self.config, hidden_states, attention_mask, self_attention_cache)
        # cross-attention: every target position may see every (non-padding) source position
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            allow_is_bidirectional_skip=may_skip_padding_mask(self.training),
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=cross_mask,
                past_key_values=past_key_values,
                query_offset=past_length,  # for relative positions: a static cache holds keys beyond the queries
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values if use_cache else None}
        )


def _pre_norm(config: VaswaniConfig) -> bool:
    return config.layer_norm_position == "pre"


# ---------------------------------------------------------------------------------------------------------------
# The encoder-decoder (section 3, Figure 1)
# ---------------------------------------------------------------------------------------------------------------


class VaswaniModel(VaswaniPreTrainedModel):
    """The bare encoder-decoder: source -> encoder -> z; shifted target + z -> decoder -> hidden states.

    One embedding matrix (`shared`) serves the encoder and the decoder, as in the paper (section 3.4).
    """

    _tied_weights_keys = {
        "encoder.embeddings.embed_tokens.weight": "shared.weight",
        "decoder.embeddings.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = VaswaniEncoder(config)
        self.decoder = VaswaniDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embeddings.embed_tokens = value
        self.decoder.embeddings.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        r"""
        decoder_input_ids: the target shifted right. When neither these nor `decoder_inputs_embeds` are given, the
            source itself is shifted right and used (what the sequence-classification head does).
        """
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise ValueError("Pass `decoder_input_ids` (or `labels` to a task head), or `input_ids` to shift.")
            check_token_ids(input_ids, "input_ids")
            decoder_input_ids = shift_tokens_right(
                input_ids, self.config.pad_token_id, self.config.decoder_start_token_id
            )

        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )

        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------------------
# Task heads
# ---------------------------------------------------------------------------------------------------------------


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, GenerationMixin):
    """The encoder-decoder with the final linear layer and softmax (section 3.4): translation, summarization.

    The output projection is the shared embedding matrix. Given `labels` (the target, -100 where ignored), the
    decoder input is the labels shifted right and the loss is the mean token cross-entropy, with
    `config.label_smoothing`.
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.model = VaswaniModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels: target token ids of shape (batch, target_length); -100 marks positions left out of the loss.
        """
        if labels is not None:
            check_token_ids(labels, "labels")
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        # (one float32 sum: a single nan or inf makes it non-finite, at a fortieth of the cost of isfinite().all())
        if not self.training and not torch.compiler.is_compiling() and not logits.sum(dtype=torch.float32).isfinite():
            # the outputs of a model with a nan or inf inside are empty or garbage: say so, once
            logger.warning_once(NON_FINITE_LOGITS)

        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(),
                labels.to(logits.device).reshape(-1),
                ignore_index=-100,
                label_smoothing=self.config.label_smoothing,
            )

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def generate(self, *args, streamer=None, cpu_decoding: bool | None = None, **kwargs):
        """`GenerationMixin.generate`, with two differences.

        On a CPU, greedy and beam search run through this project's decoder (`cpu_decoding.py`, carried by every
        saved model): the tokens of transformers' loop, two to four times faster at the shipped models' size. Any call
        it does not cover (sampling, a streamer, scores or attentions in the output, other logits processors, a model
        in training mode or not in float32) runs transformers' loop, as every call on a GPU does; so does a model the
        decoder would not reproduce exactly (a hook, a `forward` set on it or on a module, a module of another class:
        `cpu_decoding.unreproduced`), said once at info level.
        `cpu_decoding=False`, or `model.generation_config.cpu_decoding = False`, keeps transformers' loop for all.

        With a `streamer` and no beam count given, decoding is greedy. Models decode by default as they were
        scored (beam search, `num_beams` in their generation config, as Marian's translation models do), but a
        streamer shows one hypothesis as it grows, which beam search does not have: transformers would refuse the
        call. Greedy is what such a call means; pass `num_beams` to choose."""
        config = kwargs.get("generation_config") or self.generation_config
        if streamer is not None and "num_beams" not in kwargs and (config.num_beams or 1) > 1:
            kwargs["num_beams"] = 1
            kwargs.setdefault("length_penalty", 1.0)  # (a beam setting: unused and warned about with greedy)
        self._check_generation_request(args, kwargs, config)
        if cpu_decoding is None:
            cpu_decoding = getattr(config, "cpu_decoding", True)
        if not isinstance(cpu_decoding, bool):
            raise ValueError(f"cpu_decoding must be True or False, got {cpu_decoding!r}.")
        if cpu_decoding and kwargs.get("custom_generate") is None and self.device.type == "cpu":
            return self._cpu_decoding()(*args, streamer=streamer, **kwargs)
        return super().generate(*args, streamer=streamer, **kwargs)

    def _check_generation_request(self, args: tuple, kwargs: dict, config) -> None:
        """Refuse, before decoding starts, a call that asks for more new tokens than the model has positions (a
        generation config's `max_new_tokens: 1000000000` decoded up to the position limit and failed there) or for
        more sequences at once than the memory left can hold (`loading_checks.check_generation_fits`: a batch x
        num_beams). Values of the wrong type are left to transformers, which names them."""

        def setting(name: str):
            given = kwargs.get(name)
            if given is not None:
                return given, ""
            return getattr(config, name, None), " (the model's generation config)"

        def count(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value > 0

        positions = self.config.max_position_embeddings
        new_tokens, where = setting("max_new_tokens")
        if count(new_tokens) and new_tokens > positions - 1:
            raise ValueError(
                f"max_new_tokens={new_tokens}{where} is more than this model can generate: max_position_embeddings="
                f"{positions} leaves room for at most {positions - 1} new tokens after the start token."
            )
        max_length = kwargs.get("max_length")
        if new_tokens is None and count(max_length) and max_length > positions:
            raise ValueError(f"max_length={max_length} is more than this model accepts (max_position_embeddings="
                             f"{positions}).")
        target = new_tokens + 1 if count(new_tokens) else positions
        inputs = kwargs.get("inputs", kwargs.get("input_ids", args[0] if args else None))
        beams, returned = setting("num_beams")[0], setting("num_return_sequences")[0]
        if not (torch.is_tensor(inputs) and inputs.dim() == 2 and count(beams or 1) and count(returned or 1)):
            return
        per_input = max(beams or 1, returned or 1)
        what = f"a batch of {inputs.shape[0]:,} input(s) x num_beams {beams or 1}"
        if (returned or 1) > (beams or 1):
            what = f"a batch of {inputs.shape[0]:,} input(s) x num_return_sequences {returned}"
        check_generation_fits(self.config, inputs.shape[0] * per_input, inputs.shape[1], min(target, positions), what,
                              dtype=self.dtype, device=self.device)

    def _cpu_decoding(self):
        """The model's CPU decoder (`cpu_decoding.CpuDecoding`, made at the first call): it holds the weights laid out
        for it and each thread's buffers, and hands every call to `GenerationMixin.generate`."""
        from .cpu_decoding import CpuDecoding

        cpu_decoding = self.__dict__.get("_cpu_decoding_state")
        if cpu_decoding is None:
            cpu_decoding = self.__dict__["_cpu_decoding_state"] = CpuDecoding(self, GenerationMixin.generate)
        return cpu_decoding

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search keeps, at every step, the best continuations of each input and gathers their caches with
        `beam_idx`. Only the self-attention keys/values need that: a beam is always drawn from the beams of the same
        input, whose cross-attention keys/values are identical (one encoder output, repeated once per beam), so
        gathering those would copy every layer's encoder keys/values at every step for nothing."""
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    def prepare_inputs_for_generation(self, *args, **kwargs) -> dict:
        """transformers' inputs of a decoding step, with the sizes that change from one `generate` call to the next
        marked dynamic for torch.compile (`mark_decoding_sizes_dynamic`)."""
        inputs = super().prepare_inputs_for_generation(*args, **kwargs)
        mark_decoding_sizes_dynamic(inputs)
        return inputs

    # generate checks the arguments it is given against these parameters: they stay transformers' own
    prepare_inputs_for_generation.__signature__ = inspect.signature(GenerationMixin.prepare_inputs_for_generation)


def mark_decoding_sizes_dynamic(inputs: dict) -> None:
    """Mark as dynamic, for torch.compile, the sizes of a decoding step's inputs that change between `generate` calls
    and steps: the rows (batch x beams), the source length and the target length so far.

    A forward compiled the usual way (`model.forward = torch.compile(model.forward)`) is otherwise compiled for the
    sizes of its first call, then again for each size that changes, for each kind of step (the first, the second, the
    later ones) separately: three batch sizes can reach dynamo's recompile limit (8), after which the forward runs
    uncompiled. Marked, each kind of step compiles once for any batch and length (and once more for a single row:
    dynamo always specializes a size of 1). Only torch.compile reads these marks. A static cache is left alone:
    transformers compiles it at fixed sizes."""
    cache = inputs.get("cache", inputs.get("past_key_values"))
    if getattr(cache, "is_compileable", False):
        return
    for name in ("decoder_input_ids", "attention_mask", "decoder_attention_mask"):  # (rows, length)
        if torch.is_tensor(inputs.get(name)) and inputs[name].dim() == 2:
            torch._dynamo.maybe_mark_dynamic(inputs[name], (0, 1))
    encoder_outputs = inputs.get("encoder_outputs")
    if encoder_outputs is not None and torch.is_tensor(encoder_outputs[0]):  # (rows, source length, d_model)
        torch._dynamo.maybe_mark_dynamic(encoder_outputs[0], (0, 1))
    if isinstance(cache, EncoderDecoderCache):  # keys and values: (rows, heads, length, head size)
        for layer in (*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers):
            for states in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if torch.is_tensor(states) and states.dim() == 4:
                    torch._dynamo.maybe_mark_dynamic(states, (0, 2))


# Copied from transformers.models.bart.modeling_bart.BartClassificationHead (its pooler_dropout is
# config.classifier_dropout here).
class VaswaniClassificationHead(nn.Module):
    """dropout -> dense -> tanh -> dropout -> projection to the labels."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.d_model, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = torch.tanh(self.dense(self.dropout(hidden_states)))
        return self.out_proj(self.dropout(hidden_states))


def classification_loss(config: VaswaniConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' problem types: regression (MSE), single-label (cross-entropy), multi-label (BCE)."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float().reshape(logits.shape[0]))
    if config.problem_type == "single_label_classification":
        labels = labels.reshape(-1)
        valid = labels[labels != -100]
        if valid.numel() and (valid.min() < 0 or valid.max() >= config.num_labels):
            raise ValueError(
                f"labels must lie in [0, {config.num_labels - 1}] (num_labels={config.num_labels}, id2label="
                f"{config.id2label}); got values {sorted(set(valid.tolist()))}."
            )
        return F.cross_entropy(logits.reshape(-1, config.num_labels).float(), labels, ignore_index=-100)
    return F.binary_cross_entropy_with_logits(logits.float(), labels.to(logits.dtype).float())


def last_token_index(input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, pad_id) -> torch.Tensor:
    """Index of the last real token of each sequence (the end-of-sequence token, when the tokenizer adds one)."""
    if attention_mask is None:
        if input_ids is None or pad_id is None:
            raise ValueError("Pass `attention_mask` (or `input_ids` with a pad token) to find each sequence's end.")
        attention_mask = input_ids.ne(pad_id)
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    return (attention_mask.long() * (positions + 1)).argmax(-1)


# Follows transformers.models.bart.modeling_bart.BartForSequenceClassification: the decoder's state at the last
# token feeds the head; classification_loss picks the loss by config.problem_type as BART does.
class VaswaniForSequenceClassification(VaswaniPreTrainedModel):
    """Sentence classification and regression with the whole encoder-decoder, as BART does it: the encoder reads the
    text, the decoder reads it again (shifted), and the decoder's state at the last token feeds a small head.

    With `is_encoder_decoder=False` in the config, the encoder alone, as BERT does it (half the weights): the
    encoder's state at the last token (the end-of-sequence token, which sees the whole text) feeds the head. The
    encoder of a seq2seq model loads into it (`from_pretrained(path, is_encoder_decoder=False)`)."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        config.custom_pipelines = {}  # a classifier serves transformers' own text-classification pipeline only
        self.model = VaswaniModel(config) if config.is_encoder_decoder else VaswaniEncoderModel(config)
        self.classification_head = VaswaniClassificationHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqSequenceClassifierOutput | SequenceClassifierOutput:
        r"""
        labels: class indices (single-label), multi-hot floats (multi-label) or floats (regression).
        """
        if not self.config.is_encoder_decoder:
            decoder_inputs = {"decoder_input_ids": decoder_input_ids, "decoder_attention_mask": decoder_attention_mask,
                              "decoder_inputs_embeds": decoder_inputs_embeds, "encoder_outputs": encoder_outputs}
            return self._encoder_forward(input_ids, attention_mask, inputs_embeds, labels, decoder_inputs, **kwargs)
        if input_ids is None and inputs_embeds is not None and decoder_inputs_embeds is None:
            raise ValueError("With `inputs_embeds`, also pass `decoder_inputs_embeds` (there are no ids to shift).")
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=False,
            **kwargs,
        )
        logits, loss = self._classify(outputs.last_hidden_state, input_ids, attention_mask, labels)
        return Seq2SeqSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def _encoder_forward(self, input_ids, attention_mask, inputs_embeds, labels, decoder_inputs: dict, **kwargs):
        """The encoder-only classifier (`is_encoder_decoder=False`): the encoder's state at the last token."""
        given = [name for name, value in decoder_inputs.items() if value is not None]
        if given:
            raise ValueError(
                f"This classifier is encoder-only (config.is_encoder_decoder=False): it takes no {', '.join(given)}."
            )
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits, loss = self._classify(outputs.last_hidden_state, input_ids, attention_mask, labels)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )

    def _classify(self, hidden_states, input_ids, attention_mask, labels) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The head on each sequence's state at its last real token; the loss where labels are given."""
        last = last_token_index(input_ids, attention_mask, self.config.pad_token_id).to(hidden_states.device)
        sentence = hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]
        logits = self.classification_head(sentence)
        loss = classification_loss(self.config, logits, labels.to(logits.device)) if labels is not None else None
        return logits, loss


class VaswaniEncoderModel(VaswaniPreTrainedModel):
    """The shared embedding and the encoder alone, named as in `VaswaniModel` so that the encoder weights of any
    model of this project load into it (a seq2seq model's decoder is simply not used)."""

    _tied_weights_keys = {"encoder.embeddings.embed_tokens.weight": "shared.weight"}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = VaswaniEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embeddings.embed_tokens = value

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> BaseModelOutput:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)


class VaswaniForTokenClassification(VaswaniPreTrainedModel):
    """Per-token labels (named-entity recognition) from the encoder's output: the whole source is visible to every
    position, which is what tagging needs; the decoder has no part in it."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        # a tagger serves transformers' token-classification pipeline only, told where the tokenizer's words start
        config.custom_pipelines = {"token-classification": {
            "impl": "pipeline_vaswani.TokenClassificationPipeline", "pt": ["AutoModelForTokenClassification"],
            "type": "text",
        }}
        self.model = VaswaniEncoderModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""
        labels: one label index per token, -100 for tokens left out of the loss (padding, later sub-words).
        """
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            check_token_ids(labels, "labels")
            labels = labels.to(logits.device).reshape(-1)
            valid = labels[labels != -100]
            if valid.numel() and (valid.min() < 0 or valid.max() >= self.config.num_labels):
                raise ValueError(
                    f"labels must lie in [0, {self.config.num_labels - 1}] or be -100 (num_labels="
                    f"{self.config.num_labels}); got values {sorted(set(valid.tolist()))}."
                )
            loss = F.cross_entropy(logits.reshape(-1, self.config.num_labels).float(), labels, ignore_index=-100)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# ---------------------------------------------------------------------------------------------------------------
# Model files: on saving, the weights' permissions and the code files carried
# ---------------------------------------------------------------------------------------------------------------


# The carried files a model's code may not import, so that transformers' module cache (which holds the files the model
# file imports, directly or not) may lack them: the tokenizer's, and in the code of older models the pipelines'.
NOT_IMPORTED_FILES = ("tokenization_vaswani.py", "pipeline_vaswani.py", "vocabulary.py")


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (setting it to read it is a race)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def code_files_to_ship(extra_folders: list[Path] = ()) -> list[Path]:
    """The code files a model carries: every Python file of the folder this file is in but `__init__.py` (the
    package's `vaswani/remote_code/`, which holds them all and nothing else; or transformers' module cache of a
    model's code), and where that folder lacks one of `NOT_IMPORTED_FILES`, the file of that name in
    `extra_folders` (the folder a model was loaded from). The folder's own files come first: a model re-saved
    from an older folder carries the code that runs, not that folder's."""
    here = Path(__file__).resolve().parent
    found = {path.name: path for path in sorted(here.glob("*.py")) if path.name != "__init__.py"}
    for folder in extra_folders:
        for name in NOT_IMPORTED_FILES:
            if name not in found and (Path(folder) / name).is_file():
                found[name] = Path(folder) / name
    return list(found.values())


__all__ = [
    "CACHE_FIELD",
    "VaswaniAttention",
    "VaswaniEncoderModel",
    "VaswaniFeedForward",
    "VaswaniForConditionalGeneration",
    "VaswaniForSequenceClassification",
    "VaswaniForTokenClassification",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "NOT_IMPORTED_FILES",
    "code_files_to_ship",
    "eager_attention_forward",
    "padding_aware_positions",
    "repeated_rows",
    "shift_tokens_right",
    "sinusoidal_positions",
]
