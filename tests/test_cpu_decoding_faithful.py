"""The CPU decoder runs only for a model it reproduces exactly (vaswani.remote_code.cpu_decoding.unreproduced): a model
changed in a way its forward honours and the decoder would not (hooks, a forward replaced or overridden, a module of
another class, an attention function of one's own, autocast) decodes through transformers' loop, with that loop's
tokens, and says why once, at info level. Each change here changes the tokens of transformers' loop, so that a
default path that ignored it would give other tokens; the model as the project builds or sets it up keeps the
decoder."""

import copy
import logging

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from helpers import REPO, english_sentences, spread_weights, tiny_config
import vaswani.remote_code.cpu_decoding as cpu_decoding
from vaswani import VaswaniForConditionalGeneration
from vaswani.remote_code.modeling_vaswani import VaswaniFeedForward
from vaswani.serving.cpu_inference import OneDNNLinear, for_cpu_inference


pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = {"num_beams": 1, "max_new_tokens": 12}
SAID = "not the CPU decoder"
EN_DE = REPO / "results" / "multi30k_en_de" / "model"


@pytest.fixture(scope="module")
def plain():
    """The shipped en->de model: a tiny model of random weights gives one token over and over, which most changes
    leave as it is; this one's tokens show a change (an ablation of a layer: "........")."""
    return AutoModelForSeq2SeqLM.from_pretrained(EN_DE).eval()


# Captions of the kind the shipped model was trained on, written here (not read from the shared data, which a clone
# elsewhere may not have: the changes below must show on these very sentences).
SENTENCES = ["A man in a blue shirt is riding a bicycle down the street.", "Two dogs play in the snow.",
             "A little girl in a pink dress climbs into a wooden playhouse."]


@pytest.fixture(scope="module")
def batch():
    return AutoTokenizer.from_pretrained(EN_DE)(SENTENCES, return_tensors="pt", padding=True)


@pytest.fixture(scope="module")
def unchanged(plain, batch):
    """The tokens of the model as built (which the decoder gives: `test_the_model_as_built_keeps_the_decoder`)."""
    return generated(plain, batch)


@pytest.fixture(scope="module")
def tiny():
    """A tiny model, for what torch.compile traces (a few seconds)."""
    torch.manual_seed(0)
    return spread_weights(VaswaniForConditionalGeneration(tiny_config())).eval()


