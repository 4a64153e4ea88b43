"""Draw where a translation model looks: the encoder-decoder ("cross") attention of one translated sentence, as a
heatmap of target tokens (rows) against source tokens (columns).

    python scripts/attention_heatmap.py --model outputs/multi30k_en_de/best \
        --text "A man in an orange hat is looking at something." --output_file outputs/heatmaps/en_de.png

How the weights are taken: `vaswani.serving.attention_map` (row i is the attention of the decoder while it produces
target token i, so each row sums to 1 over the source tokens). `--layer` picks a decoder layer
(default: the last; negative indices count from the end; `mean` averages the layers) and `--head` one head (default:
the average of the heads).

Beside the picture, `x.png` gets `x.json`: the source and target tokens (and ids) and the matrix, to check or reuse.
"""

from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, HfArgumentParser

import vaswani  # noqa: F401  (registers the project's classes with the Auto classes)
from vaswani.cli import POSITIVE, check_numbers, require_folder_or_hub_id, run_command
from vaswani.output_checks import check_output_writable
from vaswani.serving.attention_map import (
    PICTURE_FORMATS,
    CrossAttentionMap,
    check_heatmap_files,
    cross_attention_map,
    save_heatmap,
)
from vaswani.safe_loading import require_trained_head



@dataclass
class HeatmapArguments:
    model: str = field(metadata={"help": "A translation model of this project (a folder or a Hub id)."})
    text: str = field(metadata={"help": "The source sentence to translate."})
    output_file: str = field(
        metadata={"help": f"The picture ({', '.join(PICTURE_FORMATS)}); the matrix goes beside it as .json."}
    )
    num_beams: int = field(default=5, metadata={"help": "Beam size of the translation."})
    length_penalty: float = field(default=1.0, metadata={"help": "Beam length penalty alpha."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest translation, in tokens."})
    layer: str = field(
        default="-1",
        metadata={"help": "Decoder layer: an index (-1 = the last; negative counts from the end) or 'mean'."},
    )
    head: int | None = field(
        default=None, metadata={"help": "Attention head (negative counts from the end); default: their mean."}
    )


# What each numeric option allows; every one is a finite number of its type (vaswani.cli.check_numbers): a NaN
# length penalty would decode without a word. How many beams fit is checked against the model and the memory left
# when it is loaded (vaswani.remote_code.loading_checks.check_generation_fits), before it translates.
NUMBER_RULES = {"num_beams": POSITIVE, "max_new_tokens": POSITIVE}


def check_arguments(args: HeatmapArguments) -> None:
    """What can be checked before loading the model."""
    if not args.text.strip():
        raise ValueError('--text is empty: give the sentence to translate, e.g. --text "A man is riding a horse."')
    if Path(args.output_file).suffix.lower() not in PICTURE_FORMATS:
        raise ValueError(f"--output_file {args.output_file}: the picture must end in one of {list(PICTURE_FORMATS)}.")
    check_numbers(args, NUMBER_RULES)


def load_translation_model(path: str):
    """The seq2seq model (eager attention, so that it returns its attention weights) and its tokenizer. A model
    trained as something else (a classifier) is refused before its weights are loaded into the wrong class."""
    trained_as = AutoConfig.from_pretrained(path).architectures or []
    # transformers names its sequence-to-sequence language-model classes *ForConditionalGeneration
    if trained_as and not any(name.endswith("ForConditionalGeneration") for name in trained_as):
        raise ValueError(
            f"--model {path} is a model of {', '.join(trained_as)}, not a sequence-to-sequence model: an "
            "attention heatmap needs a model that translates (VaswaniForConditionalGeneration, e.g. "
            "outputs/multi30k_en_de/best)."
        )
    model = require_trained_head(AutoModelForSeq2SeqLM, path, "translation").eval()
    return model, AutoTokenizer.from_pretrained(path)


def main(argv: list[str] | None = None) -> CrossAttentionMap:
    (args,) = HfArgumentParser(HeatmapArguments).parse_args_into_dataclasses(args=argv)
    check_arguments(args)
    require_folder_or_hub_id(args.model, "--model")
    check_heatmap_files(Path(args.output_file), {"--model": args.model})
    check_output_writable(args.output_file, "--output_file")
    model, tokenizer = load_translation_model(args.model)
    attention_map = cross_attention_map(
        model, tokenizer, args.text, args.layer, args.head, args.num_beams, args.length_penalty, args.max_new_tokens
    )
    picture, matrix_file = save_heatmap(attention_map, Path(args.output_file), model, args.model)
    print(f"{attention_map.source_text!r} -> {attention_map.translation!r}")
    print(f"Wrote {picture} and {matrix_file}")
    return attention_map


if __name__ == "__main__":
    run_command(main)
