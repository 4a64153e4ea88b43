"""scripts/attention_heatmap.py: the picture and the matrix of a translated sentence's cross-attention, the matrix
checked against the model's own `cross_attentions`, and bad input refused with a message."""

import json
import struct

import pytest
import torch

pytest.importorskip("matplotlib", reason="the plot extra is not installed: pip install -e '.[plot]'")

from helpers import PAIRS, REPO, command_in_process, load_script, tiny_config
from vaswani import VaswaniForConditionalGeneration, VaswaniForSequenceClassification
from vaswani import pipelines
from vaswani.serving import attention_map as attention_maps


attention_heatmap = load_script("attention_heatmap")


SENTENCE = PAIRS[4][0]  # "A woman in a red dress is drinking coffee."
NUM_BEAMS = 3


@pytest.fixture(scope="module")
def translator(tokenizer, tmp_path_factory):
    """A tiny en->de model fitted to the test pairs (a real translation, so the rows differ), saved as a checkpoint."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en", target_lang="de"))
    sources, targets = zip(*PAIRS)
    batch = tokenizer(list(sources), text_target=list(targets), padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small gains nothing from a second thread; on shared cores it loses
    try:
        for _ in range(60):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path_factory.mktemp("translator")
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def heatmap(translator, tmp_path_factory):
    """The script's outputs for SENTENCE with the default layer (the last) and head (the mean)."""
    picture = tmp_path_factory.mktemp("heatmap") / "sentence.png"
    attention_heatmap.main(
        ["--model", str(translator), "--text", SENTENCE, "--output_file", str(picture),
         "--num_beams", str(NUM_BEAMS), "--max_new_tokens", "24"]
    )
    return picture, json.loads(picture.with_suffix(".json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def eager_model(translator):
    model = VaswaniForConditionalGeneration.from_pretrained(translator).eval()
    model.set_attn_implementation("eager")
    return model


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def cross_attention(model, source_ids, target_ids):
    """(layers, heads, target, source) straight from the model: the decoder reads the translation shifted right."""
    decoder_input_ids = [model.config.decoder_start_token_id, *target_ids[:-1]]
    with torch.no_grad():
        outputs = model(
            input_ids=torch.tensor([source_ids]),
            decoder_input_ids=torch.tensor([decoder_input_ids]),
            output_attentions=True,
        )
    return torch.stack(outputs.cross_attentions)[:, 0]


def test_the_picture_is_a_png_sized_to_the_tokens(heatmap):
    picture, record = heatmap
    width, height = png_size(picture)
    # at least ~0.3 inch (120 dpi) per token on each axis, and no poster
    assert 0.3 * 120 * len(record["source_tokens"]) <= width <= 6000
    assert 0.3 * 120 * len(record["target_tokens"]) <= height <= 6000


def test_the_matrix_is_target_by_source_and_each_row_sums_to_one(heatmap, tokenizer):
    _, record = heatmap
    source_ids = tokenizer(SENTENCE)["input_ids"]
    assert record["source_ids"] == source_ids
    assert record["source_tokens"] == tokenizer.convert_ids_to_tokens(source_ids)
    assert record["source_tokens"][-1] == "</s>" and "<pad>" not in record["source_tokens"]
    weights = torch.tensor(record["weights"])
    assert weights.shape == (len(record["target_tokens"]), len(record["source_tokens"]))
    assert len(record["target_tokens"]) >= 3
    assert torch.allclose(weights.sum(-1), torch.ones(len(weights)), atol=1e-5)
    assert (weights >= 0).all()
    assert record["layer"] == 1 and record["head"] == "mean"  # tiny_config has 2 decoder layers


def test_the_target_is_the_models_beam_search_translation(heatmap, eager_model, tokenizer):
    _, record = heatmap
    inputs = tokenizer([SENTENCE], return_tensors="pt")
    generated = eager_model.generate(**inputs, num_beams=NUM_BEAMS, max_new_tokens=24)[0].tolist()
    assert generated[0] == eager_model.config.decoder_start_token_id
    assert record["target_ids"] == generated[1:]
    assert record["target_ids"][-1] == tokenizer.eos_token_id
    assert record["target_tokens"] == tokenizer.convert_ids_to_tokens(generated[1:])
    assert record["translation"] == tokenizer.decode(generated, skip_special_tokens=True)
    assert record["translation"] == PAIRS[4][1]  # the fitted model translates its training sentence


def test_the_matrix_is_the_models_cross_attention_of_the_last_layer_averaged_over_heads(heatmap, eager_model):
    _, record = heatmap
    expected = cross_attention(eager_model, record["source_ids"], record["target_ids"])[-1].mean(0)
    assert torch.allclose(torch.tensor(record["weights"]), expected, atol=1e-6)
    # the rows are different distributions: a transposed or repeated matrix would not pass the shape/sum tests alone
    assert not torch.allclose(expected[0], expected[-1], atol=1e-3)


def test_the_attention_of_a_pipelines_translation_is_the_same_map_and_picture(heatmap, eager_model, tokenizer):
    """The web demo's path: the translation pipeline's token ids, then one forward pass (no second beam search), and
    the picture drawn in memory, the size of the one written to disk."""
    picture, record = heatmap
    translator = pipelines.pipeline("translation", model=eager_model, tokenizer=tokenizer)
    (output,) = translator([SENTENCE], num_beams=NUM_BEAMS, max_new_tokens=24, return_tensors=True, return_text=True)
    attention_map = attention_maps.attention_of_translation(
        eager_model, tokenizer, SENTENCE, output["translation_token_ids"]
    )
    assert attention_map.translation == output["translation_text"] == record["translation"]
    assert attention_map.target_ids == record["target_ids"] and attention_map.source_ids == record["source_ids"]
    assert torch.allclose(torch.tensor(attention_map.weights), torch.tensor(record["weights"]), atol=1e-6)
    png = attention_maps.heatmap_png(attention_map, eager_model)
    in_memory = picture.with_name("in-memory.png")
    in_memory.write_bytes(png)
    assert png_size(in_memory) == png_size(picture)
    width, height = attention_maps.heatmap_size(attention_map)
    assert png_size(picture) == pytest.approx((width * attention_maps.DPI, height * attention_maps.DPI), abs=1)


@pytest.mark.parametrize(
    "layer, head, pick",
    [
        ("0", 1, lambda a: a[0, 1]),
        ("-2", -1, lambda a: a[0, 3]),
        ("1", 2, lambda a: a[1, 2]),
        ("mean", None, lambda a: a.mean(0).mean(0)),
        ("mean", 0, lambda a: a.mean(0)[0]),
    ],
)
def test_layer_and_head_pick_the_models_weights(eager_model, tokenizer, layer, head, pick):
    attention_map = attention_maps.cross_attention_map(
        eager_model, tokenizer, SENTENCE, layer=layer, head=head, num_beams=NUM_BEAMS, max_new_tokens=24
    )
    full = cross_attention(eager_model, attention_map.source_ids, attention_map.target_ids)
    assert torch.allclose(torch.tensor(attention_map.weights), pick(full), atol=1e-6)
    assert attention_map.layer == ("mean" if layer == "mean" else int(layer) % 2)
    assert attention_map.head == ("mean" if head is None else head % 4)


def test_token_labels_mark_word_starts_and_pieces():
    assert attention_maps.token_label("▁Mann") == "Mann"
    assert attention_maps.token_label("ing") == "·ing"
    assert attention_maps.token_label("</s>") == "</s>"
    assert attention_maps.token_label("<0xC3>") == "<0xC3>"
    assert attention_maps.token_label("▁") == "▁"


def test_a_classifier_checkpoint_is_refused_naming_its_class(tokenizer, tmp_path):
    classifier = VaswaniForSequenceClassification(tiny_config(vocab_size=len(tokenizer), num_labels=2))
    classifier.save_pretrained(tmp_path / "classifier")
    tokenizer.save_pretrained(tmp_path / "classifier")
    with pytest.raises(ValueError, match="VaswaniForSequenceClassification, not a sequence-to-sequence model"):
        attention_heatmap.main(
            ["--model", str(tmp_path / "classifier"), "--text", SENTENCE, "--output_file", str(tmp_path / "x.png")]
        )
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--text", "   "], "--text is empty"),
        (["--layer", "2"], r"--layer 2 is out of range: use an index from -2 to 1 \(the model has 2 decoder layers\)"),
        (["--layer", "-3"], "--layer -3 is out of range: use an index from -2 to 1"),
        (["--layer", "last"], "--layer 'last' is not an index from -2 to 1"),
        (["--head", "4"], "--head 4 is out of range: the decoder's cross-attention has 4 heads, "
                          "so use an index from -4 to 3"),
        (["--head", "-5"], "--head -5 is out of range"),
        (["--num_beams", "0"], "--num_beams must be a whole number >= 1; got 0."),
        (["--output_file", "x.json"], r"--output_file x.json: the picture must end in one of \['.png'"),
    ],
)
def test_bad_arguments_are_refused_with_the_allowed_values(translator, tmp_path, arguments, message):
    argv = ["--model", str(translator), "--text", SENTENCE, "--output_file", str(tmp_path / "x.png"), *arguments]
    with pytest.raises(ValueError, match=message):
        attention_heatmap.main(argv)
    assert not (tmp_path / "x.png").exists()