@pytest.fixture(scope="module")
def tiny_batch():
    input_ids = torch.randint(4, 1000, (3, 9), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@pytest.fixture
def searches(monkeypatch):
    """The searches the CPU decoder ran (to tell it from transformers' loop)."""
    calls = []
    original = cpu_decoding.search
    monkeypatch.setattr(cpu_decoding, "search", lambda *args: calls.append(1) or original(*args))
    return calls


@pytest.fixture
def said(caplog):
    """The lines the CPU decoder logs about running transformers' loop instead, with their levels."""
    caplog.set_level(logging.INFO, logger=cpu_decoding.logger.name)
    return lambda: [(record.levelno, record.getMessage()) for record in caplog.records if SAID in record.getMessage()]


def generated(model, batch, **settings) -> list[list[int]]:
    with torch.no_grad():
        return model.generate(**batch, **{**SETTINGS, **settings}).tolist()


def assert_runs_the_loop(model, batch, searches, said, reason: str, unchanged=None, calls=None,
                         **settings) -> list[list[int]]:
    """The default generate of `model` gives the tokens of transformers' loop on it (`cpu_decoding=False`), through
    that loop (no search of the decoder), and says why once, at info level, naming `reason`; where `unchanged` (the
    tokens of the model as built) is given, the change shows in the loop's tokens; where `calls` (a list a hook or a
    patched forward appends to) is given, the default call made as many as the loop's."""
    loop = generated(model, batch, cpu_decoding=False, **settings)
    loop_calls = len(calls) if calls is not None else 0
    before = len(searches)
    default = generated(model, batch, **settings)
    if calls is not None:
        assert loop_calls > 0 and len(calls) == 2 * loop_calls
    assert generated(model, batch, **settings) == default  # (a second call: nothing more said)
    assert default == loop
    assert len(searches) == before
    lines = said()
    assert len(lines) == 1 and lines[0][0] == logging.INFO, lines
    assert reason in lines[0][1], lines
    if unchanged is not None:
        assert loop != unchanged  # a path that ignored the change would have given these
    return default


def test_the_model_as_built_keeps_the_decoder(plain, batch, unchanged, searches, said):
    model = copy.deepcopy(plain)
    assert cpu_decoding.unreproduced(model) is None
    assert generated(model, batch) == unchanged == generated(model, batch, cpu_decoding=False)
    assert len(searches) == 1 and said() == []


def _zero_output(module, args, output):
    return output * 0


@pytest.mark.parametrize("register", [
    lambda layer: layer.register_forward_hook(_zero_output),
    lambda layer: layer.register_forward_hook(lambda module, args, kwargs, output: output * 0, with_kwargs=True),
    lambda layer: layer.register_forward_hook(_zero_output, always_call=True),
    lambda layer: layer.register_forward_pre_hook(lambda module, args: (args[0] * 0, *args[1:])),
    lambda layer: layer.register_forward_pre_hook(
        lambda module, args, kwargs: ((args[0] * 0, *args[1:]), kwargs), with_kwargs=True),
], ids=["forward hook", "with kwargs", "always called", "pre-hook", "pre-hook with kwargs"])
def test_a_hook_on_a_module_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said, register):
    """An ablation (a decoder layer's output or input zeroed): the hook is called as often as by the loop."""
    model = copy.deepcopy(plain)
    calls = []
    layer = model.get_decoder().layers[0]
    layer.register_forward_pre_hook(lambda module, args: calls.append(1))  # (counts the layer's calls)
    register(layer)
    assert_runs_the_loop(model, batch, searches, said, "hook on model.decoder.layers.0", unchanged, calls)


def test_a_hook_on_the_model_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said):
    model = copy.deepcopy(plain)

    def favour_token_7(module, args, output):
        output.logits[..., 7] += 100.0

    model.register_forward_hook(favour_token_7)
    tokens = assert_runs_the_loop(model, batch, searches, said, "forward hook on the model (", unchanged)
    assert {token for row in tokens for token in row[1:]} <= {7, plain.config.eos_token_id}


@pytest.mark.parametrize("kind", ["forward hook", "forward pre-hook"])
def test_a_hook_for_every_module_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said, kind):
    model = copy.deepcopy(plain)
    target = model.get_decoder().layers[1].feed_forward
    globals_ = torch.nn.modules.module
    if kind == "forward hook":
        handle = globals_.register_module_forward_hook(lambda module, args, output: output * 0 if module is target
                                                       else None)
    else:
        handle = globals_.register_module_forward_pre_hook(lambda module, args: (args[0] * 0,) if module is target
                                                           else None)
    try:
        assert_runs_the_loop(model, batch, searches, said, f"a {kind} registered for every module", unchanged)
    finally:
        handle.remove()
    assert cpu_decoding.unreproduced(model) is None


@pytest.mark.parametrize("attribute", ["forward", "_call_impl"])
def test_a_forward_set_on_a_module_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said, attribute):
    model = copy.deepcopy(plain)
    feed_forward = model.get_decoder().layers[1].feed_forward
    setattr(feed_forward, attribute, lambda hidden_states: torch.zeros_like(hidden_states))
    assert_runs_the_loop(model, batch, searches, said, f"{attribute} set on model.decoder.layers.1.feed_forward",
                         unchanged)


