"""vaswani.serving.cpu_inference: oneDNN fp32 gives the plain model's outputs; int8 stays close to them, on the trained
en->de model the project ships (real weights and real sentences: random weights would make agreement meaningless);
`CpuInference` holds the model it runs, changing nothing of it but its Linear layers."""

import copy
import json
import platform

import pytest
import sacrebleu
import torch
from torch import nn
import transformers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationMixin

from helpers import PAIRS, REPO, SHARED_DATA, needs_shared_data, spread_weights, tiny_config
from vaswani import VaswaniForConditionalGeneration
import vaswani.remote_code.cpu_decoding as cpu_decoding
from vaswani.remote_code.cpu_decoding import CpuDecoding
from vaswani.serving import cpu_inference
from vaswani.serving.cpu_inference import CpuInference, OneDNNLinear, for_cpu_inference


EN_DE = REPO / "results" / "multi30k_en_de" / "model"
SENTENCES = [source for source, _ in PAIRS]


@pytest.fixture(scope="module")
def plain():
    return AutoModelForSeq2SeqLM.from_pretrained(EN_DE).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(EN_DE)


def generated(model, tokenizer, texts, **settings) -> list[list[int]]:
    with torch.no_grad():
        return model.generate(**tokenizer(texts, return_tensors="pt", padding=True), **settings).tolist()


def test_onednn_fp32_gives_the_plain_models_logits_and_tokens(plain, tokenizer):
    fast = for_cpu_inference(copy.deepcopy(plain))
    linears = [module for module in fast.modules() if isinstance(module, nn.Linear)]
    assert linears and all(type(module) is OneDNNLinear for module in linears)
    assert fast.lm_head.weight is fast.model.shared.weight  # tied weights stay tied
    assert fast.state_dict().keys() == plain.state_dict().keys()
    batch = tokenizer(SENTENCES, text_target=[target for _, target in PAIRS], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected, got = plain(**batch).logits, fast(**batch).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for settings in ({"num_beams": 1}, {"num_beams": 4, "length_penalty": 0.6}):
        assert generated(fast, tokenizer, SENTENCES, max_new_tokens=40, **settings) == generated(
            plain, tokenizer, SENTENCES, max_new_tokens=40, **settings
        )


def test_the_object_holds_the_model_and_gives_its_logits_and_tokens(plain, tokenizer):
    """CpuInference runs the model it was given (fp32: the same object, its Linear layers through oneDNN, the same
    parameters): its forward and generate give the plain model's logits and tokens, and nothing else of the model is
    replaced (no `generate` of its own, no transformers hook overridden)."""
    model = copy.deepcopy(plain)
    parameters = [id(parameter) for parameter in model.parameters()]
    inference = CpuInference(model)
    assert inference.model is model and inference.decoder is None
    assert [id(parameter) for parameter in model.parameters()] == parameters
    assert all(type(module) is OneDNNLinear for module in model.modules() if isinstance(module, nn.Linear))
    assert not {"generate", "_supports_default_dynamic_cache"} & set(vars(model))
    batch = tokenizer(SENTENCES, text_target=[target for _, target in PAIRS], return_tensors="pt", padding=True)
    with torch.no_grad():
        torch.testing.assert_close(inference(**batch).logits, plain(**batch).logits, rtol=1e-4, atol=1e-4)
    inputs = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    for settings in ({"num_beams": 1}, {"num_beams": 4, "length_penalty": 0.6}):
        assert inference.generate(**inputs, max_new_tokens=40, **settings).tolist() == generated(
            plain, tokenizer, SENTENCES, max_new_tokens=40, **settings)
    int8 = CpuInference(model, quantization="int8")
    assert int8.model is not model and int8.decoder is None
    assert any(isinstance(module, torch.ao.nn.quantized.dynamic.Linear) for module in int8.model.modules())
    assert all(type(module) is OneDNNLinear for module in model.modules() if isinstance(module, nn.Linear))


def test_onednn_layers_train_as_plain_ones():
    """With gradients on, a OneDNNLinear takes the usual path: same loss and gradients, bit for bit."""
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config()))
    fast = for_cpu_inference(copy.deepcopy(model)).train()
    model.train()
    batch = {"input_ids": torch.randint(4, 1000, (2, 7)), "labels": torch.randint(4, 1000, (2, 5))}
    losses = []
    for candidate in (model, fast):
        torch.manual_seed(1)  # the same dropout masks
        loss = candidate(**batch).loss
        loss.backward()
        losses.append(loss)
    assert torch.equal(losses[0], losses[1])
    for (name, param), fast_param in zip(model.named_parameters(), fast.parameters()):
        assert torch.equal(param.grad, fast_param.grad), name


