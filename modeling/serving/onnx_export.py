"""Export a translation or summarization model of this project to ONNX (decoded with onnxruntime by
`vaswani.serving.onnx_generation`).

    from vaswani.serving.onnx_export import export_to_onnx
    export_to_onnx("results/multi30k_en_de/model", "onnx/multi30k_en_de")

The folder then holds two graphs, the tokenizer, the model config and the generation config:

encoder.onnx runs once per input. It also computes the keys and values that every decoder layer's cross-attention
(encoder-decoder attention) takes from the encoder output: they depend on that output alone, so the decoder should not
recompute them at every step (what `generate` does too: it keeps them in its cache).

    inputs   input_ids                     int64    (batch, encoder_sequence)
             attention_mask                int64    (batch, encoder_sequence)   1 for tokens, 0 for padding
    outputs  last_hidden_state             float32  (batch, encoder_sequence, d_model)
             present.{i}.encoder.key       float32  (batch, heads, encoder_sequence, head_dim)   i = decoder layer
             present.{i}.encoder.value     float32  (batch, heads, encoder_sequence, head_dim)

decoder.onnx runs once per generated token (or once for several tokens). It reads the new decoder tokens and the
cache of the earlier steps, and returns the logits of the new tokens and the cache grown by them:

    inputs   input_ids                     int64    (batch, decoder_sequence)   the new token(s) only
             encoder_attention_mask        int64    (batch, encoder_sequence)   the encoder's attention_mask
             past_key_values.{i}.decoder.key    float32  (batch, heads, past_sequence, head_dim)   self-attention
             past_key_values.{i}.decoder.value  float32  (batch, heads, past_sequence, head_dim)
             past_key_values.{i}.encoder.key    float32  (batch, heads, encoder_sequence, head_dim)  from encoder.onnx
             past_key_values.{i}.encoder.value  float32  (batch, heads, encoder_sequence, head_dim)
    outputs  logits                        float32  (batch, decoder_sequence, vocab)
             present.{i}.decoder.key       float32  (batch, heads, past_sequence + decoder_sequence, head_dim)
             present.{i}.decoder.value     float32  (batch, heads, past_sequence + decoder_sequence, head_dim)

The first step passes a past of length 0 (arrays of shape (batch, heads, 0, head_dim)): one graph serves every step.
The new tokens take positions past_sequence, past_sequence + 1, ...: their absolute positions (sinusoidal, learned)
and their relative-position biases are computed in the graph from the lengths, and each new token attends to the
past and to the new tokens up to itself (the causal mask). The decoder reads no padding of its own (no
decoder_attention_mask), as in `generate`. Batch and every sequence axis are dynamic.

The graphs are traced from the folder's own modules (embeddings, projections, relative-position tables, residual
blocks, feed-forward networks, LayerNorms, `eager_attention_forward`) by small wrappers, `EncoderForOnnx` and
`DecoderWithCacheForOnnx`, whose inputs and outputs are plain tensors: no transformers cache object crosses the graph
boundary. The decoder wrapper spells out one cached step (concatenate the new keys and values to the past ones, build
the causal and padding masks), which the model itself does through transformers' cache and mask helpers. The export
uses the dynamo exporter (`torch.onnx.export(..., dynamo=True)`, opset 20) with eager attention: traced through
PyTorch's scaled_dot_product_attention with the relative-position bias as its mask, the exporter's decomposition
fails ("Cannot view a tensor with shape [batch, sequence, heads, head_dim] ... as (batch, sequence, d_model)"), while
the eager path computes the same function and exports for every position type. Then each graph is run with onnxruntime on inputs of other shapes than the traced ones (a past of length 0 included) and compared with
PyTorch, and an export that fails or disagrees is reported with the name of the graph.

What is refused, by name: a folder that is not a sequence-to-sequence model of this project (a classifier,
another model type), a non-empty output folder without `overwrite_output_dir`.

onnx, onnxruntime and onnxscript (the exporter's writer) are optional dependencies:
`pip install 'vaswani-transformer[onnx]'`.
"""

import importlib
import logging
import re
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .exporting import claim_output_dir, load_seq2seq_model


INSTALL_HINT = "pip install 'vaswani-transformer[onnx]'"
ONNX_OPSET = 20
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder.onnx"
# the largest difference between onnxruntime's and PyTorch's outputs that the export check accepts
EXPORT_CHECK_ATOL = 1e-4


