"""Faster inference on CPUs from the same weights, set up explicitly: oneDNN's fp32 matrix products, or int8 Linear
layers. (Decoding itself needs no set-up: on a CPU `generate` runs the model's own decoder,
`vaswani.remote_code.cpu_decoding`.)

On a CPU, `generate` spends about 70% of its time in the Linear layers' matrix products (the rest in attention,
the cache and Python). PyTorch's CPU wheel runs fp32 matrix products through MKL, which on AMD CPUs takes a slow
generic path: on an AVX-512 EPYC, one core, a (32 x 512) x (512 x 2048) product took 707 us through MKL and 373 us
through oneDNN, the library CTranslate2 also picks on AMD CPUs. Two ways to serve a model faster, both for inference
only (no gradients, nothing to save), each an object that holds the model it runs (`CpuInference`), or for callers
that take a model, that model (`for_cpu_inference`):

    from vaswani.serving.cpu_inference import CpuInference, for_cpu_inference

    inference = CpuInference(model)                        # fp32, every Linear through oneDNN (in place)
    inference.generate(**batch)                            # the model's generate; inference.model is the model
    int8 = CpuInference(model, quantization="int8")        # a copy with int8 Linear layers (int8.model)
    model = for_cpu_inference(model)                       # the same set-up, giving the model itself

`"fp32"` changes only how the products are summed: logits agree with the plain model to float32 rounding (about 1e-5)
and decoding gives the same tokens (tests/serving/test_cpu_inference.py checks both on the shipped en->de model). A
translation or summarization model (`VaswaniForConditionalGeneration`) decodes through
`vaswani.remote_code.cpu_decoding` with or without this set-up (its `generate` hands greedy and beam search to it on a
CPU); for a model whose class has no such decoder of its own (a checkpoint saved by older code),
`CpuInference.generate` runs the package's, which `for_cpu_inference` puts in front of the model's `generate`.
`"int8"` stores every Linear weight (the output projection included) as int8 with one scale per output row and
quantizes activations on the fly (`torch.ao.quantization.quantize_dynamic`, fbgemm kernels): outputs change a little;
the BLEU it costs is measured in results/benchmark/README.md ("Serving paths on a CPU", results in
results/multi30k_en_de/serving/: on the shipped en->de model sacreBLEU 40.96 against 40.93 in fp32, where one scale
per tensor gave 40.49). Such a model decodes on the CPU decoder too, each product the layer's own int8 kernel on its
own packed weights (`vaswani.remote_code.cpu_decoding.Int8Product`): the activations' scale is chosen at each call
from the rows it computes, so a padded batch may decode some inputs otherwise than transformers' loop, which also
computes the padding and the inputs already finished (on 64 validation captions, 48 of 64 outputs alike greedy, 52
with 4 beams); one input at a time gives the loop's tokens. torch.ao's eager int8 path is deprecated in favour of
torchao, whose eager int8 Linear was 4x slower than torch.ao's on the same CPU (396 us against 97 us for the product
above); torch is pinned, so this path stays until torchao catches up.

Both also have the process keep the memory it frees (`vaswani.remote_code.cpu_decoding.keep_freed_memory`, which the CPU
decoder's first call does by itself): with `release_freed_memory=True` the process's malloc settings are left as they
are, by this call and by the decoder after it (`leave_freed_memory`).
"""

import copy
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..remote_code.cpu_decoding import CpuDecoding, keep_freed_memory, leave_freed_memory


QUANTIZATIONS = ("fp32", "int8")


class OneDNNLinear(nn.Linear):
    """An `nn.Linear` whose fp32 CPU inference runs through oneDNN; anything else (training, other devices and
    dtypes) takes the usual path. Same parameters and state dict as the layer it replaces."""

    # the same function as nn.Linear's, from the same parameters: the CPU decoder reads its weights as a Linear's
    # (vaswani.remote_code.cpu_decoding.unreproduced; a subclass does not inherit this)
    cpu_decoder_reads_as = nn.Linear

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if (
            input.device.type == "cpu"
            and input.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not (torch.is_grad_enabled() and (self.weight.requires_grad or input.requires_grad))
        ):
            return torch.ops.mkldnn._linear_pointwise(input, self.weight, self.bias, "none", [], "")
        return F.linear(input, self.weight, self.bias)