def test_a_forward_set_on_the_model_is_what_generate_calls(plain, batch, unchanged, searches, said):
    """`model.forward = torch.compile(model.forward)`, or any function in its place, is called by generate (the loop
    calls the model, whose call reaches the instance's forward), as often as with cpu_decoding=False."""
    model = copy.deepcopy(plain)
    calls, forward = [], model.forward

    def patched(*args, **kwargs):
        calls.append(1)
        output = forward(*args, **kwargs)
        output.logits[..., 7] += 100.0
        return output

    model.forward = patched
    assert_runs_the_loop(model, batch, searches, said, "forward set on the model (", unchanged, calls)


def test_a_forward_compiled_by_torch_compile_is_what_generate_runs(tiny, tiny_batch, searches, said):
    """A real torch.compile (dynamo, with a backend that keeps each graph it is handed and runs it as traced): one
    call, which compiles (the loop's tokens: those of the model uncompiled)."""
    model, batch = copy.deepcopy(tiny), tiny_batch
    loop = generated(tiny, batch, cpu_decoding=False)
    graphs = []

    def keeping(graph, inputs):
        graphs.append(graph)
        return graph.forward

    model.forward = torch.compile(model.forward, backend=keeping)
    try:
        assert generated(model, batch) == loop
    finally:
        torch._dynamo.reset()
    assert graphs and searches == []
    assert len(said()) == 1 and "forward set on the model" in said()[0][1]


@pytest.mark.parametrize("how", ["module.compile()", "torch.compile(module)"])
def test_a_module_compiled_runs_as_in_transformers_loop(tiny, tiny_batch, searches, said, how):
    model, batch = copy.deepcopy(tiny), tiny_batch
    unchanged = generated(tiny, batch)
    graphs = []

    def keeping(graph, inputs):
        graphs.append(graph)
        return graph.forward

    layer = model.get_decoder().layers[1]
    if how == "module.compile()":
        layer.feed_forward.compile(backend=keeping)
        reason = "model.decoder.layers.1.feed_forward compiled in place"
    else:
        layer.feed_forward = torch.compile(layer.feed_forward, backend=keeping)
        reason = "model.decoder.layers.1.feed_forward is a torch._dynamo.eval_frame.OptimizedModule"
    try:
        assert assert_runs_the_loop(model, batch, searches, said, reason) == unchanged
        assert graphs  # the compiled module ran
    finally:
        torch._dynamo.reset()


class FavouringToken7(VaswaniForConditionalGeneration):
    def forward(self, *args, **kwargs):
        output = super().forward(*args, **kwargs)
        output.logits[..., 7] += 100.0
        return output


class ZeroFeedForward(VaswaniFeedForward):
    def forward(self, hidden_states):
        return torch.zeros_like(hidden_states)


class FlippedLinear(nn.Linear):  # as a quantized or custom Linear of another library, bitsandbytes' among them
    def forward(self, input):
        return super().forward(input) * -3.0


class FlippedOneDNNLinear(OneDNNLinear):
    def forward(self, input):
        return super().forward(input) * -3.0


def _layer_fc2(model):
    return model.get_decoder().layers[1].feed_forward.fc2


@pytest.mark.parametrize("subclass, find, reason", [
    (FavouringToken7, lambda model: model, "the model's class FavouringToken7 defines forward"),
    (ZeroFeedForward, lambda model: model.get_decoder().layers[1].feed_forward,
     "model.decoder.layers.1.feed_forward is a test_cpu_decoding_faithful.ZeroFeedForward"),
    (FlippedLinear, _layer_fc2, "model.decoder.layers.1.feed_forward.fc2 is a test_cpu_decoding_faithful.FlippedLinear"),
    (FlippedOneDNNLinear, _layer_fc2, "fc2 is a test_cpu_decoding_faithful.FlippedOneDNNLinear"),
], ids=["the model", "a feed-forward network", "a Linear", "the project's oneDNN Linear"])
def test_a_subclass_overriding_forward_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said,
                                                                     subclass, find, reason):
    model = copy.deepcopy(plain)
    find(model).__class__ = subclass
    assert_runs_the_loop(model, batch, searches, said, reason, unchanged)


