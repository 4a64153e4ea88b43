"""vaswani.remote_code.cpu_decoding, the decoding loop `generate` runs on a CPU by default (and after
`for_cpu_inference(model)`): the tokens of transformers' own loop (`cpu_decoding=False`) for greedy and beam search,
on the trained models the project ships and real sentences (random weights would make agreement meaningless), and
transformers' own loop for whatever the path does not do."""

import copy
import json
import pickle
import platform
import threading

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TextStreamer

from helpers import REPO, english_sentences, load_script, run_isolated, spread_weights, tiny_config
import vaswani.remote_code.cpu_decoding as cpu_decoding
from vaswani import VaswaniForConditionalGeneration
from vaswani.serving.cpu_inference import for_cpu_inference


SENTENCES = english_sentences(12)
pytestmark = pytest.mark.usefixtures("one_thread")


def shipped(name: str):
    folder = REPO / "results" / name / "model"
    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def en_de():
    return shipped("multi30k_en_de")


@pytest.fixture
def searches(monkeypatch):
    """The number of searches the CPU path ran (to tell it from transformers' loop)."""
    calls = []
    original = cpu_decoding.search

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(cpu_decoding, "search", counted)
    return calls


def generated(model, batch, **settings) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(**batch, **settings)


def assert_same_tokens(plain, fast, batch, **settings):
    """`fast` decodes as transformers' own loop does on `plain` (`cpu_decoding=False`)."""
    expected, got = generated(plain, batch, cpu_decoding=False, **settings), generated(fast, batch, **settings)
    assert got.tolist() == expected.tolist(), settings
    assert not got.is_inference()  # (the search runs in inference mode): the caller may write into its output


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1},
        {},  # the checkpoint's own: beam 5, length penalty 1.0, up to 80 new tokens
        {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_new_tokens": 40},
        {"num_beams": 3, "num_return_sequences": 2, "no_repeat_ngram_size": 2, "min_new_tokens": 12},
        {"num_beams": 4, "max_new_tokens": 6},  # every beam stopped by the length limit
    ],
)
def test_en_de_decodes_generates_tokens(en_de, searches, settings):
    """The shipped en->de model (sinusoidal positions, post-LN) on Multi30k test sentences, padded in one batch, as
    it decodes by default (no set-up)."""
    plain, tokenizer = en_de
    fast = copy.deepcopy(plain)
    assert_same_tokens(plain, fast, tokenizer(SENTENCES, return_tensors="pt", padding=True), **settings)
    assert len(searches) == 1  # the CPU path ran, not transformers' loop


@pytest.mark.parametrize("through_onednn", [True, False])
def test_the_output_projection_through_either_library_gives_generates_tokens(en_de, searches, monkeypatch,
                                                                              through_onednn):
    """The output projection of two rows or more goes through oneDNN on CPUs other than Intel's (ONEDNN_VOCAB), through
    MKL elsewhere: forced either way at every row count, the tokens are generate's."""
    monkeypatch.setattr(cpu_decoding, "ONEDNN_VOCAB", through_onednn)
    monkeypatch.setattr(cpu_decoding, "ONEDNN_VOCAB_ROWS", 1)
    monkeypatch.setattr(cpu_decoding, "ONEDNN_LAYERS", False)  # (the layers' products: their own test below)
    projections = []
    linear = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(cpu_decoding.torch.ops.mkldnn, "_linear_pointwise",
                        lambda *args: projections.append(args[0].shape) or linear(*args), raising=False)
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    for settings in ({"num_beams": 1}, {"num_beams": 4}):
        assert_same_tokens(plain, fast, batch, max_new_tokens=25, **settings)
    assert bool(projections) == through_onednn
    assert len(searches) == 2


