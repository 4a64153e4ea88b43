"""`generate()` with the models of modeling/remote_code/modeling_vaswani.py: the cache, greedy decoding, beam search and
sampling."""

import functools

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache
from transformers.testing_utils import CaptureLogger, LoggingLevel
from transformers.utils import logging

from helpers import random_batch, tiny_config
from vaswani import VaswaniForConditionalGeneration
from vaswani.remote_code.modeling_vaswani import CACHE_FIELD


VARIANTS = [
    dict(),
    dict(layer_norm_position="pre", position_embedding_type="learned"),
    dict(position_embedding_type="relative", relative_attention_max_distance=4, encoder_layers=1, decoder_layers=3),
]


VOCAB = 48


def model_with(**overrides) -> VaswaniForConditionalGeneration:
    return _copy_trained(tuple(sorted(overrides.items())))


@functools.cache
def _copy_trained(overrides: tuple) -> VaswaniForConditionalGeneration:
    """A tiny model trained for a few seconds to copy its input: an untrained one repeats a single token, which
    would make comparisons between decoding paths meaningless."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=VOCAB, **dict(overrides)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        source = torch.randint(4, VOCAB, (32, 8), generator=generator)
        labels = torch.cat([source, torch.full((32, 1), model.config.eos_token_id)], dim=1)
        model(input_ids=source, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def batch():
    return random_batch(vocab=VOCAB)


def test_decoder_start_token_is_in_both_configs():
    model = model_with()
    assert model.config.decoder_start_token_id == 1
    assert model.generation_config.decoder_start_token_id == 1
    ids, mask = batch()
    generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5)
    assert (generated[:, 0] == 1).all()


@pytest.mark.parametrize("overrides", VARIANTS, ids=["sinusoidal", "pre-learned", "relative-1+3"])
def test_cached_and_uncached_decoding_give_identical_tokens(overrides):
    model = model_with(**overrides)
    ids, mask = batch()
    for settings in (dict(), dict(num_beams=3), dict(num_beams=2, length_penalty=0.5, early_stopping=True)):
        cached = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, use_cache=True, **settings)
        uncached = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, use_cache=False, **settings)
        assert torch.equal(cached, uncached), settings
        assert len(set(cached[0, 1:].tolist())) > 2  # the outputs are varied enough for this to mean something


def test_step_by_step_logits_equal_the_full_forward():
    model = model_with(position_embedding_type="relative", relative_attention_max_distance=3)
    ids, mask = batch()
    target = torch.randint(4, VOCAB, (3, 7))
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    cache, steps = None, []
    for position in range(target.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=mask,
            decoder_input_ids=target[:, position : position + 1],
            past_key_values=cache,
            use_cache=True,
        )
        cache = getattr(out, CACHE_FIELD)
        steps.append(out.logits)
    assert isinstance(cache, EncoderDecoderCache)
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5


def test_self_attention_cache_grows_and_cross_attention_is_computed_once():
    model = model_with()
    layer = model.model.decoder.layers[0]
    self_key_lengths, cross_key_calls = [], []
    layer.self_attn.k_proj.register_forward_hook(lambda module, args, out: self_key_lengths.append(args[0].shape[1]))
    layer.encoder_attn.k_proj.register_forward_hook(lambda module, args, out: cross_key_calls.append(args[0].shape))
    ids, mask = batch()
    out = model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, return_dict_in_generate=True
    )
    assert self_key_lengths == [1] * 6  # one new key per step; the earlier ones come from the cache
    assert cross_key_calls == [torch.Size([3, 9, 32])]  # the encoder output is projected once per input
    cache = getattr(out, CACHE_FIELD)
    assert cache.self_attention_cache.get_seq_length() == 6
    assert cache.cross_attention_cache.get_seq_length() == 9


def test_beam_search_settings_are_used():
    model = model_with()
    ids, mask = batch()
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, num_beams=4, return_dict_in_generate=True,
                  output_scores=True)
    short = model.generate(**common, length_penalty=0.0)
    long = model.generate(**common, length_penalty=2.0)
    assert not torch.allclose(short.sequences_scores, long.sequences_scores)
    several = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, num_beams=4, num_return_sequences=3)
    assert several.shape[0] == 9


def test_beam_search_without_gathering_cross_attention_gives_the_plain_results(monkeypatch):
    # the model gathers only the self-attention cache between beam steps; gathering both (transformers' default for
    # an EncoderDecoderCache) must give the same beams, scores and final cache
    model = model_with()
    ids, mask = batch()
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, num_beams=4, num_return_sequences=2,
                    return_dict_in_generate=True, output_scores=True, length_penalty=0.6)
    gathered = []
    plain_reorder = EncoderDecoderCache.reorder_cache
    monkeypatch.setattr(EncoderDecoderCache, "reorder_cache",
                        lambda cache, beam_idx: (gathered.append(beam_idx), plain_reorder(cache, beam_idx)))
    fast = model.generate(**settings)
    assert not gathered  # the model's own reordering ran, not the cache's
    monkeypatch.setattr(type(model), "_reorder_cache",
                        lambda self, cache, beam_idx: (cache.reorder_cache(beam_idx), cache)[1])
    plain = model.generate(**settings)
    assert gathered  # ... and now the plain one did
    # beams really moved between inputs' slots, or the test would prove nothing
    assert any(not torch.equal(index, torch.arange(len(index))) for index in gathered)
    assert torch.equal(fast.sequences, plain.sequences)
    assert torch.equal(fast.sequences_scores, plain.sequences_scores)
    for fast_layer, plain_layer in zip(getattr(fast, CACHE_FIELD).self_attention_cache.layers,
                                       getattr(plain, CACHE_FIELD).self_attention_cache.layers):
        assert torch.equal(fast_layer.keys, plain_layer.keys) and torch.equal(fast_layer.values, plain_layer.values)


def test_sampling_is_random_and_reproducible_with_a_seed():
    model = model_with()
    ids, mask = batch()
    runs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        runs.append(
            model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=50, max_new_tokens=10,
                           min_new_tokens=10)
        )
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_the_cache_is_taken_under_either_name():
    # transformers 5.24 passes the cache to forward as `cache`, 5.23 as `past_key_values`: a model that reads only
    # one name decodes every step of the other version without its history
    model = model_with()
    ids, mask = batch()
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    target = torch.tensor([[1, 7, 9, 11]] * ids.shape[0])
    full = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=target).logits
    for name in ("past_key_values", "cache"):
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        steps = [
            model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=target[:, i : i + 1],
                  use_cache=True, **{name: cache}).logits
            for i in range(target.shape[1])
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5, msg=name)
    both = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with pytest.raises(ValueError, match="past_key_values.*cache"):
        model.model.decoder(input_ids=target, encoder_hidden_states=encoder_outputs.last_hidden_state,
                            past_key_values=both, cache=EncoderDecoderCache(DynamicCache(), DynamicCache()))


def test_decoding_gives_no_deprecation_warning():
    # the outputs name the cache as the installed transformers does (`cache` from 5.24 on): the old name still works
    # there, but warns on a user's first generate
    model = model_with()
    ids, mask = batch()
    logging.warning_once.cache_clear()  # a warning given earlier in the session would not show again
    # the suite runs at "error" (conftest.py): warnings are let through here only
    with LoggingLevel(logging.WARNING), CaptureLogger(logging.get_logger("transformers")) as captured:
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, num_beams=2,
                             return_dict_in_generate=True)
    assert isinstance(getattr(out, CACHE_FIELD), EncoderDecoderCache)
    assert "deprecated" not in captured.out


def test_a_streamer_decodes_greedily_where_the_checkpoint_defaults_to_beams():
    """Checkpoints default to beam search (as scored); a streamer needs one growing hypothesis: without a beam
    count, the call decodes greedily, and an explicit beam count still goes to transformers (which refuses it)."""
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.chunks = []

        def put(self, value):
            self.chunks.append(value.tolist())

        def end(self):
            self.chunks.append("end")

    model = model_with()
    model.generation_config.num_beams, model.generation_config.length_penalty = 4, 0.6
    source = torch.randint(4, VOCAB, (1, 8), generator=torch.Generator().manual_seed(3))
    streamer = Collect()
    streamed = model.generate(input_ids=source, streamer=streamer, max_new_tokens=10)
    assert streamed.tolist() == model.generate(input_ids=source, num_beams=1, max_new_tokens=10).tolist()
    assert streamer.chunks[-1] == "end" and len(streamer.chunks) == streamed.shape[1] + 1
    assert model.generation_config.num_beams == 4  # the checkpoint's default is untouched
    with pytest.raises(ValueError, match="beam"):
        model.generate(input_ids=source, streamer=Collect(), num_beams=2, max_new_tokens=10)


def test_beam_search_projects_each_distinct_encoder_output_once():
    """Beam search repeats each encoder output once per beam; the cross-attention keys/values are projected once per
    distinct output and repeated, which must give exactly what projecting every copy gives."""
    from vaswani.remote_code.modeling_vaswani import repeated_rows

    states = torch.randn(3, 5, 8)
    assert repeated_rows(states.repeat_interleave(4, dim=0)) == 4
    assert repeated_rows(states) == 1
    assert repeated_rows(torch.cat([states[:1]] * 2 + [states[1:2]] * 3)) == 1  # groups of unequal size
    assert repeated_rows(torch.cat([states[:1], states[:1], states[1:2], states[2:3]])) == 1
    model = model_with()
    source = torch.randint(4, VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
    out = model.generate(input_ids=source, num_beams=3, max_new_tokens=6, return_dict_in_generate=True)
    cache = getattr(out, CACHE_FIELD).cross_attention_cache
    encoder_output = model.get_encoder()(input_ids=source).last_hidden_state.repeat_interleave(3, dim=0)
    attention = model.model.decoder.layers[0].encoder_attn
    expected = attention._split_heads(attention.k_proj(encoder_output))
    assert torch.equal(cache.layers[0].keys, expected)


# --- compiled decoding: fullgraph, a static cache -----------------------------------------------------------------


def compiled_generation_config(model, **settings):
    """Generation with a static cache and transformers' compiled forward (fullgraph, the `eager` backend: dynamo
    captures the whole step, and a graph break is an error as under inductor, without inductor's code generation,
    which takes minutes on a shared CPU), also on a CPU (where transformers compiles only when told)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import CompileConfig

    config = GenerationConfig.from_model_config(model.config)
    config.update(cache_implementation="static", compile_config=CompileConfig(fullgraph=True, backend="eager"),
                  **settings)
    config.compile_config._compile_all_devices = True
    return config


