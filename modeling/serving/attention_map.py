"""The encoder-decoder ("cross") attention of one translated sentence, as a matrix and as a heatmap picture: target
tokens (rows) against source tokens (columns).

    from vaswani.serving.attention_map import cross_attention_map, save_heatmap
    attention_map = cross_attention_map(model, tokenizer, "A man is riding a horse.")
    save_heatmap(attention_map, Path("attention.png"), model, "my-model")  # and attention.json beside it

The sentence is translated with beam search (`model.generate`); then one forward pass with the translation as the
decoder input and `output_attentions=True` gives the weights. Row i is the attention of the decoder while it produces
target token i, so each row sums to 1 over the source tokens. `scripts/attention_heatmap.py` is the command line.
`attention_of_translation` does the second step for a translation made elsewhere (a pipeline's token ids, as the web
demo gets them), and `heatmap_png` draws the picture into memory.
"""

import io
import json
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..output_paths import check_output_file, read_json_object, write_atomically, write_text_atomically


WORD_START = "▁"  # the tokenizer's mark of a piece that begins a word
CONTINUATION = "·"  # how the picture marks a piece that continues the word before it
PICTURE_FORMATS = (".png", ".svg", ".pdf")  # what plot_heatmap can write
DPI = 120  # pixels per inch of the pictures


@dataclass
class CrossAttentionMap:
    """The attention of one translated sentence: `weights[i][j]` is how much target token i attends to source
    token j."""

    source_text: str
    translation: str
    source_tokens: list[str]
    target_tokens: list[str]
    source_ids: list[int]
    target_ids: list[int]
    layer: int | str  # the layer index (0-based, counted from the first), or "mean"
    head: int | str  # the head index (0-based), or "mean"
    weights: list[list[float]]


def _layer_index(layer: str, num_layers: int) -> int | None:
    """`--layer` as a 0-based index, or None for the mean over layers; an error names the allowed values."""
    allowed = f"an index from {-num_layers} to {num_layers - 1} (the model has {num_layers} decoder layers) or 'mean'"
    if layer.strip().lower() == "mean":
        return None
    try:
        index = int(layer)
    except ValueError:
        raise ValueError(f"--layer {layer!r} is not {allowed}.") from None
    if not -num_layers <= index < num_layers:
        raise ValueError(f"--layer {index} is out of range: use {allowed}.")
    return index % num_layers


def _head_index(head: int | None, num_heads: int) -> int | None:
    """`--head` as a 0-based index, or None for the mean over heads."""
    if head is None:
        return None
    if not -num_heads <= head < num_heads:
        raise ValueError(
            f"--head {head} is out of range: the decoder's cross-attention has {num_heads} heads, so use an index "
            f"from {-num_heads} to {num_heads - 1}, or leave --head out for their mean."
        )
    return head % num_heads


def _translated_ids(model, inputs, num_beams: int, length_penalty: float, max_new_tokens: int) -> list[int]:
    """The beam-search output of one sentence, starting with the decoder start token and ending at the first
    end-of-sequence token (or where `max_new_tokens` cut it)."""
    output = model.generate(
        **inputs, num_beams=num_beams, length_penalty=length_penalty, max_new_tokens=max_new_tokens
    )[0].tolist()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    ends = [position for position, token in enumerate(output) if position > 0 and token in eos_ids]
    return output[: ends[0] + 1] if ends else output


@torch.inference_mode()
def cross_attention_map(
    model, tokenizer, text: str, layer: str = "-1", head: int | None = None, num_beams: int = 5,
    length_penalty: float = 1.0, max_new_tokens: int = 64,
) -> CrossAttentionMap:
    config = model.config
    max_positions = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    _layer_index(layer, config.decoder_layers)  # a bad --layer or --head is refused before the translation is made
    _head_index(head, config.decoder_attention_heads)
    inputs = tokenizer([text], truncation=True, max_length=max_positions, return_tensors="pt").to(model.device)
    generated = _translated_ids(model, inputs, num_beams, length_penalty, min(max_new_tokens, max_positions - 1))
    return attention_of_translation(model, tokenizer, text, generated, layer, head, max_source_length=max_positions)


