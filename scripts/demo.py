"""Translate English sentences to German with the project's shipped Multi30k model, through the package's translation pipeline, and
draw where the model looks while it translates the first one.

    python scripts/demo.py                                   # four sentences; writes attention.png and .json
    python scripts/demo.py --text "A dog runs on the beach." "Two girls are reading." --output_file dog.png
    python scripts/demo.py --no-cpu_decoding                 # transformers' generate loop (same translations)

The model (results/multi30k_en_de/model, 2.35M parameters) was trained from scratch on Multi30k's 29,000 image
captions by the en->de recipe of scripts/configs/recipes.yaml; it translates sentences like those: short descriptions
of a scene. The picture is the cross-attention of its last decoder layer, averaged over the heads
(scripts/attention_heatmap.py draws any layer or head).
"""

import argparse
import json
from pathlib import Path

from vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniTokenizer
from vaswani import pipelines as vaswani_pipelines
from vaswani.cli import run_command
from vaswani.serving.attention_map import PICTURE_FORMATS, check_heatmap_files, cross_attention_map, save_heatmap


MODEL = Path(__file__).resolve().parents[1] / "results" / "multi30k_en_de" / "model"
SENTENCES = [
    "A little girl in a pink dress is climbing the stairs.",
    "Two men are playing soccer on the beach.",
    "A brown dog jumps over a fence to catch a ball.",
    "An old woman is selling flowers at the market.",
]
NUM_BEAMS = 5  # the recipe's evaluation settings
MAX_NEW_TOKENS = 80


def load_translator(model_dir: Path, cpu_decoding: bool = True):
    """The translation pipeline of a model of this project, built from the installed package's classes: the
    code files the folder carries (its own `pipeline_vaswani.py`, `modeling_vaswani.py`, ...) are never run, so a
    folder from elsewhere can hold weights and a tokenizer, not code. On a CPU the model decodes through the project's
    CPU decoder, as every model of this project does by default (the same tokens as transformers' loop, faster);
    without `cpu_decoding`, through transformers' loop (`generation_config.cpu_decoding = False`)."""
    model_type = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type != VaswaniConfig.model_type:
        raise ValueError(
            f"--model {model_dir} holds a {model_type!r} model; the demo translates with models of this project "
            f"(model_type {VaswaniConfig.model_type!r})."
        )
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir)
    if not cpu_decoding:
        model.generation_config.cpu_decoding = False
    tokenizer = VaswaniTokenizer.from_pretrained(model_dir)
    return vaswani_pipelines.pipeline("translation", model=model, tokenizer=tokenizer)


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", nargs="+", default=SENTENCES, help="English sentences to translate.")
    parser.add_argument("--model", default=str(MODEL), help="A translation model (default: the shipped en->de).")
    parser.add_argument("--output_file", default="attention.png", help="The heatmap of the first sentence (.png).")
    parser.add_argument(
        "--cpu_decoding",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="On a CPU, decode with the project's CPU decoder (the default of every model of this project: the same "
        "translations as transformers' generate loop, faster); --no-cpu_decoding runs transformers' loop.",
    )
    args = parser.parse_args(argv)
    if Path(args.output_file).suffix.lower() not in PICTURE_FORMATS:
        raise ValueError(f"--output_file {args.output_file}: the picture must end in one of {list(PICTURE_FORMATS)}.")
    if not all(text.strip() for text in args.text):
        raise ValueError("--text has an empty sentence: give sentences to translate.")
    model_dir, picture = Path(args.model), Path(args.output_file)
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"--model {model_dir}: no such folder. The shipped models come with a clone of the repository "
            "(results/*/model)."
        )
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"--model {model_dir} is not a model folder (no config.json).")
    check_heatmap_files(picture, {"--model": model_dir})

    translator = load_translator(model_dir, args.cpu_decoding)
    outputs = translator(args.text, num_beams=NUM_BEAMS, max_new_tokens=MAX_NEW_TOKENS, batch_size=len(args.text))
    translations = [output["translation_text"] for output in outputs]
    for source, translation in zip(args.text, translations):
        print(f"{source}\n  -> {translation}")

    model, tokenizer = translator.model, translator.tokenizer
    attention_map = cross_attention_map(
        model, tokenizer, args.text[0], num_beams=NUM_BEAMS, max_new_tokens=MAX_NEW_TOKENS
    )
    picture, matrix_file = save_heatmap(attention_map, picture, model, args.model)
    print(f"Wrote {picture} (its numbers in {matrix_file}): where the model looks while translating {args.text[0]!r}")
    return translations


if __name__ == "__main__":
    run_command(main)