def test_a_subclass_of_a_linear_runs_as_in_transformers_loop_whatever_it_overrides(plain, batch, unchanged, searches,
                                                                                    said):
    """Its class may compute another function by means other than forward: only the exact classes are laid out."""

    class MarkedLinear(nn.Linear):
        pass

    model = copy.deepcopy(plain)
    _layer_fc2(model).__class__ = MarkedLinear
    assert assert_runs_the_loop(model, batch, searches, said, "fc2 is a test_cpu_decoding_faithful.") == unchanged


class LoraLinear(nn.Module):
    """As PEFT's LoRA layer, not merged: the base layer and a low-rank update beside it."""

    def __init__(self, base_layer: nn.Linear, rank: int = 2):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False)
        nn.init.normal_(self.lora_B.weight, std=50.0)  # (as trained, strongly: PEFT starts it at zero)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x))


class ShuffledAttention(nn.Module):
    """An attention module of one's own in the place of the model's: its output's features moved along by one and
    scaled up (the shipped model's tokens hardly move when its first layer's self-attention is only negated)."""

    def __init__(self, attention: nn.Module):
        super().__init__()
        self.inner = attention

    def forward(self, hidden_states, **kwargs):
        output, weights = self.inner(hidden_states, **kwargs)
        return 10.0 * torch.roll(output, 1, dims=-1), weights


def _adapter(model):
    torch.manual_seed(2)
    layer = model.get_decoder().layers[1].feed_forward
    layer.fc2 = LoraLinear(layer.fc2)
    return "model.decoder.layers.1.feed_forward.fc2 is a test_cpu_decoding_faithful.LoraLinear"


def _attention(model):
    layer = model.get_decoder().layers[0]
    layer.self_attn = ShuffledAttention(layer.self_attn)
    return "model.decoder.layers.0.self_attn is a test_cpu_decoding_faithful.ShuffledAttention"


def _parametrized(model):
    parametrize.register_parametrization(_layer_fc2(model), "weight", Negated())
    return "model.decoder.layers.1.feed_forward.fc2 is a torch.nn.utils.parametrize.ParametrizedLinear"


class Negated(nn.Module):
    def forward(self, weight):
        return -weight


def _biased_output_projection(model):
    old = model.lm_head
    model.lm_head = nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        model.lm_head.weight.copy_(old.weight)
        model.lm_head.bias.copy_(torch.linspace(0.0, 40.0, old.out_features))
    return "lm_head has a bias"


@pytest.mark.parametrize("replace", [_adapter, _attention, _parametrized, _biased_output_projection],
                         ids=["adapter not merged", "attention module", "parametrized Linear", "output bias"])
def test_a_module_replaced_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said, replace):
    model = copy.deepcopy(plain)
    reason = replace(model)
    assert_runs_the_loop(model, batch, searches, said, reason, unchanged)


def test_a_model_set_up_for_int8_decodes_on_the_decoder_with_its_own_kernels(plain, batch, searches, said):
    """for_cpu_inference(model, "int8"): torch.ao's int8 Linear layers, each product their own kernel on their own
    weights. The activations' scale is chosen at each call from the rows it computes, so one input at a time (the same
    rows in both paths) gives the loop's tokens; a padded batch may not (the loop also computes padding)."""
    model = for_cpu_inference(copy.deepcopy(plain), quantization="int8")
    for settings in ({"num_beams": 1}, {"num_beams": 4}):
        for index in range(len(SENTENCES)):
            one = {name: values[index : index + 1][:, : int(batch["attention_mask"][index].sum())]
                   for name, values in batch.items()}
            assert generated(model, one, **settings) == generated(model, one, cpu_decoding=False, **settings)
    assert len(searches) == 2 * len(SENTENCES) and said() == []
    generated(model, batch, num_beams=2)
    assert len(searches) == 2 * len(SENTENCES) + 1