@torch.inference_mode()
def attention_of_translation(
    model, tokenizer, text: str, generated_ids, layer: str = "-1", head: int | None = None,
    max_source_length: int | None = None,
) -> CrossAttentionMap:
    """The cross-attention of `model` over `text` while it writes the translation `generated_ids` (the decoder start
    token first, up to and with the end-of-sequence token, as `generate` and the pipelines' `return_tensors=True`
    give them): one forward pass. The source is cut to `max_source_length` tokens (default: the model's
    max_position_embeddings), as the translation's own input was."""
    config = model.config
    layer = _layer_index(layer, config.decoder_layers)
    head = _head_index(head, config.decoder_attention_heads)
    if max_source_length is None:
        max_source_length = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    inputs = tokenizer([text], truncation=True, max_length=max_source_length, return_tensors="pt").to(model.device)
    generated = [int(token) for token in generated_ids]

    # The decoder reads the translation shifted right (start token first) and predicts each next token: row i of the
    # cross-attention is what the decoder looked at while producing target token i.
    decoder_input_ids = torch.tensor([generated[:-1]], device=model.device)
    outputs = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
    attention = torch.stack(outputs.cross_attentions)[:, 0]  # (layers, heads, target, source)
    attention = attention.mean(0) if layer is None else attention[layer]
    attention = attention.mean(0) if head is None else attention[head]

    source_ids, target_ids = inputs["input_ids"][0].tolist(), generated[1:]
    return CrossAttentionMap(
        source_text=text,
        translation=tokenizer.decode(target_ids, skip_special_tokens=True),
        source_tokens=tokenizer.convert_ids_to_tokens(source_ids),
        target_tokens=tokenizer.convert_ids_to_tokens(target_ids),
        source_ids=source_ids,
        target_ids=target_ids,
        layer="mean" if layer is None else layer,
        head="mean" if head is None else head,
        weights=attention.float().tolist(),
    )


def token_label(token: str) -> str:
    """A tick label: a word-initial piece without its mark ("▁Mann" -> "Mann"), a piece inside a word with a
    leading dot ("ing" -> "·ing"); special tokens, byte tokens and a lone space mark as they are."""
    if token == WORD_START or (token.startswith("<") and token.endswith(">")):
        return token
    return token[len(WORD_START):] if token.startswith(WORD_START) else CONTINUATION + token


def describe_selection(attention_map: CrossAttentionMap, num_layers: int, num_heads: int) -> str:
    """The layer and head of the picture, numbered from 0 as --layer and --head take them."""
    layer, head = attention_map.layer, attention_map.head
    if layer == "mean":
        layer = f"mean of the {num_layers} decoder layers"
    else:
        layer = f"decoder layer {layer} (of 0-{num_layers - 1})"
    head = f"mean of the {num_heads} heads" if head == "mean" else f"head {head} (of 0-{num_heads - 1})"
    return f"cross-attention: {layer}, {head}"


