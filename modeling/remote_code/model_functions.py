"""What the model's forward and its CPU decoder (cpu_decoding.py) both compute or say, in one place that both import:
the sinusoidal positional encoding, the positions of padded inputs, the name of the outputs' cache field, and the
message for non-finite logits.

This file is copied into every saved model (modeling_vaswani.py imports it), so it imports from this project
nothing at all.
"""

import torch
from transformers.modeling_outputs import Seq2SeqLMOutput


# What a model says, once, when its logits hold nan or inf (its forward, and the CPU decoder's first step).
NON_FINITE_LOGITS = (
    "The model's logits hold nan or inf, so its outputs are meaningless (often empty). Its weights are damaged or it "
    "diverged in training: check torch.isfinite on its parameters."
)

# transformers 5.24 renamed the outputs' `past_key_values` field to `cache` (the old name still works there, with a
# warning); the model's outputs use the name of the installed version
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


# Positional encoding (section 3.5 of the paper; modeling_vaswani.py's embeddings add it)


def sinusoidal_positions(position_ids: torch.Tensor, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Sines fill the even dimensions and cosines the odd ones (interleaved, as in the notes). Computed on the fly in
    float32: it has no parameters and no length limit, and costs little next to one matrix product.
    """
    two_i = torch.arange(0, d_model, 2, device=position_ids.device, dtype=torch.float32)
    angles = position_ids.float().unsqueeze(-1) / torch.pow(10000.0, two_i / d_model)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


def padding_aware_positions(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """Position of each token counted over the real (unmasked) tokens only, so that a sequence gets the same
    positions, and hence the same outputs, whether it is padded on the left, on the right, or not at all."""
    if attention_mask is None or attention_mask.dim() != 2:
        return torch.arange(length, device=device).expand(batch, length)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


__all__ = ["CACHE_FIELD", "NON_FINITE_LOGITS", "padding_aware_positions", "sinusoidal_positions"]