@pytest.mark.parametrize("through_onednn", [True, False])
def test_the_layers_products_through_either_library_give_generates_tokens(en_de, searches, monkeypatch,
                                                                           through_onednn):
    """The layers' products go through oneDNN on AMD's Zen 5 and later (ONEDNN_LAYERS) from ONEDNN_MIN_WORK
    multiply-adds, through MKL elsewhere: forced either way for every product, the tokens are generate's."""
    monkeypatch.setattr(cpu_decoding, "ONEDNN_LAYERS", through_onednn)
    monkeypatch.setattr(cpu_decoding, "ONEDNN_MIN_WORK", 1)
    monkeypatch.setattr(cpu_decoding, "ONEDNN_VOCAB", False)  # (the output projection's own test is above)
    products = []
    linear = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(cpu_decoding.torch.ops.mkldnn, "_linear_pointwise",
                        lambda *args: products.append(args[0].shape) or linear(*args), raising=False)
    plain, tokenizer = en_de
    fast = copy.deepcopy(plain)
    vars(fast).pop("_cpu_decoding_state", None)  # (laid out anew, under the settings above)
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    for settings in ({"num_beams": 1}, {"num_beams": 4}):
        assert_same_tokens(plain, fast, batch, max_new_tokens=25, **settings)
    assert bool(products) == through_onednn
    assert len(searches) == 2
    if through_onednn:  # every product of the encoder and the decoder: more calls than steps times products
        assert len(products) > 2 * plain.config.decoder_layers * 6


