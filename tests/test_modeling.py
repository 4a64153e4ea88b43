"""modeling/remote_code/modeling_vaswani.py: positions, attention, the models' outputs and losses, exact padding, the
heads (decoding is tested in test_generation.py, saving and loading in test_save_load.py)."""

import math

import pytest
import torch
from torch.nn import functional as F
from transformers.modeling_outputs import (
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
    TokenClassifierOutput,
)

from helpers import random_batch, spread_weights, tiny_config
from vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)
from vaswani.remote_code.modeling_vaswani import VaswaniAttention, shift_tokens_right, sinusoidal_positions


VARIANTS = [
    dict(),
    dict(layer_norm_position="pre"),
    dict(position_embedding_type="learned"),
    dict(position_embedding_type="relative", relative_attention_max_distance=4),
    dict(position_embedding_type="relative", layer_norm_position="pre", encoder_layers=1, decoder_layers=3),
]
VARIANT_IDS = ["post-sinusoidal", "pre-sinusoidal", "learned", "relative", "relative-pre-1+3"]


def seq2seq(**overrides) -> VaswaniForConditionalGeneration:
    torch.manual_seed(0)
    return spread_weights(VaswaniForConditionalGeneration(tiny_config(**overrides))).eval()


# --- positional encoding -------------------------------------------------------------------------------------------


def test_sinusoidal_positions_follow_the_formula():
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), interleaved; d_model = 8 as in the notes'
    # worked example. (The notes' numbers for i >= 1 divide by 10000^(i/2) instead of 10000^(2i/8) = 10^i, a slip in
    # their arithmetic; their first pair, sin(1) and cos(1), and the formula itself are what is checked here.)
    d_model = 8
    table = sinusoidal_positions(torch.arange(3), d_model)
    assert torch.allclose(table[0], torch.tensor([0.0, 1, 0, 1, 0, 1, 0, 1]))
    assert torch.allclose(table[1, :2], torch.tensor([0.8415, 0.5403]), atol=1e-4)
    assert torch.allclose(table[2, :2], torch.tensor([0.9093, -0.4161]), atol=1e-4)
    for pos in range(3):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = VaswaniModel(tiny_config()).eval()
    ids = torch.tensor([[5, 6, 7]])
    embedded = model.encoder.embeddings(ids, position_ids=torch.arange(3).expand(1, 3))
    expected = model.shared(ids) * math.sqrt(32) + sinusoidal_positions(torch.arange(3), 32)
    assert torch.allclose(embedded, expected, atol=1e-6)


def test_relative_position_bias_changes_the_output():
    model = seq2seq(position_embedding_type="relative", relative_attention_max_distance=4)
    ids, mask = random_batch()
    before = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :4]).logits
    with torch.no_grad():
        model.model.encoder.layers[0].self_attn.relative_position_bias.bias[3].add_(2.0)
    after = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :4]).logits
    assert not torch.allclose(before, after)
    # relative positions: no absolute term, and the cross-attention gets no bias
    assert model.model.encoder.embeddings.embed_positions is None
    assert model.model.decoder.layers[0].encoder_attn.relative_position_bias is None


def test_learned_positions_are_a_table():
    model = VaswaniModel(tiny_config(position_embedding_type="learned"))
    assert model.encoder.embeddings.embed_positions.weight.shape == (128, 32)


def test_flash_attention_refuses_relative_bias():
    model = VaswaniForConditionalGeneration(tiny_config(position_embedding_type="relative"))
    with pytest.raises(ValueError, match="relative"):
        model.set_attn_implementation("flash_attention_2")


# --- the bare model and the seq2seq head ---------------------------------------------------------------------------


def test_bare_model_outputs():
    model = VaswaniModel(tiny_config()).eval()
    ids, mask = random_batch()
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    assert isinstance(out, Seq2SeqModelOutput)
    assert out.last_hidden_state.shape == (3, 5, 32)
    assert out.encoder_last_hidden_state.shape == (3, 9, 32)
    assert model.encoder.embeddings.embed_tokens.weight is model.shared.weight
    assert model.decoder.embeddings.embed_tokens.weight is model.shared.weight