class OnnxExportError(RuntimeError):
    """A graph could not be exported, or its ONNX version does not compute what the PyTorch model computes; the
    message names the graph (encoder, decoder with cache) and what went wrong."""


def import_onnx_runtime(export: bool = False):
    """onnxruntime, after checking that onnx (and, to export, onnxscript) can be imported too; or an error saying how
    to install them."""
    for name in ("onnx", "onnxruntime", *(("onnxscript",) if export else ())):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ImportError(
                f"ONNX export and decoding need the onnx, onnxruntime and onnxscript packages; {name} cannot be "
                f"imported ({error}). Install them with: {INSTALL_HINT}"
            ) from None
    return importlib.import_module("onnxruntime")


# ---------------------------------------------------------------------------------------------------------------
# The graphs: plain-tensor wrappers around the model's modules
# ---------------------------------------------------------------------------------------------------------------


def _attend(attention: nn.Module, hidden_states, key, value, mask) -> torch.Tensor:
    """One multi-head attention of the model (`VaswaniAttention`), given its keys and values already split into heads:
    the query projection, the relative-position bias when the layer has one, eager attention, the output projection."""
    from ..remote_code.modeling_vaswani import eager_attention_forward

    query = attention._split_heads(attention.q_proj(hidden_states))
    position_bias = None
    if attention.relative_position_bias is not None:
        position_bias = attention.relative_position_bias(query.shape[2], key.shape[2], query.device).to(query.dtype)
    output, _ = eager_attention_forward(
        attention, query, key, value, mask, scaling=attention.scaling, position_bias=position_bias
    )
    return attention.out_proj(output.reshape(*hidden_states.shape[:-1], -1))