def test_the_command_line_reports_bad_input_without_a_traceback(translator, tmp_path):
    result = command_in_process(REPO / "scripts" / "attention_heatmap.py",
                                ["--model", translator, "--text", "", "--output_file", tmp_path / "x.png"])
    assert result.returncode == 1
    assert "attention_heatmap.py: error: --text is empty" in result.stderr
    assert "Traceback" not in result.stderr


def test_more_beams_than_the_memory_holds_are_one_line_before_translating(translator, tmp_path, monkeypatch):
    """`--num_beams 100000` asked a shipped model for 40-160 GB, and ended in the allocator's traceback."""
    import vaswani.remote_code.loading_checks

    monkeypatch.setattr(vaswani.remote_code.loading_checks, "available_memory", lambda device: 2**30)  # 1 GiB free
    result = command_in_process(REPO / "scripts" / "attention_heatmap.py", [
        "--model", translator, "--text", SENTENCE, "--output_file", tmp_path / "x.png", "--num_beams", "100000"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("attention_heatmap.py: error: Generating 100,000 sequences at once (a batch of 1 input(s) x num_beams "
            "100000), up to 65 tokens each") in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_the_title_names_layer_and_head_as_the_arguments_number_them(heatmap):
    _, record = heatmap
    fields = {key: record[key] for key in record if key != "model"}
    chosen = attention_maps.CrossAttentionMap(**{**fields, "layer": 0, "head": 3})
    assert attention_maps.describe_selection(chosen, 2, 4) == (
        "cross-attention: decoder layer 0 (of 0-1), head 3 (of 0-3)"
    )
    averaged = attention_maps.CrossAttentionMap(**{**fields, "layer": "mean", "head": "mean"})
    assert attention_maps.describe_selection(averaged, 2, 4) == (
        "cross-attention: mean of the 2 decoder layers, mean of the 4 heads"
    )
