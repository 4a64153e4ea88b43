"""vaswani.evaluation.diagnostics: does a model's output depend on its input, and does its encoder keep tokens apart?"""

import math

import pytest
import torch

from helpers import PAIRS, spread_weights, tiny_config
from vaswani import VaswaniForConditionalGeneration
from vaswani.evaluation.diagnostics import (
    encoder_collapse,
    format_encoder_collapse,
    input_independence_warning,
    output_diversity,
)


SOURCES = [en for en, _ in PAIRS]


def ignores_its_input(model):
    """Cut the decoder off from the encoder: every cross-attention outputs zero, so the decoder is a language model
    and writes the same text whatever the source (the failure of the first SAMSum model)."""
    with torch.no_grad():
        for layer in model.model.decoder.layers:
            layer.encoder_attn.out_proj.weight.zero_()
            layer.encoder_attn.out_proj.bias.zero_()
    return model


@pytest.fixture(scope="module")
def reading_model(tokenizer):
    torch.manual_seed(0)
    return spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))).eval()


def greedy(model, tokenizer, texts):
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    return tokenizer.batch_decode(model.generate(**batch, num_beams=1, max_new_tokens=8), skip_special_tokens=True)


def test_output_diversity_counts_distinct_inputs_and_outputs():
    diversity = output_diversity(["a", "b", "b", "c"], ["x", "y", "y", "x"])
    assert diversity == {"distinct_inputs": 3, "distinct_outputs": 2, "most_common_output": "x",
                         "most_common_output_count": 2}
    with pytest.raises(ValueError, match="3 inputs but 2 outputs"):
        output_diversity(["a", "b", "c"], ["x", "y"])


def test_a_model_that_ignores_its_input_is_warned_about(reading_model, tokenizer):
    reads = output_diversity(SOURCES, greedy(reading_model, tokenizer, SOURCES))
    assert reads["distinct_outputs"] >= 5 and input_independence_warning(reads) is None

    deaf = VaswaniForConditionalGeneration(reading_model.config)
    deaf.load_state_dict(reading_model.state_dict())
    ignores_its_input(deaf).eval()
    outputs = greedy(deaf, tokenizer, SOURCES)
    diversity = output_diversity(SOURCES, outputs)
    assert diversity["distinct_outputs"] == 1
    warning = input_independence_warning(diversity)
    assert warning.startswith("The outputs do not depend on the input: 1 distinct output(s) for 10 distinct inputs")
    assert repr(outputs[0]) in warning


def test_too_few_inputs_say_nothing():
    assert input_independence_warning(output_diversity(["a", "b", "c", "d"], ["x"] * 4)) is None


def test_encoder_collapse_reports_every_layer_and_the_uniform_bound(reading_model, tokenizer):
    layers = encoder_collapse(reading_model, tokenizer, SOURCES, max_length=64, batch_size=3)
    assert [layer["layer"] for layer in layers] == list(range(reading_model.config.encoder_layers))
    lengths = [len(tokenizer(text)["input_ids"]) for text in SOURCES]
    expected_uniform = sum(math.log(n) for n in lengths) / len(lengths)
    for layer in layers:
        assert layer["uniform_entropy"] == pytest.approx(expected_uniform, abs=1e-3)
        assert 0 < layer["attention_entropy"] < layer["uniform_entropy"]
        assert -1 <= layer["token_cosine"] < 0.9
    assert reading_model.config._attn_implementation == "sdpa" and not reading_model.training  # left as it was
    assert "attention entropy" in format_encoder_collapse(layers)


def test_encoder_collapse_sees_uniform_attention_and_identical_token_vectors(reading_model, tokenizer):
    collapsed = VaswaniForConditionalGeneration(reading_model.config)
    collapsed.load_state_dict(reading_model.state_dict())
    with torch.no_grad():
        for layer in collapsed.model.encoder.layers:
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.q_proj.bias.zero_()  # equal scores for every key: uniform attention
            # one large vector added to every token: after the (post-)LayerNorm all tokens point the same way
            layer.feed_forward.fc2.bias.copy_(torch.linspace(-1, 1, layer.feed_forward.fc2.bias.numel()) * 1e4)
    for layer in encoder_collapse(collapsed.eval(), tokenizer, SOURCES, max_length=64):
        assert layer["attention_entropy"] == pytest.approx(layer["uniform_entropy"], abs=1e-3)
        assert layer["token_cosine"] > 0.999


def test_an_input_of_one_token_counts_for_the_entropies_only(reading_model, tokenizer):
    with_empty = encoder_collapse(reading_model, tokenizer, [SOURCES[0], ""], max_length=64)[0]
    alone = encoder_collapse(reading_model, tokenizer, [SOURCES[0]], max_length=64)[0]
    assert with_empty["token_cosine"] == pytest.approx(alone["token_cosine"], abs=1e-4)
    assert with_empty["uniform_entropy"] == pytest.approx(alone["uniform_entropy"] / 2, abs=1e-4)  # log 1 = 0


def test_padding_does_not_change_the_figures(reading_model, tokenizer):
    alone = [encoder_collapse(reading_model, tokenizer, [text], max_length=64)[0] for text in SOURCES[:3]]
    together = encoder_collapse(reading_model, tokenizer, SOURCES[:3], max_length=64)[0]
    for name in ("attention_entropy", "uniform_entropy", "token_cosine"):
        assert together[name] == pytest.approx(sum(layer[name] for layer in alone) / 3, abs=2e-4)
