"""Export a translation or summarization checkpoint to CTranslate2, a fast C++ inference engine for CPUs and GPUs.

    # float32: the tokens of generate(..., early_stopping=True), greedy or beam search
    python scripts/export_ctranslate2.py --model results/multi30k_en_de/model --output_dir outputs/ct2/multi30k_en_de

    # 8-bit weights: about 4x smaller and faster on a CPU; the outputs may differ slightly
    python scripts/export_ctranslate2.py --model results/multi30k_en_de/model --output_dir outputs/ct2/en_de_int8 \
        --quantization int8

The folder then holds the CTranslate2 model (`model.bin`, `config.json`, `shared_vocabulary.json`), the tokenizer, and
`translate_options.json`: the `translate_batch` arguments that decode as the checkpoint's generation config does.

    import json
    import ctranslate2
    from transformers import AutoTokenizer

    translator = ctranslate2.Translator("outputs/ct2/multi30k_en_de", device="cpu")
    tokenizer = AutoTokenizer.from_pretrained("outputs/ct2/multi30k_en_de", trust_remote_code=True)
    options = json.load(open("outputs/ct2/multi30k_en_de/translate_options.json"))
    ids = tokenizer(["A man is riding a horse."], truncation=True).input_ids  # each ends with </s>
    for result in translator.translate_batch([tokenizer.convert_ids_to_tokens(row) for row in ids], **options):
        print(tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0])))

All position types (sinusoidal, learned, relative), pre- and post-LayerNorm and every activation of the config are
exported exactly; what cannot be (a classifier, a folder of another model) is refused with the reason. The conversion
itself is `vaswani.serving.ctranslate2_export`. Needs the optional extra: pip install
'vaswani-transformer[ctranslate2]'.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser
from transformers.utils import logging as transformers_logging

from vaswani.cli import run_command
from vaswani.serving.ctranslate2_export import OPTIONS_FILE, QUANTIZATIONS, export_to_ctranslate2
from vaswani.serving.exporting import ExportArguments


@dataclass
class QuantizationArguments:
    """CTranslate2's option beside the export's own (vaswani.serving.exporting.ExportArguments)."""

    quantization: str | None = field(
        default=None,
        metadata={
            "help": "Store the weights as this type (default: float32, as trained); int8 is about 4x smaller.",
            "choices": list(QUANTIZATIONS),
        },
    )


def main(argv: list[str] | None = None) -> Path:
    parser = HfArgumentParser((ExportArguments, QuantizationArguments))
    args, weights = parser.parse_args_into_dataclasses(args=argv)
    transformers_logging.disable_progress_bar()  # one "Loading weights" bar says nothing here
    output_dir = export_to_ctranslate2(
        args.model, args.output_dir, quantization=weights.quantization, overwrite_output_dir=args.overwrite_output_dir
    )
    files = sorted(path for path in output_dir.iterdir() if path.is_file())
    listing = "\n".join(f"  {path.name}  ({path.stat().st_size:,} bytes)" for path in files)
    options = json.loads((output_dir / OPTIONS_FILE).read_text(encoding="utf-8"))
    print(
        f"Exported {args.model} to {output_dir} ({weights.quantization or 'float32'} weights):\n{listing}\n"
        f"translate_batch(sources, **options) decodes as the checkpoint's generation config does, with options "
        f"from {OPTIONS_FILE}: {options}"
    )
    return output_dir


if __name__ == "__main__":
    run_command(main)