def test_generation_with_a_static_cache_and_a_compiled_forward_gives_eagers_tokens_in_one_graph():
    from torch._dynamo.utils import counters

    model = model_with(**VARIANTS[2])  # relative positions: their offset in a static cache, beside cross-attention
    input_ids, attention_mask = batch()
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        compiled = model.generate(input_ids, attention_mask=attention_mask,
                                  generation_config=compiled_generation_config(model, max_new_tokens=8, num_beams=1))
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]  # every decoding step, one graph
    eager = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=1)
    assert torch.equal(compiled, eager)


def test_the_forward_compiles_with_fullgraph_and_gives_eagers_logits():
    model = model_with(**VARIANTS[2])  # relative positions: the bias, and the cross-attention over a cache
    input_ids, attention_mask = batch()
    labels = torch.randint(4, VOCAB, (3, 6), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits,
                                   model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits)
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        step = dict(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=labels[:, :1],
                    past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()), use_cache=True)
        torch.testing.assert_close(compiled(**step).logits, model(**{**step, "past_key_values": EncoderDecoderCache(
            DynamicCache(), DynamicCache())}).logits)


def test_a_static_cache_longer_than_the_positions_is_named():
    model = model_with()
    input_ids, attention_mask = batch()
    too_long = model.config.max_position_embeddings + 1
    # refused before decoding starts (issue 67), where it was refused when the static cache was made
    with pytest.raises(ValueError, match="(static cache holds|more than this model can generate).*"
                                         "max_position_embeddings"):
        model.generate(input_ids, attention_mask=attention_mask, cache_implementation="static", num_beams=1,
                       max_new_tokens=too_long, min_new_tokens=too_long)