class CpuInference:
    """A model of this project set up for fast CPU inference, and held for it: `model` is what it runs. With `"fp32"`
    that is the model given, its Linear layers running through oneDNN (`OneDNNLinear` layers in their place, holding
    the same parameters); with `"int8"`, a copy whose Linear layers hold int8 weights (decoded by its CPU decoder).
    The model is put in eval mode. Unless `release_freed_memory`, the process keeps the memory it frees
    (`keep_freed_memory`); with it, the process's malloc settings are left as they are (see the module docstring).
    Any other model than this project's is refused by name.

        inference = CpuInference(model)
        inference.generate(**batch, num_beams=4)   # the model's generate: greedy and beam search on its CPU decoder
        inference(**batch).logits                  # the model's forward

    `generate` is the model's own, which on a CPU hands greedy and beam search to the model's CPU decoder
    (`vaswani.remote_code.cpu_decoding`); for a model whose class has no such decoder (a checkpoint saved by older
    code), the
    package's, held here (`decoder`), runs in front of that class's `generate`. Besides the Linear layers (fp32),
    nothing of the model is changed: its `generate` stays its class's, and it keeps transformers' hooks as they are."""

    def __init__(self, model: nn.Module, quantization: str = "fp32", release_freed_memory: bool = False):
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization={quantization!r}: use one of {list(QUANTIZATIONS)}.")
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type != "vaswani":
            raise ValueError(
                f"The CPU path (CpuInference, for_cpu_inference) sets up this project's models (config.model_type "
                f"'vaswani'); got {type(model).__name__} (model_type {model_type!r})."
            )
        if quantization == "fp32" and not torch.backends.mkldnn.is_available():
            raise RuntimeError("This PyTorch build has no oneDNN (torch.backends.mkldnn.is_available() is False).")
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("The CPU path (CpuInference, for_cpu_inference) is for a model on the CPU; this one is "
                             "on another device.")
        model.eval()
        if release_freed_memory:
            leave_freed_memory()
        else:
            keep_freed_memory()
        self.quantization = quantization
        self.model = _int8_copy(model) if quantization == "int8" else _with_linear_layers(model, OneDNNLinear)
        self.decoder = _older_class_decoder(self.model)

    def generate(self, *args, **kwargs):
        """The model's `generate` (see the class docstring)."""
        if self.decoder is not None:
            return self.decoder(*args, **kwargs)
        return self.model.generate(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        """The model's forward."""
        return self.model(*args, **kwargs)


def for_cpu_inference(model: nn.Module, quantization: str = "fp32", release_freed_memory: bool = False) -> nn.Module:
    """The model of `CpuInference(model, quantization, release_freed_memory)`, for callers that take a model (a
    pipeline, an evaluation): with `"fp32"` the model given, set up in place (its Linear layers through oneDNN); with
    `"int8"` a copy with int8 Linear layers. A model whose class has no CPU decoder of its own (a checkpoint saved by
    older code) gets the package's in front of its `generate`, as its own attribute: the only way a model passed on
    as a model decodes on it."""
    inference = CpuInference(model, quantization, release_freed_memory)
    if inference.decoder is not None:
        inference.model.generate = inference.decoder
    return inference.model


def _with_linear_layers(model: nn.Module, linear_class: type[nn.Linear]) -> nn.Module:
    """`model` with each of its Linear layers (`nn.Linear` or `OneDNNLinear` exactly) of another class replaced by a
    `linear_class` holding the same parameters: the same tensors, so tied weights stay tied and the state dict is
    the same."""
    for parent in list(model.modules()):
        for name, layer in list(parent.named_children()):
            if type(layer) in (nn.Linear, OneDNNLinear) and type(layer) is not linear_class:
                replacement = linear_class(layer.in_features, layer.out_features, bias=layer.bias is not None,
                                           device="meta")
                replacement.weight, replacement.bias = layer.weight, layer.bias
                setattr(parent, name, replacement.train(layer.training))
    return model


def _int8_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` whose Linear layers hold int8 weights (`torch.ao.quantization.quantize_dynamic`, which
    quantizes `nn.Linear` layers only: a model set up for fp32 before gets them back in the copy)."""
    quantized = copy.deepcopy(model)
    # (a model set up or decoded on the CPU before): the copy lays out its own weights, the int8 ones
    for name in ("generate", "_cpu_decoding_state"):
        vars(quantized).pop(name, None)
    _with_linear_layers(quantized, nn.Linear)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(deprecat|torch\.ao).*")
        # one scale per output row of each weight (per channel): on the shipped en->de model, test_2016_flickr, beam
        # 5, sacreBLEU 40.96 against 40.93 in fp32; one scale per tensor gave 40.49 (see the module docstring)
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        return torch.ao.quantization.quantize_dynamic(quantized, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)


def _older_class_decoder(model: nn.Module) -> CpuDecoding | None:
    """The package's CPU decoder for a generating model whose class has none of its own (a checkpoint saved by older
    code: its `generate` is transformers' loop); the one already put in front of its `generate`, if any; None for a
    model that decodes on its own class's decoder, or does not generate."""
    generating = getattr(model.config, "is_encoder_decoder", False) and model.can_generate()
    if not generating or callable(getattr(type(model), "_cpu_decoding", None)):
        return None
    given = vars(model).get("generate")
    return given if isinstance(given, CpuDecoding) else CpuDecoding(model)


__all__ = ["CpuInference", "QUANTIZATIONS", "OneDNNLinear", "for_cpu_inference", "keep_freed_memory"]
