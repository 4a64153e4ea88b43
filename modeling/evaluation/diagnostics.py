"""Two checks that a sequence-to-sequence model reads its input, for runs and for evaluations.

- `output_diversity`: how many distinct outputs the model produced for how many distinct inputs. A model whose
  decoder ignores the encoder writes the same text for every input and can still score a plausible-looking ROUGE
  from common words alone (the first SAMSum model did: 12.95 ROUGE-1, one summary for all 818 dialogues).
  `input_independence_warning` turns that into a sentence for the user.
- `encoder_collapse`: for each encoder layer, the entropy of its self-attention (against the entropy of attending
  uniformly, log n for n real tokens) and the mean cosine between the vectors of different tokens of one input. A
  collapsed encoder attends uniformly (entropy = log n) and gives every token the same vector (cosine 1), so the
  decoder sees one average of the input and no positions to copy from.
"""

from collections import Counter
from collections.abc import Sequence

import torch


# Fewer distinct outputs than this share of the distinct inputs is reported as outputs that do not depend on the
# input. Even a weak model that reads its input gives most inputs an output of their own (the SAMSum and AESLC
# models that read their sources: over 90%); the failure this guards against gives one or a handful.
MIN_DISTINCT_OUTPUT_SHARE = 0.5


def output_diversity(sources: Sequence[str], outputs: Sequence[str]) -> dict:
    """Distinct inputs and outputs, and the most frequent output with its count."""
    if len(sources) != len(outputs):
        raise ValueError(f"{len(sources)} inputs but {len(outputs)} outputs: they must pair up one to one.")
    most_common, count = Counter(outputs).most_common(1)[0] if outputs else ("", 0)
    return {
        "distinct_inputs": len(set(sources)),
        "distinct_outputs": len(set(outputs)),
        "most_common_output": most_common,
        "most_common_output_count": count,
    }


def input_independence_warning(diversity: dict) -> str | None:
    """A warning when the outputs do not depend on the inputs (see MIN_DISTINCT_OUTPUT_SHARE), else None. Fewer
    than 5 distinct inputs say nothing either way."""
    inputs, outputs = diversity["distinct_inputs"], diversity["distinct_outputs"]
    if inputs < 5 or outputs >= MIN_DISTINCT_OUTPUT_SHARE * inputs:
        return None
    return (
        f"The outputs do not depend on the input: {outputs} distinct output(s) for {inputs} distinct inputs, "
        f"{diversity['most_common_output']!r} {diversity['most_common_output_count']} times. The decoder is "
        "ignoring the encoder, so the metrics measure common words, not the model's reading of its inputs."
    )


@torch.no_grad()
def encoder_collapse(model, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 16) -> list[dict]:
    """One entry per encoder layer, averaged over `texts` (truncated to `max_length` tokens):

    - `attention_entropy`: entropy in nats of each head's attention distribution, averaged over heads and real
      query tokens; `uniform_entropy`: the same for uniform attention (log n), its upper bound.
    - `token_cosine`: cosine similarity between the output vectors of two different real tokens of one input,
      averaged over all pairs, then over inputs of two tokens or more (1.0: every token is the same vector). The
      vectors are each layer's outputs (with pre-LN, the residual stream before the final LayerNorm).
    """
    if not texts:
        raise ValueError("encoder_collapse needs at least one text.")
    encoder = model.get_encoder()
    previous = encoder.config._attn_implementation
    was_training = model.training
    encoder.config._attn_implementation = "eager"  # the only implementation that returns attention weights
    model.eval()
    totals: list[dict[str, float]] = []
    try:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                list(texts[start : start + batch_size]), truncation=True, max_length=max_length, padding=True,
                return_tensors="pt",
            ).to(model.device)
            mask = batch["attention_mask"].bool()
            out = encoder(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                output_attentions=True, output_hidden_states=True,
            )
            lengths = mask.sum(-1).float()  # (batch,)
            # hidden_states: the embeddings, then one entry per layer; attentions: one per layer
            for index, (weights, states) in enumerate(zip(out.attentions, out.hidden_states[1:])):
                if len(totals) <= index:
                    totals.append({"attention_entropy": 0.0, "uniform_entropy": 0.0, "token_cosine": 0.0,
                                   "inputs_with_pairs": 0})
                weights = weights.float()
                entropy = -(weights * weights.clamp(min=1e-12).log()).sum(-1)  # (batch, heads, query)
                per_query = entropy.mean(1).masked_fill(~mask, 0.0)  # mean over heads; padding queries dropped
                totals[index]["attention_entropy"] += (per_query.sum(-1) / lengths).sum().item()
                totals[index]["uniform_entropy"] += lengths.log().sum().item()
                unit = torch.nn.functional.normalize(states.float(), dim=-1) * mask.unsqueeze(-1)
                summed = unit.sum(1)  # (batch, d): sum over real tokens; |sum|^2 = sum of all pairwise cosines
                pairs = lengths * (lengths - 1)
                off_diagonal = (summed * summed).sum(-1) - lengths
                # an input of one token has no pair to compare: it counts for the entropies only
                totals[index]["token_cosine"] += (off_diagonal / pairs.clamp(min=1)).masked_fill(pairs == 0, 0).sum().item()
                totals[index]["inputs_with_pairs"] += (pairs > 0).sum().item()
    finally:
        encoder.config._attn_implementation = previous
        model.train(was_training)
    return [
        {
            "layer": index,
            "attention_entropy": round(layer["attention_entropy"] / len(texts), 4),
            "uniform_entropy": round(layer["uniform_entropy"] / len(texts), 4),
            "token_cosine": round(layer["token_cosine"] / max(layer["inputs_with_pairs"], 1), 4),
        }
        for index, layer in enumerate(totals)
    ]


def format_encoder_collapse(layers: list[dict]) -> str:
    """The per-layer figures as a small text table."""
    lines = ["layer  attention entropy (uniform)  token cosine"]
    for layer in layers:
        lines.append(
            f"{layer['layer']:>5}  {layer['attention_entropy']:>17.3f} ({layer['uniform_entropy']:.3f})  "
            f"{layer['token_cosine']:>12.3f}"
        )
    return "\n".join(lines)


__all__ = [
    "MIN_DISTINCT_OUTPUT_SHARE",
    "encoder_collapse",
    "format_encoder_collapse",
    "input_independence_warning",
    "output_diversity",
]
