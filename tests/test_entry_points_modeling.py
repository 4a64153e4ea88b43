"""What common transformers code does with the model's defaults: `output_attentions=True` under the default attention
(sdpa), `torch.export.export` of the forward with its default `use_cache=True`, and `generate` with a forward compiled
the usual way (`model.forward = torch.compile(model.forward)`) over changing batch sizes."""

import copy

import pytest
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from helpers import random_batch, spread_weights, tiny_config
from vaswani import VaswaniForConditionalGeneration


VARIANTS = {
    "sinusoidal": dict(),
    "relative-pre": dict(position_embedding_type="relative", relative_attention_max_distance=4,
                         layer_norm_position="pre"),
}


def seq2seq(**overrides) -> VaswaniForConditionalGeneration:
    torch.manual_seed(0)
    return spread_weights(VaswaniForConditionalGeneration(tiny_config(**overrides))).eval()


def eager_twin(model: VaswaniForConditionalGeneration) -> VaswaniForConditionalGeneration:
    """The same weights under eager attention: the reference for the attention weights."""
    twin = copy.deepcopy(model)
    twin.set_attn_implementation("eager")
    return twin


def assert_same_attentions(actual, expected):
    """Nested tuples of attention weights (per layer, or per step and layer): the same structure and values."""
    if torch.is_tensor(expected):
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)
        return
    assert isinstance(actual, tuple) and len(actual) == len(expected) > 0
    for a, e in zip(actual, expected):
        assert_same_attentions(a, e)


# --- output_attentions whatever the attention implementation -------------------------------------------------------


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("variant", VARIANTS.values(), ids=VARIANTS.keys())
def test_output_attentions_under_sdpa_are_eagers_weights(variant, padded):
    model = seq2seq(**variant)
    assert model.config._attn_implementation == "sdpa"  # the default
    eager = eager_twin(model)
    ids, mask = random_batch()
    if not padded:  # no mask to build: sdpa relies on its is_causal flag, eager on a causal mask
        ids, mask = ids[:1], None
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :6], output_attentions=True)
    with torch.no_grad():
        out, reference = model(**inputs), eager(**inputs)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert len(getattr(out, name)) == 2, name  # one per layer (the IndexError of code that draws them)
        assert_same_attentions(getattr(out, name), getattr(reference, name))
    torch.testing.assert_close(out.logits, reference.logits, rtol=0, atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # the model itself stays on sdpa


@pytest.mark.parametrize("num_beams", [1, 3], ids=["greedy", "beam"])
def test_generate_returns_eagers_attentions_under_sdpa(num_beams):
    model = seq2seq(**VARIANTS["relative-pre"])
    eager = eager_twin(model)
    ids, mask = random_batch(batch=2)
    settings = dict(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_new_tokens=4, min_new_tokens=4,
                    output_attentions=True, return_dict_in_generate=True)
    with torch.no_grad():
        out, reference = model.generate(**settings), eager.generate(**settings)
    assert torch.equal(out.sequences, reference.sequences)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert_same_attentions(getattr(out, name), getattr(reference, name))
    assert len(out.cross_attentions) == 4 and out.cross_attentions[0][1].shape[-1] == ids.shape[1]


def test_output_attentions_set_in_the_config_gives_the_weights_under_sdpa():
    model = seq2seq(output_attentions=True)  # asked once, for every call
    assert model.config._attn_implementation == "sdpa" and model.config.output_attentions
    eager = eager_twin(model)
    ids, mask = random_batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
        reference = eager(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    assert_same_attentions(out.cross_attentions, reference.cross_attentions)
    assert_same_attentions(out.encoder_attentions, reference.encoder_attentions)


def test_calls_without_output_attentions_stay_on_sdpa(monkeypatch):
    sdpa = AttentionInterface._global_mapping["sdpa"]
    calls = []

    def counted_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", counted_sdpa)
    model = seq2seq()
    ids, mask = random_batch()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
        assert len(calls) == 2 + 2 * 2  # every attention of the 2 encoder and 2 decoder layers
        calls.clear()
        with_weights = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True)
        assert not calls  # that call ran eagerly
    torch.testing.assert_close(with_weights.logits, plain.logits, rtol=0, atol=1e-5)


def test_output_attentions_under_a_flash_style_implementation_are_eagers_weights(monkeypatch):
    """Flash attention (a GPU kernel) gets a 2D padding mask, or none, and counts its causal mask from the last key;
    a stand-in registered as flash attention is, with flash attention's masks, shows the eager call gets them right:
    padding, and new target positions over a cache (queries at the end of the keys)."""

    def kernel_stand_in(*args, **kwargs):
        raise AssertionError("a call asking for the weights runs eagerly")

    monkeypatch.setitem(AttentionInterface._global_mapping, "kernel_stand_in", kernel_stand_in)
    monkeypatch.setitem(AttentionMaskInterface._global_mapping, "kernel_stand_in", flash_attention_mask)
    model = seq2seq()
    eager = eager_twin(model)
    model.set_attn_implementation("kernel_stand_in")
    for padded in (True, False):
        ids, mask = random_batch()
        decoder_mask = torch.ones_like(ids[:, :6])
        decoder_mask[1, 1] = 0  # a padded target too: flash attention then gets a 2D mask in the decoder
        if not padded:
            ids, mask, decoder_mask = ids[:1], None, None
        out, reference = two_steps(model, ids, mask, decoder_mask), two_steps(eager, ids, mask, decoder_mask)
        for step, reference_step in zip(out, reference):
            for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
                assert_same_attentions(getattr(step, name), getattr(reference_step, name))
        assert out[1].decoder_attentions[0].shape[-2:] == (3, 6)  # 3 new queries over 6 keys


def two_steps(model, ids, mask, decoder_mask):
    """The first 3 target positions, then the next 3 over the cache of the first."""
    with torch.no_grad():
        first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :3],
                      decoder_attention_mask=None if decoder_mask is None else decoder_mask[:, :3],
                      use_cache=True, output_attentions=True)
        second = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, 3:6],
                       decoder_attention_mask=decoder_mask, past_key_values=first.past_key_values,
                       use_cache=True, output_attentions=True)
    return first, second