def test_int8_is_a_copy_with_int8_linear_layers_and_close_outputs(plain, tokenizer):
    int8 = for_cpu_inference(plain, quantization="int8")
    assert all(type(module) is nn.Linear for module in plain.modules() if isinstance(module, nn.Linear))  # untouched
    quantized = [module for module in int8.modules() if isinstance(module, torch.ao.nn.quantized.dynamic.Linear)]
    assert len(quantized) == sum(isinstance(module, nn.Linear) for module in plain.modules())
    assert {module.weight().qscheme() for module in quantized} == {torch.per_channel_affine}  # a scale per row
    batch = tokenizer(SENTENCES, text_target=[target for _, target in PAIRS], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected, got = plain(**batch).logits, int8(**batch).logits
    mask = batch["labels"] != tokenizer.pad_token_id
    agreement = (expected.argmax(-1) == got.argmax(-1))[mask].float().mean().item()
    assert agreement > 0.9, f"int8 picks the fp32 model's next token at only {agreement:.0%} of positions"
    assert not torch.equal(got, expected)  # it really is another computation


@needs_shared_data
def test_int8_costs_little_bleu_on_real_test_sentences(plain, tokenizer):
    rows = [json.loads(line) for line in (SHARED_DATA / "multi30k" / "test_2016_flickr.jsonl").open()][:100]
    sources, references = [row["en"] for row in rows], [[row["de"] for row in rows]]
    scores = {}
    for name, model in (("fp32", plain), ("int8", for_cpu_inference(plain, quantization="int8"))):
        outputs = generated(model, tokenizer, sources, num_beams=5, max_new_tokens=80)
        scores[name] = sacrebleu.corpus_bleu(tokenizer.batch_decode(outputs, skip_special_tokens=True), references).score
    assert abs(scores["int8"] - scores["fp32"]) < 1.0, scores  # 0.45 here; 0.03 on all 1,000 (README)


def test_bad_arguments_are_named(plain):
    with pytest.raises(ValueError, match=r"quantization='int4'.*\['fp32', 'int8'\]"):
        for_cpu_inference(plain, quantization="int4")


def test_the_guide_example_runs(capsys):
    """The example of scripts/serving.md's "Serving fast" section, "In PyTorch" (where the README points)."""
    guide = (REPO / "scripts" / "serving.md").read_text(encoding="utf-8")
    section = guide.split("### In PyTorch", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = {}
    exec(compile(example, "scripts/serving.md (Serving fast, In PyTorch)", "exec"), namespace)
    assert all(type(module) is OneDNNLinear for module in namespace["model"].modules() if isinstance(module, nn.Linear))
    assert any(isinstance(module, torch.ao.nn.quantized.dynamic.Linear) for module in namespace["int8_model"].modules())


def test_freed_memory_is_kept_for_reuse_unless_asked_not_to(plain, monkeypatch):
    """On Linux with glibc, for_cpu_inference has malloc keep freed memory (no fresh pages to fault in at every call);
    elsewhere nothing is changed; release_freed_memory=True leaves the process's setting alone."""
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    monkeypatch.setattr(cpu_decoding.FreedMemory, "decided", False)  # (restored after the test)
    assert cpu_inference.keep_freed_memory() is glibc
    calls = []
    monkeypatch.setattr(cpu_inference, "keep_freed_memory", lambda: calls.append(1) or glibc)
    for_cpu_inference(copy.deepcopy(plain), release_freed_memory=True)
    assert calls == []
    for_cpu_inference(copy.deepcopy(plain))
    for_cpu_inference(copy.deepcopy(plain), quantization="int8")
    assert calls == [1, 1]


def test_models_of_other_projects_are_refused_by_name():
    bart = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32))
    with pytest.raises(ValueError, match=r"sets up this project's models .*got BartForConditionalGeneration "
                                         r"\(model_type 'bart'\)"):
        for_cpu_inference(bart)


def test_a_model_class_without_the_default_path_gets_it_from_the_switch(plain, tokenizer):
    """A model of a checkpoint saved by older code, whose class does not decode on the CPU path by itself (its
    generate is transformers' loop, and it has no `_cpu_decoding`): the switch puts the path in front of it."""

    class Older(VaswaniForConditionalGeneration):
        _cpu_decoding = None

        def generate(self, *args, **kwargs):
            return GenerationMixin.generate(self, *args, **kwargs)

    older = Older(plain.config).eval()
    older.load_state_dict(plain.state_dict())
    expected = generated(plain, tokenizer, SENTENCES, max_new_tokens=20, num_beams=2, cpu_decoding=False)
    inference = CpuInference(older)  # holds the path: the model's generate stays its class's
    assert isinstance(inference.decoder, CpuDecoding) and "generate" not in vars(older)
    inputs = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        assert inference.generate(**inputs, max_new_tokens=20, num_beams=2).tolist() == expected
    fast = for_cpu_inference(older)  # a model passed on as a model: the path in front of its generate
    assert isinstance(vars(fast).get("generate"), CpuDecoding)
    assert generated(fast, tokenizer, SENTENCES, max_new_tokens=20, num_beams=2) == expected