def test_a_generation_configs_max_new_tokens_beyond_the_positions_is_refused_before_decoding(tokenizer, monkeypatch):
    """`max_new_tokens: 1e9` in a generation config decoded up to the position limit and was refused only there."""
    from vaswani.remote_code.modeling_vaswani import VaswaniDecoder
    from vaswani.pipelines import pipeline

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en",
                                                        target_lang="de")).eval()
    model.generation_config.max_new_tokens = 10**9
    steps = []
    forward = VaswaniDecoder.forward
    monkeypatch.setattr(VaswaniDecoder, "forward", lambda self, *args, **kwargs: steps.append(1) or forward(
        self, *args, **kwargs))
    message = (r"^max_new_tokens=1000000000 \(the model's generation config\) is more than this model can generate: "
               r"max_position_embeddings=128 leaves room for at most 127 new tokens after the start token\.$")
    input_ids, attention_mask = random_batch(vocab=len(tokenizer))
    for cpu_decoding in (True, False):
        with pytest.raises(ValueError, match=message):
            model.generate(input_ids, attention_mask=attention_mask, cpu_decoding=cpu_decoding)
    with pytest.raises(ValueError, match=message):
        pipeline("translation", model=model, tokenizer=tokenizer)("A man is riding a horse.")
    assert not steps
    assert model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3).shape[1] <= 4  # a call's own