# --- torch.export of the forward with the default config ----------------------------------------------------------


def test_torch_export_of_the_forward_works_with_the_default_use_cache():
    model = seq2seq(**VARIANTS["relative-pre"])
    assert model.config.use_cache  # the default, under which the forward returns the decoder's cache
    ids, mask = random_batch()
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    with torch.no_grad():
        program = torch.export.export(model, args=(), kwargs=inputs)
        exported, reference = program.module()(**inputs), model(**inputs)
    torch.testing.assert_close(exported.logits, reference.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(exported.encoder_last_hidden_state, reference.encoder_last_hidden_state, rtol=0,
                               atol=1e-5)
    cache, reference_cache = exported.past_key_values, reference.past_key_values
    assert type(cache) is type(reference_cache) and cache.get_seq_length() == reference_cache.get_seq_length() == 5
    for part in ("self_attention_cache", "cross_attention_cache"):
        for layer, reference_layer in zip(getattr(cache, part).layers, getattr(reference_cache, part).layers):
            torch.testing.assert_close(layer.keys, reference_layer.keys, rtol=0, atol=1e-5)
            torch.testing.assert_close(layer.values, reference_layer.values, rtol=0, atol=1e-5)


# --- generate with a compiled forward over changing batch sizes ---------------------------------------------------


def test_generate_with_a_compiled_forward_stays_within_the_recompile_limit_over_batch_sizes():
    """`model.forward = torch.compile(model.forward)`, then generate for batches of 1, 2, 1 and 3 sources of different
    lengths (beam search: the rows are batch x beams). Compiled with dynamo's `eager` backend: the graphs and
    recompilations are dynamo's, whatever backend then generates code, and inductor's code generation would take
    minutes on a shared CPU (and a C compiler)."""
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is not supported on this Python")
    from torch._dynamo.utils import counters

    model = seq2seq(**VARIANTS["relative-pre"])
    generator = torch.Generator().manual_seed(3)
    batches = [torch.randint(4, 1000, (rows, length), generator=generator) for rows, length in
               ((1, 7), (2, 9), (1, 6), (3, 8))]
    settings = dict(num_beams=2, max_new_tokens=6, min_new_tokens=6)
    with torch.no_grad():
        expected = [model.generate(input_ids=ids, **settings) for ids in batches]
    torch._dynamo.reset()
    counters.clear()
    model.forward = torch.compile(model.forward, backend="eager")
    try:
        with torch.no_grad(), torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            tokens = [model.generate(input_ids=ids, **settings) for ids in batches]
    finally:
        del model.forward
        torch._dynamo.reset()
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)
    # the first step, the second (a past of one token) and the later ones: one graph each, for any batch and length
    assert counters["stats"]["unique_graphs"] <= 4, dict(counters["stats"])


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")  # transformers 5.24's rename
def test_generate_takes_a_cache_under_either_name():
    """generate checks its arguments against the parameters of `prepare_inputs_for_generation`, which the model
    overrides (to mark the sizes above): a cache passed in is still accepted, under either name."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    model = seq2seq()
    ids, mask = random_batch()
    plain = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, num_beams=1)
    for name in ("cache", "past_key_values"):
        given = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, num_beams=1,
                               **{name: EncoderDecoderCache(DynamicCache(), DynamicCache())})
        assert torch.equal(given, plain), name