def test_lm_head_is_tied_to_the_shared_embeddings():
    model = VaswaniForConditionalGeneration(tiny_config())
    assert model.lm_head.weight is model.model.shared.weight
    untied = VaswaniForConditionalGeneration(tiny_config(tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.model.shared.weight


def test_labels_give_the_loss_with_shifted_decoder_inputs():
    model = seq2seq()
    ids, mask = random_batch()
    labels = torch.randint(4, 1000, (3, 6))
    labels[1, 4:] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert isinstance(out, Seq2SeqLMOutput)

    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    assert decoder_input_ids[0, 0] == 1 and torch.equal(decoder_input_ids[0, 1:], labels[0, :-1])
    assert decoder_input_ids[1, 5] == 0  # -100 becomes padding
    explicit = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    assert torch.allclose(out.logits, explicit)

    keep = labels != -100
    expected = F.cross_entropy(explicit[keep], labels[keep])
    assert torch.allclose(out.loss, expected, atol=1e-6)


def test_ignored_labels_do_not_change_the_loss():
    model = seq2seq()
    ids, mask = random_batch()
    labels = torch.randint(4, 1000, (3, 6))
    labels[:, 4:] = -100
    other = labels.clone()
    other[:, 4:] = -100
    other[0, 5] = -100
    assert torch.allclose(model(input_ids=ids, labels=labels).loss, model(input_ids=ids, labels=other).loss)


def test_label_smoothing_from_the_config():
    model = seq2seq(label_smoothing=0.1)
    ids, _ = random_batch()
    labels = torch.randint(4, 1000, (3, 5))
    out = model(input_ids=ids, labels=labels)
    expected = F.cross_entropy(out.logits.reshape(-1, 1000), labels.reshape(-1), label_smoothing=0.1)
    assert torch.allclose(out.loss, expected, atol=1e-6)


# --- attention -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", VARIANTS, ids=VARIANT_IDS)
def test_eager_and_sdpa_agree(overrides):
    model = seq2seq(**overrides)
    ids, mask = random_batch()
    model.set_attn_implementation("sdpa")
    sdpa = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :6]).logits
    model.set_attn_implementation("eager")
    eager = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :6]).logits
    assert (sdpa - eager).abs().max() < 1e-5


def test_only_the_decoder_self_attention_is_causal():
    model = VaswaniForConditionalGeneration(tiny_config())
    for name, module in model.named_modules():
        if isinstance(module, VaswaniAttention):
            assert module.is_causal == (".decoder." in name and name.endswith("self_attn")), name


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_encoder_and_cross_attention_see_the_whole_source_and_the_decoder_not_the_future(implementation):
    model = seq2seq()
    model.set_attn_implementation(implementation)
    source = torch.randint(4, 1000, (1, 8))
    target = torch.randint(4, 1000, (1, 6))
    base = model(input_ids=source, decoder_input_ids=target)

    later_source = source.clone()
    later_source[0, -1] = (source[0, -1] + 1) % 1000 + 4
    changed = model(input_ids=later_source, decoder_input_ids=target)
    # the first source position sees the last one (encoder attention is not causal) ...
    assert not torch.allclose(base.encoder_last_hidden_state[0, 0], changed.encoder_last_hidden_state[0, 0])
    # ... and so does the first target position, through the cross-attention
    assert not torch.allclose(base.logits[0, 0], changed.logits[0, 0])

    later_target = target.clone()
    later_target[0, -1] = (target[0, -1] + 1) % 1000 + 4
    masked = model(input_ids=source, decoder_input_ids=later_target)
    assert torch.allclose(base.logits[0, :-1], masked.logits[0, :-1], atol=1e-6)
    assert not torch.allclose(base.logits[0, -1], masked.logits[0, -1])


