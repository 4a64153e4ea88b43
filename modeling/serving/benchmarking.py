"""What the speed measurements share (scripts/tools/benchmark.py, scripts/tools/gpu_suite.py): a benchmark's setup,
this project's model and transformers' Marian built with the identical architecture, a random batch, the analytic
FLOPs of a training step, and the matrix-multiply peak of the device, measured in the same run, that model FLOPs
utilization (MFU) is taken against.
"""

import math
import platform
import time
from dataclasses import dataclass

import torch
from transformers import MarianConfig, MarianMTModel

from ..configuration_vaswani import VaswaniConfig
from ..modeling_vaswani import VaswaniForConditionalGeneration


@dataclass
class Setup:
    preset: str
    precision: str  # "fp32" or "bf16" (autocast)
    batch_size: int
    source_length: int
    target_length: int
    vocab_size: int
    device: str


def vaswani_model(setup: Setup, **options) -> VaswaniForConditionalGeneration:
    config = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size, **options)
    config._attn_implementation = "sdpa"
    return VaswaniForConditionalGeneration(config)


def marian_model(setup: Setup) -> MarianMTModel:
    """Marian with exactly our architecture: post-LN, ReLU, sinusoidal positions, scaled and tied embeddings."""
    ours = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size)
    config = MarianConfig(
        vocab_size=ours.vocab_size,
        d_model=ours.d_model,
        encoder_layers=ours.encoder_layers,
        decoder_layers=ours.decoder_layers,
        encoder_attention_heads=ours.encoder_attention_heads,
        decoder_attention_heads=ours.decoder_attention_heads,
        encoder_ffn_dim=ours.encoder_ffn_dim,
        decoder_ffn_dim=ours.decoder_ffn_dim,
        activation_function="relu",
        dropout=ours.dropout,
        attention_dropout=ours.attention_dropout,
        activation_dropout=ours.activation_dropout,
        max_position_embeddings=ours.max_position_embeddings,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=ours.pad_token_id,
        eos_token_id=ours.eos_token_id,
        decoder_start_token_id=ours.decoder_start_token_id,
        bos_token_id=ours.bos_token_id,
        forced_eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return MarianMTModel(config)


def make_batch(setup: Setup, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    shape_source, shape_target = (setup.batch_size, setup.source_length), (setup.batch_size, setup.target_length)
    return {
        "input_ids": torch.randint(4, setup.vocab_size, shape_source, generator=generator).to(setup.device),
        "attention_mask": torch.ones(shape_source, dtype=torch.long, device=setup.device),
        "labels": torch.randint(4, setup.vocab_size, shape_target, generator=generator).to(setup.device),
    }


def autocast(setup: Setup):
    return torch.autocast(device_type=setup.device.split(":")[0], dtype=torch.bfloat16, enabled=setup.precision == "bf16")


def synchronize(setup: Setup):
    if setup.device.startswith("cuda"):
        torch.cuda.synchronize()


def training_flops(config: VaswaniConfig, setup: Setup) -> float:
    """Analytic FLOPs of one training step (forward + backward = 3x the forward's matrix products)."""
    d, b, s, t, v = config.d_model, setup.batch_size, setup.source_length, setup.target_length, config.vocab_size
    encoder_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim  # q, k, v, out projections + feed-forward
    decoder_layer = 8 * d * d + 2 * d * config.decoder_ffn_dim  # self- and cross-attention + feed-forward
    forward = 2 * b * (s * config.encoder_layers * encoder_layer + t * config.decoder_layers * decoder_layer)
    forward += 2 * b * t * d * v  # output projection
    # attention scores and weighted sums: 2 products of (length x length x d) per attention block
    forward += 2 * 2 * b * d * (config.encoder_layers * s * s + config.decoder_layers * (t * t + t * s))
    return 3 * forward


def matmul_peak(setup: Setup, dtype: torch.dtype, size: int = 2048, repeats: int = 5, per_round: int = 1) -> float:
    """Best FLOP/s of a square matrix product on this device: the best of `repeats` rounds (after two warm-up rounds)
    of `per_round` products issued back to back between two synchronizations. On a GPU one product of a small matrix
    times its launch and the synchronization, not the GPU: one 1024 x 1024 bf16 product read 79 TFLOP/s on an H100
    that does about 800 (2026-11-24), which made every MFU on that machine 10x too high."""
    a = torch.randn(size, size, device=setup.device, dtype=dtype)
    b = torch.randn(size, size, device=setup.device, dtype=dtype)
    best = math.inf
    for _ in range(repeats + 2):
        synchronize(setup)
        start = time.perf_counter()
        for _ in range(per_round):
            a @ b
        synchronize(setup)
        best = min(best, (time.perf_counter() - start) / per_round)
    return 2 * size**3 / best


def proc_field(path: str, name: str) -> str | None:
    """The value of the `name: value` line of a /proc file (/proc/self/status, /proc/cpuinfo), or None."""
    try:
        with open(path) as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The processor's model name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    return proc_field("/proc/cpuinfo", "model name") or platform.processor() or "CPU"


__all__ = [
    "Setup",
    "autocast",
    "cpu_name",
    "make_batch",
    "marian_model",
    "matmul_peak",
    "proc_field",
    "synchronize",
    "training_flops",
    "vaswani_model",
]