def test_beam_search_computes_one_row_per_input_at_its_first_step(en_de, monkeypatch):
    """The beams are alike at the first step: the decoder computes one row per input then, num_beams after."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    rows = []
    original = cpu_decoding.CpuDecoder.step

    def step(self, tokens):
        rows.append(tokens.shape[0])
        return original(self, tokens)

    monkeypatch.setattr(cpu_decoding.CpuDecoder, "step", step)
    assert_same_tokens(plain, fast, tokenizer(SENTENCES[:5], return_tensors="pt", padding=True), num_beams=3,
                       max_new_tokens=5)
    assert rows[:2] == [5, 15]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_cache_grows_as_the_outputs_do_and_attention_reads_it_whole(en_de, monkeypatch, num_beams):
    """The self-attention cache holds `min_span` positions at first and grows by as many when a step needs more
    (through inputs ending and slots being freed in between); attention reads every position it holds, those not yet
    written masked: the tokens stay generate's across several growths."""
    plain, tokenizer = en_de
    fast = copy.deepcopy(plain)
    seen = []  # (position, capacity, positions the cache holds, keys each attention product reads) at each step
    original = cpu_decoding.CpuDecoder.self_attention_inputs

    def inputs(self, position):
        attention = original(self, position)
        seen.append((position, self.capacity, self.cache.shape[4], attention[1][0].shape[-1]))
        return attention

    monkeypatch.setattr(cpu_decoding.CpuDecoder, "self_attention_inputs", inputs)
    assert_same_tokens(plain, fast, tokenizer(SENTENCES[:6], return_tensors="pt", padding=True), num_beams=num_beams,
                       min_new_tokens=40, max_new_tokens=60)
    span = -(-cpu_decoding.MIN_KEYS // num_beams)
    capacities = sorted({capacity for _, capacity, _, _ in seen})
    assert capacities[:3] == [span, 2 * span, 3 * span]
    for position, capacity, held, keys in seen:
        assert position < capacity <= position + span and held == capacity and keys == capacity * num_beams

@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_slots_of_finished_inputs_are_freed_once_their_share_is(en_de, monkeypatch, num_beams):
    """An input whose search is over keeps its slot (its rows computed with the others') only until `FREED_SHARE` of
    the slots are over: the keep that reaches that share moves the inputs still decoding to the first slots. The
    tokens stay generate's."""
    plain, tokenizer = en_de
    fast = copy.deepcopy(plain)
    kept = []  # (slots before, slots after, inputs decoding) at each keep
    original = cpu_decoding.CpuDecoder.keep

    def keep(self, rows, inputs):
        before = self.slot_count
        original(self, rows, inputs)
        kept.append((before, self.slot_count, self.slots.shape[0]))

    monkeypatch.setattr(cpu_decoding.CpuDecoder, "keep", keep)
    assert_same_tokens(plain, fast, tokenizer(SENTENCES, return_tensors="pt", padding=True), num_beams=num_beams,
                       max_new_tokens=30)
    share = cpu_decoding.FREED_SHARE
    assert 0 < share < 1
    assert any(after < before for before, after, _ in kept)  # slots were freed
    for before, after, decoding in kept:
        assert decoding == after < before or (after == before and decoding > before * (1 - share))


@pytest.mark.parametrize("name", ["multi30k_de_en", "samsum"])
def test_relative_position_models_decode_generates_tokens(name, searches):
    """The shipped models with relative positions: de->en (post-LN) and the summarizer (pre-LN, its generation
    config's beam 4, length penalty 1.5 and no_repeat_ngram_size 3), greedy and with their own settings."""
    plain, tokenizer = shipped(name)
    fast = for_cpu_inference(copy.deepcopy(plain))
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    for settings in ({"num_beams": 1, "max_new_tokens": 30}, {"max_new_tokens": 30}):
        assert_same_tokens(plain, fast, batch, **settings)
    assert len(searches) == 2


@pytest.mark.parametrize("position_embedding_type", ["learned", "sinusoidal"])
def test_other_layouts_decode_generates_tokens(position_embedding_type, searches):
    """Learned positions, pre-LN, untied output projection, GELU: every layout the path lays out."""
    torch.manual_seed(0)
    config = tiny_config(
        position_embedding_type=position_embedding_type,
        layer_norm_position="pre",
        tie_word_embeddings=False,
        activation_function="gelu",
    )
    plain = spread_weights(VaswaniForConditionalGeneration(config)).eval()
    fast = for_cpu_inference(copy.deepcopy(plain))
    input_ids = torch.randint(4, config.vocab_size, (3, 9))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    for settings in ({"num_beams": 1}, {"num_beams": 3}):
        assert_same_tokens(plain, fast, batch, max_new_tokens=12, **settings)
    assert len(searches) == 2


@pytest.mark.parametrize("layout", ["multi30k_en_de", "multi30k_de_en", "pre-LN learned"])
def test_the_encoder_on_real_tokens_only_gives_the_models_encoder_output(layout, monkeypatch):
    """`encode` (the position-wise layers on the packed real tokens) against the model's own encoder: equal at every
    real token to float32 rounding, zeros at padding; a batch without padding takes the same path unpacked."""
    if layout == "pre-LN learned":
        torch.manual_seed(0)
        config = tiny_config(position_embedding_type="learned", layer_norm_position="pre", activation_function="gelu")
        model = spread_weights(VaswaniForConditionalGeneration(config)).eval()
        input_ids = torch.randint(4, config.vocab_size, (3, 9))
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, 6:] = 0
        attention_mask[2, :2] = 0  # padding on the left too
    else:
        model, tokenizer = shipped(layout)
        batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    assert not attention_mask.all()
    weights = cpu_decoding.ModelWeights(model)
    with torch.no_grad():
        expected = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        got = cpu_decoding.encode(weights, input_ids, attention_mask)
        real = attention_mask.bool()
        assert torch.allclose(got[real], expected[real], atol=1e-5)
        assert not got[~real].any()
        # the feed-forward network a few rows at a time (as on long inputs) gives the same output (to the rounding
        # of matrix products of other shapes)
        monkeypatch.setattr(cpu_decoding, "FEED_FORWARD_BLOCK", 5 * model.config.encoder_ffn_dim)
        assert torch.allclose(cpu_decoding.encode(weights, input_ids, attention_mask), got, rtol=0, atol=1e-6)
        monkeypatch.undo()
        # the attention in groups of inputs of about the same length, each on its own columns (groups of one: each
        # input on its own tokens, padded on the right or the left; the whole batch as one group) gives the same, to
        # the rounding of attention over other lengths
        for size in (1, 2, len(input_ids)):
            monkeypatch.setattr(cpu_decoding, "ATTENTION_GROUP", size)
            assert torch.allclose(cpu_decoding.encode(weights, input_ids, attention_mask), got, rtol=0, atol=1e-5)
        monkeypatch.undo()
        full = attention_mask[:, :1].bool().all(-1) & attention_mask.bool().all(-1)  # the rows without padding
        unpadded = input_ids[full.nonzero().squeeze(1)] if full.any() else input_ids[:1, :1]
        alone = model.get_encoder()(input_ids=unpadded).last_hidden_state
        assert torch.allclose(cpu_decoding.encode(weights, unpadded, None), alone, atol=1e-5)
        assert torch.allclose(cpu_decoding.encode(weights, unpadded, torch.ones_like(unpadded)), alone, atol=1e-5)