def test_the_int8_products_are_the_layers_own(plain):
    """The decoder's int8 products against the layers: one layer as it is, the same kernel on the same weights (equal);
    self-attention's query (scaled), key and value stacked into one product (equal to float32 rounding); a layer of
    another kind among them (a float one) computed as it is, beside the others."""
    model = for_cpu_inference(copy.deepcopy(plain), quantization="int8")
    attention = model.model.decoder.layers[0].self_attn
    x = torch.randn(7, model.config.d_model, generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        assert torch.equal(cpu_decoding._product([attention.out_proj])(x), attention.out_proj(x))
        expected = torch.cat([attention.q_proj(x) * attention.scaling, attention.k_proj(x), attention.v_proj(x)], -1)
        stacked = cpu_decoding._product([attention.q_proj, attention.k_proj, attention.v_proj],
                                        [attention.scaling, 1.0, 1.0])
        assert isinstance(stacked, cpu_decoding.Int8Product)
        torch.testing.assert_close(stacked(x), expected, rtol=1e-5, atol=1e-5)
        attention.k_proj = plain.model.decoder.layers[0].self_attn.k_proj  # float among int8
        mixed = cpu_decoding._product([attention.q_proj, attention.k_proj, attention.v_proj],
                                      [attention.scaling, 1.0, 1.0])
        expected = torch.cat([attention.q_proj(x) * attention.scaling, attention.k_proj(x), attention.v_proj(x)], -1)
        assert isinstance(mixed, cpu_decoding.Stacked)
        torch.testing.assert_close(mixed(x), expected, rtol=1e-5, atol=1e-5)


def test_int8_weights_changed_are_laid_out_again(plain, batch, searches):
    """An int8 layer's weights live in its packed parameters, not in parameters: new ones are seen at the next call."""
    model = for_cpu_inference(copy.deepcopy(plain), quantization="int8")
    one = {name: values[:1] for name, values in batch.items()}
    before = generated(model, one)
    head = model.lm_head
    weight, bias = head._packed_params._weight_bias()
    scales = weight.q_per_channel_scales().clone()
    scales[before[0][2]] = 0.0  # the second token chosen scores 0 from now on
    head.set_weight_bias(torch._make_per_channel_quantized_tensor(weight.int_repr(), scales,
                                                                  weight.q_per_channel_zero_points(), 0), bias)
    after = generated(model, one)
    assert after != before and after == generated(model, one, cpu_decoding=False) and len(searches) == 2


def test_a_float16_dynamic_linear_runs_as_in_transformers_loop(plain, batch, searches, said):
    model = copy.deepcopy(plain)
    model.model.decoder.layers[0].feed_forward.fc1 = torch.ao.quantization.quantize_dynamic(
        nn.Sequential(model.model.decoder.layers[0].feed_forward.fc1), {nn.Linear}, dtype=torch.float16)[0]
    assert_runs_the_loop(model, batch, searches, said, "of torch.float16, not qint8")


@pytest.mark.parametrize("interface", [ALL_ATTENTION_FUNCTIONS, ALL_MASK_ATTENTION_FUNCTIONS],
                         ids=["attention function", "mask function"])
def test_an_attention_function_of_ones_own_runs_as_in_transformers_loop(plain, batch, unchanged, searches, said,
                                                                        interface):
    """transformers' way to change attention: a function registered under the model's implementation."""
    model = copy.deepcopy(plain)
    implementation = model.config._attn_implementation
    assert implementation == "sdpa"
    if interface is ALL_ATTENTION_FUNCTIONS:
        def own(module, query, key, value, attention_mask, **kwargs):
            output, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
            return output * 2, weights
    else:
        original = ALL_MASK_ATTENTION_FUNCTIONS[implementation]

        def own(*args, **kwargs):  # (the same masks: the change is only what the decoder cannot know)
            return original(*args, **kwargs)
    interface[implementation] = own
    try:
        assert_runs_the_loop(model, batch, searches, said, "the attention implementation 'sdpa' is not",
                             unchanged if interface is ALL_ATTENTION_FUNCTIONS else None)
    finally:
        del interface[implementation]  # (the instance's own entry: the library's stays)
    assert cpu_decoding.unreproduced(model) is None


def test_a_call_under_autocast_runs_as_in_transformers_loop(plain, batch, searches, said):
    model = copy.deepcopy(plain)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loop = generated(model, batch, cpu_decoding=False)
        assert generated(model, batch) == loop
    assert searches == [] and len(said()) == 1 and "autocast is on (torch.bfloat16)" in said()[0][1]
    generated(model, batch)
    assert len(searches) == 1


def test_transformers_own_output_recorders_leave_the_decoder(plain, batch, unchanged, searches, said):
    """A call asking for attentions installs transformers' recording hooks for good; they record nothing unless a
    call asks for attentions or hidden states, which runs transformers' loop: the decoder stays."""
    model = copy.deepcopy(plain)
    with torch.no_grad():
        model(**batch, decoder_input_ids=batch["input_ids"][:, :3], output_attentions=True, output_hidden_states=True)
    assert any(module._forward_hooks for module in model.modules())
    assert generated(model, batch) == unchanged
    assert len(searches) == 1 and said() == []


def test_what_the_project_does_to_its_models_keeps_the_decoder(plain, batch, unchanged, searches, said):
    """for_cpu_inference's oneDNN Linear layers, a model's class of older code or a subclass adding methods, a module
    replaced by one of the same class, weights changed: the decoder, the tokens of the loop."""

    class WithAMethod(VaswaniForConditionalGeneration):
        def describe(self):
            return "tiny"

    model = for_cpu_inference(copy.deepcopy(plain))
    assert type(_layer_fc2(model)) is OneDNNLinear
    assert generated(model, batch) == unchanged
    model.__class__ = WithAMethod
    assert generated(model, batch) == unchanged
    layer = model.get_decoder().layers[1].feed_forward
    layer.fc1 = nn.Linear(layer.fc1.in_features, layer.fc1.out_features)
    assert generated(model, batch) == generated(model, batch, cpu_decoding=False) != unchanged
    assert len(searches) == 3 and said() == []


def test_a_change_made_after_a_call_counts_at_the_next_and_undone_the_decoder_returns(plain, batch, unchanged,
                                                                                      searches, said):
    model = copy.deepcopy(plain)
    assert generated(model, batch) == unchanged and len(searches) == 1
    handle = model.get_decoder().layers[0].register_forward_hook(_zero_output)
    ablated = generated(model, batch)
    assert ablated == generated(model, batch, cpu_decoding=False) != unchanged and len(searches) == 1
    handle.remove()
    assert generated(model, batch) == unchanged and len(searches) == 2
    model.get_decoder().layers[0].feed_forward.forward = lambda hidden_states: hidden_states * 0
    generated(model, batch)
    assert len(searches) == 2
    assert [message.split(": ", 2)[2] for _, message in said()] == [
        "a forward hook on model.decoder.layers.0 (_zero_output).",
        "forward set on model.decoder.layers.0.feed_forward (test_a_change_made_after_a_call_counts_at_the_next_and_"
        "undone_the_decoder_returns.<locals>.<lambda>).",
    ]


@pytest.mark.parametrize("name", ["multi30k_en_de", "multi30k_de_en", "samsum"])
def test_the_shipped_models_keep_the_decoder_and_its_tokens(name, searches, said):
    folder = REPO / "results" / name / "model"
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    assert cpu_decoding.unreproduced(model) is None
    batch = tokenizer(english_sentences(8), return_tensors="pt", padding=True)
    for settings in ({"num_beams": 1}, {"num_beams": 3}):
        assert generated(model, batch, max_new_tokens=30, **settings) == generated(
            model, batch, max_new_tokens=30, cpu_decoding=False, **settings)
    assert len(searches) == 2 and said() == []