def test_output_attentions_and_hidden_states():
    model = seq2seq(encoder_layers=2, decoder_layers=3)
    model.set_attn_implementation("eager")
    ids, mask = random_batch()
    out = model(
        input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True,
        output_hidden_states=True,
    )
    assert len(out.encoder_attentions) == 2 and len(out.decoder_attentions) == 3 and len(out.cross_attentions) == 3
    assert out.encoder_attentions[0].shape == (3, 4, 9, 9)
    assert out.decoder_attentions[0].shape == (3, 4, 5, 5)
    assert out.cross_attentions[0].shape == (3, 4, 5, 9)
    for weights in out.encoder_attentions + out.cross_attentions:
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
        assert weights[2, :, :, 5:].abs().max() == 0  # padded source positions get no attention
    assert torch.triu(out.decoder_attentions[0][0, 0], diagonal=1).abs().max() == 0  # nor does the future
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 4
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = random_batch()
    labels = torch.randint(4, 1000, (3, 5))
    gradients, feed_forward_calls = [], []
    for checkpointing in (False, True):
        model = seq2seq()
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        calls = []
        model.model.encoder.layers[0].feed_forward.register_forward_hook(lambda *args: calls.append(1))
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        feed_forward_calls.append(len(calls))
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert feed_forward_calls == [1, 2]  # with checkpointing, the layer runs again during the backward pass
    assert gradients[0].keys() == gradients[1].keys()
    for name in gradients[0]:
        assert torch.allclose(gradients[0][name], gradients[1][name], atol=1e-6), name


# --- padding is exact ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", VARIANTS, ids=VARIANT_IDS)
def test_padding_is_exact_for_seq2seq(overrides):
    model = seq2seq(**overrides)
    ids, mask = random_batch()
    target = torch.randint(4, 1000, (3, 5))
    padded = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    for row in range(3):
        length = int(mask[row].sum())
        alone = model(input_ids=ids[row : row + 1, :length], decoder_input_ids=target[row : row + 1]).logits
        assert (alone[0] - padded[row]).abs().max() < 1e-5
        left_ids[row, 9 - length :], left_mask[row, 9 - length :] = ids[row, :length], 1
    left = model(input_ids=left_ids, attention_mask=left_mask, decoder_input_ids=target).logits
    assert (left - padded).abs().max() < 1e-5


def test_padding_is_exact_for_the_classification_heads():
    torch.manual_seed(0)
    classifier = spread_weights(VaswaniForSequenceClassification(tiny_config(num_labels=3))).eval()
    tagger = spread_weights(VaswaniForTokenClassification(tiny_config(num_labels=5))).eval()
    ids, mask = random_batch()
    padded_classes = classifier(input_ids=ids, attention_mask=mask).logits
    padded_tags = tagger(input_ids=ids, attention_mask=mask).logits
    for row in range(3):
        length = int(mask[row].sum())
        alone = ids[row : row + 1, :length]
        assert (classifier(input_ids=alone).logits[0] - padded_classes[row]).abs().max() < 1e-5
        assert (tagger(input_ids=alone).logits[0] - padded_tags[row, :length]).abs().max() < 1e-5


# --- classification heads ------------------------------------------------------------------------------------------


def test_sequence_classification_problem_types():
    ids, mask = random_batch()
    torch.manual_seed(0)
    single = VaswaniForSequenceClassification(tiny_config(num_labels=3)).eval()
    labels = torch.tensor([0, 2, 1])
    out = single(input_ids=ids, attention_mask=mask, labels=labels)
    assert isinstance(out, Seq2SeqSequenceClassifierOutput) and out.logits.shape == (3, 3)
    assert single.config.problem_type == "single_label_classification"
    assert torch.allclose(out.loss, F.cross_entropy(out.logits, labels))

    multi = VaswaniForSequenceClassification(tiny_config(num_labels=3)).eval()
    targets = torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]])
    out = multi(input_ids=ids, attention_mask=mask, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    assert torch.allclose(out.loss, F.binary_cross_entropy_with_logits(out.logits, targets))

    regression = VaswaniForSequenceClassification(tiny_config(num_labels=1)).eval()
    scores = torch.tensor([0.5, -1.0, 2.0])
    out = regression(input_ids=ids, attention_mask=mask, labels=scores)
    assert regression.config.problem_type == "regression"
    assert torch.allclose(out.loss, F.mse_loss(out.logits.squeeze(-1), scores))


def test_classification_labels_outside_the_label_set():
    model = VaswaniForSequenceClassification(tiny_config(num_labels=2)).eval()
    ids, mask = random_batch()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2]))
    tagger = VaswaniForTokenClassification(tiny_config(num_labels=4)).eval()
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        tagger(input_ids=ids, attention_mask=mask, labels=torch.full_like(ids, 7))