def test_the_encoders_attention_groups_inputs_of_about_the_same_length(monkeypatch):
    """`_length_order`: the inputs sorted by the span of their real tokens (stable), in groups of ATTENTION_GROUP,
    each on the columns where one of its inputs has a token; an input without tokens takes every column."""
    monkeypatch.setattr(cpu_decoding, "ATTENTION_GROUP", 2)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    order, groups = cpu_decoding._length_order(mask)
    assert order.tolist() == [3, 0, 1, 2, 4]
    assert [(g.first, g.last, g.start, g.end) for g in groups] == [(0, 2, 0, 3), (2, 4, 0, 5), (4, 5, 0, 5)]
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    order, groups = cpu_decoding._length_order(mask)
    assert order.tolist() == [0, 3, 2, 1]
    assert [(g.first, g.last, g.start, g.end) for g in groups] == [(0, 2, 0, 6), (2, 4, 0, 6)]


def test_a_call_asking_for_attentions_gets_the_models_own_encoder(en_de, monkeypatch):
    """Hidden states (and attentions) are recorded by the model's encoder: such a call does not take `encode`."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    encoded = []
    monkeypatch.setattr(cpu_decoding, "encode", lambda *args: encoded.append(args) or cpu_decoding_encode(*args))
    batch = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    out = generated(fast, batch, num_beams=1, max_new_tokens=5, output_hidden_states=True, return_dict_in_generate=True)
    assert len(out.encoder_hidden_states) == plain.config.encoder_layers + 1  # the embeddings, then each layer's
    assert encoded == []
    generated(fast, batch, num_beams=1, max_new_tokens=5)
    assert len(encoded) == 1


cpu_decoding_encode = cpu_decoding.encode


def test_an_input_the_model_refuses_gets_the_models_own_error(en_de):
    """Too long for the positions, or ids outside the vocabulary: the model's encoder runs and says so."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    config = plain.config
    too_long = torch.full((1, config.max_position_embeddings + 1), 5)
    unknown_id = torch.tensor([[5, config.vocab_size, 2]])
    errors = {}
    for name, ids in (("too long", too_long), ("unknown id", unknown_id)):
        for model in (plain, fast):
            with pytest.raises((ValueError, IndexError)) as raised:
                generated(model, {"input_ids": ids}, num_beams=1, max_new_tokens=3)
            errors.setdefault(name, []).append((type(raised.value), str(raised.value)))
    assert all(plain_error == fast_error for plain_error, fast_error in errors.values())
    assert "max_position_embeddings" in errors["too long"][0][1]




