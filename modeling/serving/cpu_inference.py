"""Faster inference on CPUs from the same weights, set up explicitly: oneDNN's fp32 matrix products, or int8 Linear
layers. (Decoding itself needs no set-up: on a CPU `generate` runs the model's own decoder, `vaswani.cpu_decoding`.)

On a CPU, `generate` spends about 70% of its time in the Linear layers' matrix products (the rest in attention,
the cache and Python). PyTorch's CPU wheel runs fp32 matrix products through MKL, which on AMD CPUs takes a slow
generic path: on an AVX-512 EPYC, one core, a (32 x 512) x (512 x 2048) product took 707 us through MKL and 373 us
through oneDNN, the library CTranslate2 also picks on AMD CPUs. Two ways to serve a model faster, both for inference
only (no gradients, nothing to save):

    from vaswani.serving.cpu_inference import for_cpu_inference

    model = for_cpu_inference(model)                       # fp32, every Linear through oneDNN (in place)
    model = for_cpu_inference(model, quantization="int8")  # a copy with int8 Linear layers

`"fp32"` changes only how the products are summed: logits agree with the plain model to float32 rounding (about
1e-5) and decoding gives the same tokens (tests/test_cpu_inference.py checks both on the shipped en->de model). A
translation or summarization model (`VaswaniForConditionalGeneration`) decodes through `vaswani.cpu_decoding` with or
without this set-up (its `generate` hands greedy and beam search to it on a CPU); a model whose class has no such
decoder of its own (a checkpoint saved by older code) gets the package's put in front of its `generate` here.
`"int8"` stores every Linear weight (the output projection included) as int8 with one scale per tensor and quantizes
activations on the fly (`torch.ao.quantization.quantize_dynamic`, fbgemm kernels): outputs change a little; the
BLEU it costs is measured in results/benchmark/README.md ("Serving paths on a CPU", results in
results/multi30k_en_de/serving/). torch.ao's eager int8 path is deprecated in favour of torchao, whose eager int8
Linear was 4x slower than torch.ao's on the same CPU (396 us against 97 us for the product above); torch is pinned,
so this path stays until torchao catches up.

Both also have the process keep the memory it frees (`vaswani.cpu_decoding.keep_freed_memory`, which the CPU
decoder's first call does by itself): with `release_freed_memory=True` the process's malloc settings are left as they
are, by this call and by the decoder after it (`leave_freed_memory`).
"""

import copy
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..cpu_decoding import CpuGenerate, keep_freed_memory, leave_freed_memory


QUANTIZATIONS = ("fp32", "int8")
class OneDNNLinear(nn.Linear):
    """An `nn.Linear` whose fp32 CPU inference runs through oneDNN; anything else (training, other devices and
    dtypes) takes the usual path. Same parameters and state dict as the layer it replaces."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if (
            input.device.type == "cpu"
            and input.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not (torch.is_grad_enabled() and (self.weight.requires_grad or input.requires_grad))
        ):
            return torch.ops.mkldnn._linear_pointwise(input, self.weight, self.bias, "none", [], "")
        return F.linear(input, self.weight, self.bias)


def for_cpu_inference(model: nn.Module, quantization: str = "fp32", release_freed_memory: bool = False) -> nn.Module:
    """`model` (of this project: any other is refused by name) set up for fast CPU inference: `"fp32"` routes its
    Linear layers through oneDNN, in place, same weights (its `generate` decodes through `vaswani.cpu_decoding`, by
    its own class or, for a class without it, put in front here); `"int8"` returns a copy whose Linear layers hold
    int8 weights (decoded by transformers' loop). The model is put in eval mode. Unless `release_freed_memory`, the
    process keeps the memory it frees (`keep_freed_memory`, see the module docstring)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: use one of {list(QUANTIZATIONS)}.")
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type != "vaswani":
        raise ValueError(
            f"for_cpu_inference sets up this project's models (config.model_type 'vaswani'); got "
            f"{type(model).__name__} (model_type {model_type!r})."
        )
    if quantization == "fp32" and not torch.backends.mkldnn.is_available():
        raise RuntimeError("This PyTorch build has no oneDNN (torch.backends.mkldnn.is_available() is False).")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("for_cpu_inference is for a model on the CPU; this one is on another device.")
    model.eval()
    if release_freed_memory:
        leave_freed_memory()
    else:
        keep_freed_memory()
    if quantization == "int8":
        quantized = copy.deepcopy(model)
        # (a model set up or decoded on the CPU before): its decoder reads float weights; the copy's class runs
        # transformers' loop for layers without them
        for name in ("generate", "_cpu_generate_state"):
            vars(quantized).pop(name, None)
        for module in quantized.modules():
            if type(module) is OneDNNLinear:  # (a model set up for fp32 before): torch.ao swaps plain Linears only
                module.__class__ = nn.Linear
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*(deprecat|torch\.ao).*")
            return torch.ao.quantization.quantize_dynamic(quantized, {nn.Linear}, dtype=torch.qint8, inplace=True)
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear  # keeps the parameters (and tied weights) exactly as they are
    generating = getattr(model.config, "is_encoder_decoder", False) and model.can_generate()
    decodes_on_cpu = callable(getattr(type(model), "_cpu_generate", None))
    if generating and not decodes_on_cpu and not isinstance(vars(model).get("generate"), CpuGenerate):
        # a checkpoint saved by older code, whose model class does not decode on the CPU path by itself
        model.generate = CpuGenerate(model)
    if generating:
        # generate would build a cache for every call (3.5 ms of a ~120 ms greedy call on the shipped en->de model,
        # most of it copying the config); the CPU path's loop needs none, and where transformers' loop runs, the
        # model's decoder creates the same cache at its first step (VaswaniDecoder.forward)
        model._supports_default_dynamic_cache = _cache_made_by_the_model
    return model


def _cache_made_by_the_model() -> bool:
    """`generate`'s question whether to build a DynamicCache for the model (no: the model's decoder makes its own)."""
    return False


__all__ = ["QUANTIZATIONS", "OneDNNLinear", "for_cpu_inference", "keep_freed_memory"]