def test_token_classification():
    model = VaswaniForTokenClassification(tiny_config(num_labels=5)).eval()
    ids, mask = random_batch()
    labels = torch.randint(0, 5, ids.shape).masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert isinstance(out, TokenClassifierOutput) and out.logits.shape == (3, 9, 5)
    keep = labels != -100
    assert torch.allclose(out.loss, F.cross_entropy(out.logits[keep], labels[keep]))
    assert not any("decoder" in name for name, _ in model.named_parameters())


# --- bad input -----------------------------------------------------------------------------------------------------


def test_input_longer_than_the_maximum_positions_says_the_limit():
    model = seq2seq()
    too_long = torch.randint(4, 1000, (1, 10 * 128))
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        model(input_ids=too_long, decoder_input_ids=too_long[:, :3])
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        model(input_ids=too_long[:, :5], decoder_input_ids=too_long)
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        model.generate(too_long[:, :5], max_new_tokens=200, min_new_tokens=200)


def test_float_token_ids_are_refused_clearly():
    model = seq2seq()
    with pytest.raises(TypeError, match="integer tensor of token ids"):
        model(input_ids=torch.rand(1, 5) * 100, decoder_input_ids=torch.tensor([[1]]))
    with pytest.raises(TypeError, match="decoder_input_ids"):
        model(input_ids=torch.tensor([[5, 6]]), decoder_input_ids=torch.tensor([[1.0]]))
    with pytest.raises(TypeError, match="labels"):
        model(input_ids=torch.tensor([[5, 6]]), labels=torch.tensor([[5.0, 6.0]]))


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "relative"])
def test_position_embeddings_can_be_read_and_resized_as_example_scripts_do(positions):
    # run_summarization.py calls resize_position_embeddings(max_source_length) on a model shorter than that
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(position_embedding_type=positions, max_position_embeddings=16))
    model.eval()
    tables = model.get_position_embeddings()
    if positions != "learned":
        assert tables is None
    else:
        assert len(tables) == 2 and all(t.num_embeddings == 16 for t in tables)
        before = [t.weight.detach().clone() for t in tables]
    input_ids = torch.randint(4, 100, (1, 30))
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        model(input_ids=input_ids, decoder_input_ids=input_ids[:, :5])
    short = torch.randint(4, 100, (1, 10))
    reference = model(input_ids=short, decoder_input_ids=short[:, :5]).logits
    model.resize_position_embeddings(64)
    assert model.config.max_position_embeddings == 64
    model(input_ids=input_ids, decoder_input_ids=input_ids[:, :5])  # now accepted
    # the positions the model had keep their meaning: outputs on short inputs do not change
    torch.testing.assert_close(model(input_ids=short, decoder_input_ids=short[:, :5]).logits, reference)
    if positions == "learned":
        after = model.get_position_embeddings()
        assert all(t.num_embeddings == 64 for t in after)
        assert all(torch.equal(a.weight[:16], b) for a, b in zip(after, before))
        model.resize_position_embeddings(8)
        assert all(torch.equal(a.weight, b[:8]) for a, b in zip(model.get_position_embeddings(), before))
    with pytest.raises(ValueError, match="new_num_position_embeddings must be an integer from 1"):
        model.resize_position_embeddings(0)