def _draw_heatmap(attention_map: CrossAttentionMap, selection: str):
    """The picture as a matplotlib Figure. It is made without pyplot (no global state, no display), so that threads
    (a web server's) may each draw one at the same time."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "Drawing the heatmap needs matplotlib, which is not installed: pip install 'vaswani-transformer[plot]'."
        ) from None

    rows, columns = len(attention_map.target_tokens), len(attention_map.source_tokens)
    width, height = heatmap_size(attention_map)
    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots()
    image = axes.imshow(attention_map.weights, cmap="viridis", vmin=0.0, aspect="auto")
    axes.set_xticks(range(columns), [token_label(t) for t in attention_map.source_tokens], rotation=60,
                    ha="right", rotation_mode="anchor")
    axes.set_yticks(range(rows), [token_label(t) for t in attention_map.target_tokens])
    axes.set_xlabel(f"source tokens  ({CONTINUATION} = piece inside a word)")
    axes.set_ylabel("target tokens (row: attention while producing it)")
    # the title spans the whole figure; at 10 points about 10 characters fit in an inch
    wrap = int(width * 10) - 4
    figure.suptitle(
        "\n".join([
            textwrap.fill(f"source: {attention_map.source_text}", wrap),
            textwrap.fill(f"translation: {attention_map.translation}", wrap),
            selection,
        ]),
        fontsize=10,
        x=0.02,
        ha="left",
    )
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    return figure


def heatmap_size(attention_map: CrossAttentionMap) -> tuple[float, float]:
    """The picture's width and height in inches (`DPI` pixels each): about a third of an inch per token, within
    limits that keep short sentences readable and long ones drawable."""
    rows, columns = len(attention_map.target_tokens), len(attention_map.source_tokens)
    return min(max(5.0, 2.5 + 0.36 * columns), 40.0), min(max(4.0, 2.8 + 0.3 * rows), 40.0)


def _plot_heatmap(attention_map: CrossAttentionMap, path: Path, selection: str) -> Path:
    figure = _draw_heatmap(attention_map, selection)
    # whole or not at all (vaswani.output_paths); the format is the final name's, not the temporary file's
    write_atomically(path, lambda temporary: figure.savefig(temporary, dpi=DPI, format=path.suffix[1:].lower()),
                     "--output_file")
    return path


def heatmap_png(attention_map: CrossAttentionMap, model) -> bytes:
    """The picture `save_heatmap` draws, as PNG bytes (nothing written to disk)."""
    selection = describe_selection(attention_map, model.config.decoder_layers, model.config.decoder_attention_heads)
    buffer = io.BytesIO()
    _draw_heatmap(attention_map, selection).savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def save_heatmap(attention_map: CrossAttentionMap, path: Path, model, model_name: str) -> tuple[Path, Path]:
    """The picture at `path` and, beside it (`x.png` -> `x.json`), the tokens and the matrix with the model's name.
    Returns both paths."""
    selection = describe_selection(attention_map, model.config.decoder_layers, model.config.decoder_attention_heads)
    picture = _plot_heatmap(attention_map, path, selection)
    matrix_file = picture.with_suffix(".json")
    record = {"model": model_name, **asdict(attention_map)}
    write_text_atomically(matrix_file, json.dumps(record, indent=1, ensure_ascii=False) + "\n",
                          "--output_file (its .json beside the picture)")
    return picture, matrix_file


def check_heatmap_files(picture: Path, inputs: dict) -> None:
    """The picture and the matrix beside it (`x.png` -> `x.json`) each stay apart from the inputs, and replace only
    a heatmap written before (vaswani.output_paths): `--output_file MODEL/config.png` would replace the model's
    config.json, `--output_file notes.png` a picture of the user's."""
    check_output_file(picture, inputs, replaces=_is_heatmap_picture)
    check_output_file(picture.with_suffix(".json"), inputs, option="--output_file (its .json beside the picture)",
                      replaces=_is_heatmap_matrix)


def _is_heatmap_picture(path: Path) -> bool:
    """A picture drawn by matplotlib (its PNG, PDF and SVG files name it in their metadata)."""
    with open(path, "rb") as handle:
        return b"Matplotlib" in handle.read(1 << 16)


def _is_heatmap_matrix(path: Path) -> bool:
    content = read_json_object(path)
    return content is not None and {"source_tokens", "target_tokens", "weights"} <= set(content)


__all__ = [
    "CrossAttentionMap",
    "DPI",
    "PICTURE_FORMATS",
    "attention_of_translation",
    "check_heatmap_files",
    "cross_attention_map",
    "describe_selection",
    "heatmap_png",
    "heatmap_size",
    "save_heatmap",
    "token_label",
]