class EncoderForOnnx(nn.Module):
    """input_ids, attention_mask -> last_hidden_state, then each decoder layer's cross-attention key and value."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()
        self.cross_attentions = nn.ModuleList(layer.encoder_attn for layer in model.get_decoder().layers)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        outputs = [hidden_states]
        for attention in self.cross_attentions:
            outputs.append(attention._split_heads(attention.k_proj(hidden_states)))
            outputs.append(attention._split_heads(attention.v_proj(hidden_states)))
        return tuple(outputs)


class DecoderWithCacheForOnnx(nn.Module):
    """One decoding step: the new token(s), the encoder's attention mask and the cache -> logits and the grown cache.

    `past_key_values` is flat: for each layer, its self-attention key and value (the earlier steps), then its
    cross-attention key and value (from `EncoderForOnnx`). The outputs are the logits and, for each layer, the
    self-attention key and value with the new steps appended.
    """

    def __init__(self, model):
        super().__init__()
        self.decoder = model.get_decoder()
        self.lm_head = model.lm_head

    def forward(
        self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, past_key_values: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...]:
        batch, length = input_ids.shape
        past_length = past_key_values[0].shape[2]
        positions = torch.arange(length, device=input_ids.device) + past_length
        hidden_states = self.decoder.embeddings(input_ids, None, positions.expand(batch, length))

        # additive masks, as the model's eager attention takes them: 0 where a query may attend, the float minimum
        # where it may not (a later position of the target; padding of the source)
        blocked = torch.finfo(hidden_states.dtype).min
        key_positions = torch.arange(past_length + length, device=input_ids.device)
        causal_mask = torch.where(key_positions[None, :] > positions[:, None], blocked, 0.0)[None, None]
        cross_mask = torch.where(encoder_attention_mask[:, None, None, :].bool(), 0.0, blocked)

        presents = []
        for index, layer in enumerate(self.decoder.layers):
            past_key, past_value, cross_key, cross_value = past_key_values[4 * index : 4 * index + 4]

            def self_attention(states, attention=layer.self_attn, past_key=past_key, past_value=past_value):
                key = torch.cat([past_key, attention._split_heads(attention.k_proj(states))], dim=2)
                value = torch.cat([past_value, attention._split_heads(attention.v_proj(states))], dim=2)
                presents.extend((key, value))
                return _attend(attention, states, key, value, causal_mask)

            def cross_attention(states, attention=layer.encoder_attn, key=cross_key, value=cross_value):
                return _attend(attention, states, key, value, cross_mask)

            hidden_states = layer.self_attn_residual(hidden_states, self_attention)
            hidden_states = layer.encoder_attn_residual(hidden_states, cross_attention)
            hidden_states = layer.feed_forward_residual(hidden_states, layer.feed_forward)
        if self.decoder.layer_norm is not None:
            hidden_states = self.decoder.layer_norm(hidden_states)
        return (self.lm_head(hidden_states), *presents)


def _encoder_output_names(decoder_layers: int) -> list[str]:
    names = ["last_hidden_state"]
    for index in range(decoder_layers):
        names += [f"present.{index}.encoder.key", f"present.{index}.encoder.value"]
    return names


def _decoder_input_names(decoder_layers: int) -> list[str]:
    names = ["input_ids", "encoder_attention_mask"]
    for index in range(decoder_layers):
        for part in ("decoder", "encoder"):
            names += [f"past_key_values.{index}.{part}.key", f"past_key_values.{index}.{part}.value"]
    return names


def _decoder_output_names(decoder_layers: int) -> list[str]:
    names = ["logits"]
    for index in range(decoder_layers):
        names += [f"present.{index}.decoder.key", f"present.{index}.decoder.value"]
    return names


# ---------------------------------------------------------------------------------------------------------------
# The whole export
# ---------------------------------------------------------------------------------------------------------------


def export_to_onnx(model_dir: str | Path, output_dir: str | Path, overwrite_output_dir: bool = False) -> Path:
    """Export the model in `model_dir` (a `VaswaniForConditionalGeneration` saved with its tokenizer) to
    `output_dir`: `encoder.onnx`, `decoder.onnx` (see the module docstring), the tokenizer, `config.json` and
    `generation_config.json`. Each graph is checked against PyTorch with onnxruntime before anything is written.
    Returns the output folder."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    with claim_output_dir(output_dir, model_dir, overwrite_output_dir) as output:
        import_onnx_runtime(export=True)
        # eager attention: the sdpa path, traced with a relative-position bias, decomposes into a reshape that the
        # exporter cannot express (it fails with "Cannot view a tensor with shape ..."); eager computes the same
        # function
        model, tokenizer = load_seq2seq_model(model_dir, "the ONNX export", attn_implementation="eager")

        with torch.no_grad():
            encoder = EncoderForOnnx(model).eval()
            decoder = DecoderWithCacheForOnnx(model).eval()
            encoder_program = _export_graph("encoder", encoder, *_encoder_export_arguments(model))
            decoder_program = _export_graph("decoder with cache", decoder, *_decoder_export_arguments(model))
            _check_graph("encoder", encoder, encoder_program, _encoder_check_inputs(model))
            _check_graph("decoder with cache", decoder, decoder_program, _decoder_check_inputs(model))

        with output.publish() as folder:
            encoder_program.save(str(folder / ENCODER_FILE))
            decoder_program.save(str(folder / DECODER_FILE))
            tokenizer.save_pretrained(folder)
            model.config.save_pretrained(folder)
            model.generation_config.save_pretrained(folder)
    return output_dir


# ---------------------------------------------------------------------------------------------------------------
# Tracing and checking
# ---------------------------------------------------------------------------------------------------------------


def _example_ids(model, batch: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=generator)


def _example_mask(batch: int, length: int) -> torch.Tensor:
    """Ones, with padding at the end of every row after the first (the rows differ, so masking matters)."""
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):
        mask[row, length - row :] = 0
    return mask


def _example_cache(model, batch: int, past_length: int, encoder_length: int, seed: int) -> tuple[torch.Tensor, ...]:
    config = model.config
    heads, head_dim = config.decoder_attention_heads, config.d_model // config.decoder_attention_heads
    generator = torch.Generator().manual_seed(seed)
    cache = []
    for _ in range(config.decoder_layers):
        for length in (past_length, past_length, encoder_length, encoder_length):
            cache.append(torch.randn(batch, heads, length, head_dim, generator=generator))
    return tuple(cache)