def test_buffers_kept_between_calls_are_reused_and_never_read_unwritten(en_de, searches):
    """The cache and the logits live in buffers the next call reuses (`Workspace`): calls of other sizes in between
    leave every call with generate's tokens, and positions of the cache read before they are written (attention
    spans at least MIN_KEYS keys) are zeroed, not left as the last call's values or NaN."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    big = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    small = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    assert_same_tokens(plain, fast, big, num_beams=4, max_new_tokens=30)
    buffers = fast._cpu_decoding().workspace.buffers
    kept = {name: buffer.data_ptr() for name, buffer in buffers.items()}
    assert {"cache0", "cache1", "logits", "padded"} <= kept.keys()  # slots were freed: both caches used
    for batch, settings in ((None, None), (small, {"num_beams": 1}), (big, {"num_beams": 1}), (big, {"num_beams": 4})):
        if batch is not None:
            assert_same_tokens(plain, fast, batch, max_new_tokens=30, **settings)
        with torch.inference_mode():  # the buffers are inference tensors (written by the path only)
            for buffer in buffers.values():
                buffer.fill_(float("nan"))
    assert {name: buffer.data_ptr() for name, buffer in buffers.items()} == kept  # nothing allocated anew
    assert len(searches) == 4


def test_calls_from_several_threads_decode_independently(en_de):
    """Each thread has its own buffers: two threads decoding different batches at once get generate's tokens."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    batches = [tokenizer(SENTENCES[:6], return_tensors="pt", padding=True),
               tokenizer(SENTENCES[6:], return_tensors="pt", padding=True)]
    expected = [generated(plain, batch, num_beams=2, max_new_tokens=30, cpu_decoding=False).tolist()
                for batch in batches]
    start, results = threading.Barrier(2), [[], []]

    def decode(index):
        start.wait()
        for _ in range(3):
            results[index].append(generated(fast, batches[index], num_beams=2, max_new_tokens=30).tolist())

    threads = [threading.Thread(target=decode, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [[expected[0]] * 3, [expected[1]] * 3]


def test_other_calls_run_transformers_loop(en_de, searches):
    """Sampling, scores in the output and a streamer are transformers' loop, with what it gives."""
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    batch = tokenizer(SENTENCES[:4], return_tensors="pt", padding=True)
    sampled, fed = [], []
    hook = fast.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    for model in (plain, fast):
        torch.manual_seed(0)
        sampled.append(generated(model, batch, do_sample=True, top_k=20, max_new_tokens=20))
    hook.remove()
    assert torch.equal(sampled[0], sampled[1])
    assert len(fed) > 1 and set(fed) == {1}  # with a cache (the decoder's own): one new token a step
    scored = generated(fast, batch, num_beams=2, output_scores=True, return_dict_in_generate=True, max_new_tokens=10)
    assert scored.sequences_scores is not None

    class Collected(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            pieces.append(text)

    pieces = []
    one = tokenizer(SENTENCES[:1], return_tensors="pt")
    streamed = generated(fast, one, streamer=Collected(tokenizer, skip_special_tokens=True), max_new_tokens=20)
    assert "".join(pieces).strip() == tokenizer.decode(streamed[0], skip_special_tokens=True).strip()
    assert searches == []


def test_weights_changed_after_setup_are_decoded_with(en_de):
    """A model changed in place after for_cpu_inference (fine-tuned, loaded again) decodes with its new weights."""
    plain, tokenizer = en_de
    plain, fast = copy.deepcopy(plain), for_cpu_inference(copy.deepcopy(plain))
    batch = tokenizer(SENTENCES[:8], return_tensors="pt", padding=True)
    before = generated(fast, batch, num_beams=1, max_new_tokens=20)  # lays the weights out
    with torch.no_grad():
        for model in (plain, fast):
            model.model.decoder.layers[0].feed_forward.fc2.weight.neg_()
    assert_same_tokens(plain, fast, batch, num_beams=1, max_new_tokens=20)
    changed = generated(fast, batch, num_beams=1, max_new_tokens=20)
    assert not torch.equal(changed, before)
    # a parameter replaced by another (assigned, not changed in place)
    for model in (plain, fast):
        layer = model.model.decoder.layers[1].encoder_attn.v_proj
        layer.weight = torch.nn.Parameter(layer.weight.detach().flip(0))
    assert_same_tokens(plain, fast, batch, num_beams=1, max_new_tokens=20)
    replaced = generated(fast, batch, num_beams=1, max_new_tokens=20)
    assert not torch.equal(replaced, changed)
    # a module replaced by another
    for model in (plain, fast):
        old = model.model.decoder.layers[2].feed_forward.fc1
        new = torch.nn.Linear(old.in_features, old.out_features)
        with torch.no_grad():
            new.weight.copy_(old.weight.flip(1))
            new.bias.copy_(old.bias)
        model.model.decoder.layers[2].feed_forward.fc1 = new
    assert_same_tokens(plain, fast, batch, num_beams=1, max_new_tokens=20)
    assert not torch.equal(generated(fast, batch, num_beams=1, max_new_tokens=20), replaced)
    # a call given the encoder's output (the path's encoder does not run, nor check the weights): its decoder checks
    # them, not reusing the last call's
    assert fast._cpu_decoding().call.weights is None  # a call's checked weights do not outlive it
    with torch.no_grad():
        for model in (plain, fast):
            model.model.decoder.layers[3].self_attn.out_proj.weight.mul_(-0.5)
        encoded = plain.get_encoder()(**batch)
    given = {"encoder_outputs": encoded, "attention_mask": batch["attention_mask"]}
    assert_same_tokens(plain, fast, given, num_beams=1, max_new_tokens=20)


@pytest.mark.parametrize("through_onednn", [True, False])
def test_a_copy_of_a_model_that_decoded_lays_its_own_weights_out(en_de, monkeypatch, through_onednn):
    """deepcopy and pickle of a model set up for this path after a call (its laid-out weights hold oneDNN's reordered
    output projection on CPUs other than Intel's, which cannot be copied): the copy lays its weights out from its own
    parameters at its first call and decodes generate's tokens."""
    monkeypatch.setattr(cpu_decoding, "ONEDNN_VOCAB", through_onednn)
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    batch = tokenizer(SENTENCES[:4], return_tensors="pt", padding=True)
    assert_same_tokens(plain, fast, batch, num_beams=2, max_new_tokens=15)
    assert (fast._cpu_decoding().weights.vocab_packed is not None) == through_onednn
    for duplicate in (copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
        state = vars(duplicate)["_cpu_decoding_state"]
        assert state.weights is None and state.model is duplicate
        assert_same_tokens(plain, duplicate, batch, num_beams=2, max_new_tokens=15)
        assert state.weights is not fast._cpu_decoding().weights


def test_set_up_twice_or_for_int8_keeps_one_path(en_de, searches):
    plain, tokenizer = en_de
    fast = for_cpu_inference(copy.deepcopy(plain))
    path = fast._cpu_decoding()
    assert for_cpu_inference(fast)._cpu_decoding() is path
    assert "generate" not in vars(fast)  # the model's own generate takes the path: nothing replaced
    int8 = for_cpu_inference(fast, quantization="int8")
    assert not {"generate", "_cpu_decoding_state"} & set(vars(int8))
    generated(int8, tokenizer(SENTENCES[:2], return_tensors="pt", padding=True), num_beams=2, max_new_tokens=5)
    assert len(searches) == 1  # the copy's own decoder, on its int8 weights
    assert int8._cpu_decoding() is not path and int8._cpu_decoding().weights.vocab_int8 is not None


def test_the_guide_pipeline_example_decodes_through_the_path(searches, capsys):
    """The pipeline example of scripts/serving.md's "Serving fast" section, "In PyTorch"."""
    guide = (REPO / "scripts" / "serving.md").read_text(encoding="utf-8")
    section = guide.split("### In PyTorch", 1)[1].split("\n### ", 1)[0]
    example = section.split("```python\n")[2].split("```", 1)[0]
    exec(compile(example, "scripts/serving.md (Serving fast, In PyTorch, a pipeline)", "exec"), {})
    assert len(searches) == 1 and "'translation_text': 'Ein Mann" in capsys.readouterr().out


def test_the_demo_decodes_through_the_path_unless_told_not_to(searches, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed: pip install -e '.[plot]'")
    demo = load_script("demo")
    texts = ["A man is riding a horse.", "Two dogs play in the snow."]
    fast = demo.main(["--text", *texts, "--output_file", str(tmp_path / "fast.png")])
    assert len(searches) == 2  # the translations, then the first one again for its attention map
    plain = demo.main(["--text", *texts, "--output_file", str(tmp_path / "plain.png"), "--no-cpu_decoding"])
    assert len(searches) == 2 and fast == plain


# --- the default, and the ways to turn it off ------------------------------------------------------------------------


def test_the_path_is_the_default_and_can_be_turned_off(en_de, searches):
    """On a CPU the model's own generate takes the path; `cpu_decoding=False`, or the generation config's
    `cpu_decoding = False`, keeps transformers' loop; a value other than True or False is refused by name."""
    plain, tokenizer = en_de
    model = copy.deepcopy(plain)
    batch = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    by_default = generated(model, batch, num_beams=2, max_new_tokens=12)
    assert len(searches) == 1
    assert torch.equal(generated(model, batch, num_beams=2, max_new_tokens=12, cpu_decoding=False), by_default)
    model.generation_config.cpu_decoding = False
    assert torch.equal(generated(model, batch, num_beams=2, max_new_tokens=12), by_default)
    assert len(searches) == 1
    assert torch.equal(generated(model, batch, num_beams=2, max_new_tokens=12, cpu_decoding=True), by_default)
    assert len(searches) == 2  # the call's argument wins over the config
    with pytest.raises(ValueError, match=r"cpu_decoding must be True or False, got 'yes'"):
        generated(model, batch, cpu_decoding="yes")


@pytest.fixture
def mallopt_calls(monkeypatch):
    """The calls the CPU path makes to glibc's mallopt (recorded, not made), in a process whose malloc settings are
    not decided yet and whose environment gives none."""
    calls = []
    monkeypatch.setattr(cpu_decoding.FreedMemory, "decided", False)
    monkeypatch.setattr(cpu_decoding, "_mallopt", lambda: lambda parameter, value: calls.append((parameter, value)) or 1)
    for name in cpu_decoding.MALLOC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    return calls


GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
KEPT = [(cpu_decoding.M_MMAP_THRESHOLD, cpu_decoding.KEPT_ALLOCATION_BYTES),
        (cpu_decoding.M_TRIM_THRESHOLD, cpu_decoding.KEPT_FREE_BYTES)]


def test_the_paths_first_call_keeps_freed_memory_once_per_process(en_de, mallopt_calls):
    """The default path's first call has glibc keep the memory a call frees (pages given back fault again in the
    next call); later calls, and transformers' loop, change nothing."""
    plain, tokenizer = en_de
    model = copy.deepcopy(plain)
    batch = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    generated(model, batch, max_new_tokens=4, cpu_decoding=False)
    assert mallopt_calls == [] and not cpu_decoding.FreedMemory.decided
    generated(model, batch, max_new_tokens=4)
    generated(copy.deepcopy(plain), batch, num_beams=2, max_new_tokens=4)
    assert mallopt_calls == (KEPT if GLIBC else []) and cpu_decoding.FreedMemory.decided


@pytest.mark.parametrize("leave", ["environment", "tunables", "leave_freed_memory", "for_cpu_inference"])
def test_malloc_settings_of_the_users_are_left_as_they_are(en_de, mallopt_calls, monkeypatch, leave):
    """Malloc settings given in the environment (glibc reads MALLOC_TRIM_THRESHOLD_ and the like, or its tunables),
    `leave_freed_memory()` or `for_cpu_inference(model, release_freed_memory=True)`: the path changes nothing."""
    plain, tokenizer = en_de
    model = copy.deepcopy(plain)
    if leave == "environment":
        monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    elif leave == "tunables":
        monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072")
    elif leave == "leave_freed_memory":
        cpu_decoding.leave_freed_memory()
    else:
        for_cpu_inference(model, release_freed_memory=True)
    generated(model, tokenizer(SENTENCES[:2], return_tensors="pt", padding=True), max_new_tokens=4)
    assert mallopt_calls == [] and cpu_decoding.FreedMemory.decided
    if leave in ("environment", "tunables"):
        assert cpu_decoding.keep_freed_memory() is False and mallopt_calls == []


def test_a_model_cast_or_in_training_mode_after_a_call_decodes_as_transformers_loop(en_de, searches):
    """After a first call on the path: cast to bfloat16 (or put in training mode), the model runs transformers' loop
    with what that loop gives; cast back to float32, the path again, with the new tensors' weights."""
    plain, tokenizer = en_de
    model = copy.deepcopy(plain)
    batch = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    first = generated(model, batch, num_beams=2, max_new_tokens=10)
    assert len(searches) == 1
    model.to(torch.bfloat16)
    reference = copy.deepcopy(plain).to(torch.bfloat16)
    expected = generated(reference, batch, num_beams=2, max_new_tokens=10, cpu_decoding=False)
    assert torch.equal(generated(model, batch, num_beams=2, max_new_tokens=10), expected)
    assert len(searches) == 1
    model.to(torch.float32)  # (weights rounded through bfloat16: other values than the first call's)
    assert_same_tokens(model, model, batch, num_beams=2, max_new_tokens=10)
    assert len(searches) == 2
    model.train()
    torch.manual_seed(0)
    trained_mode = generated(model, batch, num_beams=1, max_new_tokens=10)
    assert len(searches) == 2 and trained_mode.shape[0] == 3
    assert first.shape[0] == 3


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tokenizer):
    """A tiny seq2seq checkpoint saved with this code: the folder carries the CPU decoder's files."""
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))).eval()
    folder = tmp_path_factory.mktemp("checkpoint")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_checkpoint_folder_alone_decodes_on_its_own_cpu_path(tiny_checkpoint):
    """Where this package cannot be imported, a model loaded from the folder with trust_remote_code decodes on the
    CPU path of the checkpoint's own copy of the decoder, with the tokens of transformers' loop."""
    assert {"cpu_decoding.py", "search.py", "proc_files.py", "pipeline_tasks.py"} <= {
        path.name for path in tiny_checkpoint.iterdir()}
    stdout = run_isolated(f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tiny_checkpoint)!r}, trust_remote_code=True).eval()
        import sys
        decoder = sys.modules[type(model._cpu_decoding()).__module__]  # (imported with the model's first call)
        searches = []
        search = decoder.search
        decoder.search = lambda *args: searches.append(1) or search(*args)
        batch = {{"input_ids": torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]]),
                 "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])}}
        rows = {{}}
        with torch.no_grad():
            for beams in (1, 3):
                rows[beams] = [model.generate(**batch, num_beams=beams, max_new_tokens=10).tolist(),
                               model.generate(**batch, num_beams=beams, max_new_tokens=10, cpu_decoding=False).tolist()]
        print(json.dumps({{"rows": rows, "searches": len(searches), "module": decoder.__name__,
                          "malloc_decided": decoder.FreedMemory.decided}}))
        """)
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["module"].startswith("transformers_modules.") and result["searches"] == 2
    assert result["malloc_decided"]  # its own decoder kept the freed memory (or left the environment's settings)
    for default, loop in result["rows"].values():
        assert default == loop


def test_for_cpu_inference_sets_up_a_model_of_the_checkpoints_own_class(tiny_checkpoint, tokenizer):
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    own_class = get_class_from_dynamic_module("modeling_vaswani.VaswaniForConditionalGeneration", str(tiny_checkpoint))
    assert own_class is not VaswaniForConditionalGeneration and own_class.__module__.startswith("transformers_modules.")
    model = own_class.from_pretrained(tiny_checkpoint).eval()
    fast = for_cpu_inference(model)
    assert fast is model and "generate" not in vars(fast)  # its own class decodes on the path by itself
    assert type(fast._cpu_decoding()).__module__.startswith("transformers_modules.")
    batch = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    assert_same_tokens(model, fast, batch, num_beams=2, max_new_tokens=10)


def test_a_call_for_a_decoding_method_from_the_hub_is_transformers_own(en_de, searches, monkeypatch):
    """Contrastive search, DoLa, group and constrained beam search are methods transformers loads from the Hub: such
    a call reaches transformers' generate as if the path were not there (which loads the method, or says why not)."""
    plain, tokenizer = en_de
    model = copy.deepcopy(plain)
    vars(model).pop("_cpu_decoding_state", None)  # (made at its first call, holding the generate of that time)
    batch = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    handed = []
    import transformers.generation.utils as generation_utils
    original = generation_utils.GenerationMixin.generate

    def recording(self, *args, **kwargs):
        handed.append(kwargs.get("custom_generate"))
        raise RuntimeError("stop here")

    monkeypatch.setattr(generation_utils.GenerationMixin, "generate", recording)
    for settings in ({"penalty_alpha": 0.6, "top_k": 4}, {"num_beams": 4, "num_beam_groups": 2},
                     {"num_beams": 2, "force_words_ids": [[5]]}, {"dola_layers": "low"}):
        with pytest.raises(RuntimeError, match="stop here"):
            model.generate(**batch, max_new_tokens=3, **settings)
    assert handed == [None] * 4 and searches == []
    monkeypatch.setattr(generation_utils.GenerationMixin, "generate", original)
