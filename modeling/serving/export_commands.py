"""The export commands: scripts/export_onnx.py and scripts/export_ctranslate2.py, installed as `vaswani-export-onnx`
and `vaswani-export-ctranslate2` (each the same function, `onnx_main` / `ctranslate2_main`)."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser
from transformers.utils import logging as transformers_logging

from ..cli import run_command
from .ctranslate2_export import OPTIONS_FILE, QUANTIZATIONS, export_to_ctranslate2
from .exporting import ExportArguments
from .onnx_export import OnnxExportError, export_to_onnx


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


def _listing(output_dir: Path) -> str:
    files = sorted(path for path in output_dir.iterdir() if path.is_file())
    return "\n".join(f"  {path.name}  ({path.stat().st_size:,} bytes)" for path in files)


def onnx_main(argv: list[str] | None = None) -> Path:
    """scripts/export_onnx.py: the folder written."""
    (args,) = HfArgumentParser(ExportArguments).parse_args_into_dataclasses(args=argv)
    output_dir = export_to_onnx(args.model, args.output_dir, overwrite_output_dir=args.overwrite_output_dir)
    print(
        f"Exported {args.model} to {output_dir}:\n{_listing(output_dir)}\n"
        f"Decode with onnxruntime: vaswani.serving.onnx_generation.OnnxGenerator({str(output_dir)!r})(texts, "
        "num_beams=...)"
    )
    return output_dir


def ctranslate2_main(argv: list[str] | None = None) -> Path:
    """scripts/export_ctranslate2.py: the folder written."""
    parser = HfArgumentParser((ExportArguments, QuantizationArguments))
    args, weights = parser.parse_args_into_dataclasses(args=argv)
    transformers_logging.disable_progress_bar()  # one "Loading weights" bar says nothing here
    output_dir = export_to_ctranslate2(
        args.model, args.output_dir, quantization=weights.quantization, overwrite_output_dir=args.overwrite_output_dir
    )
    options = json.loads((output_dir / OPTIONS_FILE).read_text(encoding="utf-8"))
    print(
        f"Exported {args.model} to {output_dir} ({weights.quantization or 'float32'} weights):\n"
        f"{_listing(output_dir)}\n"
        f"translate_batch(sources, **options) decodes as the checkpoint's generation config does, with options "
        f"from {OPTIONS_FILE}: {options}"
    )
    return output_dir


def onnx_console_main() -> None:
    """The `vaswani-export-onnx` command."""
    run_command(onnx_main, OnnxExportError)


def ctranslate2_console_main() -> None:
    """The `vaswani-export-ctranslate2` command."""
    run_command(ctranslate2_main)


__all__ = ["QuantizationArguments", "ctranslate2_console_main", "ctranslate2_main", "onnx_console_main", "onnx_main"]