def _encoder_export_arguments(model):
    """The traced inputs, input names, output names and dynamic axes of the encoder graph."""
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("encoder_sequence")
    inputs = (_example_ids(model, 2, 7, seed=0), _example_mask(2, 7))
    dynamic_shapes = {"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}}
    names = (["input_ids", "attention_mask"], _encoder_output_names(model.config.decoder_layers))
    return inputs, *names, dynamic_shapes


def _decoder_export_arguments(model):
    """The traced inputs, names and dynamic axes of the decoder graph: 2 new tokens after 3 past ones, 2 inputs of 5
    source tokens (no length is 0 or 1, which torch.export would take for a constant)."""
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("decoder_sequence")
    past, source = torch.export.Dim("past_sequence"), torch.export.Dim("encoder_sequence")
    inputs = (_example_ids(model, 2, 2, seed=1), _example_mask(2, 5), _example_cache(model, 2, 3, 5, seed=2))
    cache_axes = [{0: batch, 2: past}, {0: batch, 2: past}, {0: batch, 2: source}, {0: batch, 2: source}]
    dynamic_shapes = {
        "input_ids": {0: batch, 1: sequence},
        "encoder_attention_mask": {0: batch, 1: source},
        "past_key_values": tuple(cache_axes * model.config.decoder_layers),
    }
    names = (_decoder_input_names(model.config.decoder_layers), _decoder_output_names(model.config.decoder_layers))
    return inputs, *names, dynamic_shapes


def _encoder_check_inputs(model) -> list[tuple]:
    return [
        (_example_ids(model, 3, 4, seed=3), _example_mask(3, 4)),
        (_example_ids(model, 1, 1, seed=4), _example_mask(1, 1)),
    ]


def _decoder_check_inputs(model) -> list[tuple]:
    """The first step (past of length 0, one token), a later one, and several tokens at once."""
    return [
        (_example_ids(model, 3, 1, seed=5), _example_mask(3, 4), _example_cache(model, 3, 0, 4, seed=6)),
        (_example_ids(model, 1, 1, seed=7), _example_mask(1, 6), _example_cache(model, 1, 9, 6, seed=8)),
        (_example_ids(model, 2, 4, seed=9), _example_mask(2, 3), _example_cache(model, 2, 5, 3, seed=10)),
    ]


def _export_graph(what: str, module: nn.Module, inputs, input_names, output_names, dynamic_shapes):
    """`torch.onnx.export(dynamo=True)` of one wrapper; a failure is raised again with the name of the graph."""
    # the exporter warns about every torchvision operator it cannot register when torchvision is absent, about its
    # own deprecations, and that axes with equal constraints share one name: noise here
    registration_log = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration_log.level
    registration_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            warnings.filterwarnings("ignore", message=".*The axis name: .* will not be used.*", category=UserWarning)
            return torch.onnx.export(
                module,
                inputs,
                dynamo=True,
                opset_version=ONNX_OPSET,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=dynamic_shapes,
                verbose=False,
            )
    except Exception as error:
        raise OnnxExportError(
            f"The {what} graph could not be exported to ONNX (torch.onnx.export with dynamo=True, opset "
            f"{ONNX_OPSET}): {_exception_summary(error)}"
        ) from error
    finally:
        registration_log.setLevel(level)


def _exception_summary(error: Exception) -> str:
    """The exporter's own error: the lines under its "## Exception summary" heading (its other lines are advice on
    filing an issue), without terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.split("## Exception summary", 1)[-1].splitlines() if line.strip()]
    return " ".join(lines[:3])[:1500] or type(error).__name__


def _check_graph(what: str, module: nn.Module, program, check_inputs: list[tuple]) -> None:
    """Run the exported graph with onnxruntime on inputs of other shapes than the traced ones, and compare every
    output with PyTorch's."""
    onnxruntime = import_onnx_runtime()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [graph_input.name for graph_input in session.get_inputs()]
    for inputs in check_inputs:
        flat = [inputs[0], inputs[1], *(inputs[2] if len(inputs) > 2 else ())]
        expected = module(*inputs)
        try:
            got = session.run(None, {name: tensor.numpy() for name, tensor in zip(names, flat)})
        except Exception as error:
            raise OnnxExportError(
                f"The exported {what} graph fails in onnxruntime on inputs of shapes "
                f"{[tuple(tensor.shape) for tensor in flat]}: {error}"
            ) from error
        for name, want, have in zip(session.get_outputs(), expected, got):
            difference = float(np.abs(want.numpy() - have).max()) if have.size else 0.0
            if have.shape != tuple(want.shape) or difference > EXPORT_CHECK_ATOL:
                raise OnnxExportError(
                    f"The exported {what} graph disagrees with PyTorch on its output {name.name} (shapes "
                    f"{have.shape} vs {tuple(want.shape)}, largest difference {difference:.3g}) for inputs of shapes "
                    f"{[tuple(tensor.shape) for tensor in flat]}."
                )


__all__ = ["DECODER_FILE", "ENCODER_FILE", "OnnxExportError", "export_to_onnx", "import_onnx_runtime"]
