"""What the exports to other engines (vaswani.serving.ctranslate2_export, vaswani.serving.onnx_export) share: the checks
of the model they read and of the folder they write. An error names the argument (as the scripts spell it), the
value and what is allowed; and the options both export scripts take (`ExportArguments`)."""

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import output_paths
from ..code_references import keep_own_code_references, keep_own_tokenizer_code_references
from ..output_checks import check_output_writable
from ..remote_code.vocabulary import check_vocabulary
from ..safe_loading import check_model_folder


SEQ2SEQ_ARCHITECTURE = "VaswaniForConditionalGeneration"


@dataclass
class ExportArguments:
    """What scripts/export_ctranslate2.py and scripts/export_onnx.py read from the command line: the model, the
    folder to write, and whether to replace what that folder holds."""

    model: str = field(
        metadata={"help": "The model: a folder with a VaswaniForConditionalGeneration and its tokenizer."}
    )
    output_dir: str = field(metadata={"help": "The folder to write the exported model, its tokenizer and configs to."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (by default a non-empty folder is refused)."}
    )


def claim_output_dir(output_dir: Path, model_dir: Path, overwrite_output_dir: bool) -> output_paths.OutputFolder:
    """The export's folder, checked and published as every command's (vaswani.output_paths): not a link or a special
    file, apart from the model file by file, not an existing folder unless overwriting (and then holding only
    files this project writes), written by one export at a time and renamed into place whole; and, before the
    model is loaded, a folder that can be written there (vaswani.output_checks: its name with the temporary
    name's suffix within the file system's limit, a folder this process can write into, room on the disk for the
    weights at least), so that a conversion is never lost to a write that could not be made."""
    check_output_writable(output_dir, "output_dir (--output_dir)", needed_bytes=_weights_bytes(Path(model_dir)))
    return output_paths.OutputFolder(
        output_dir, {"model_dir (--model)": model_dir}, option="output_dir (--output_dir)",
        overwrite=overwrite_output_dir,
    )


def _weights_bytes(model_dir: Path) -> int | None:
    """The size of the model's weights file (an export holds them once at least); None where it is not a
    regular file of the folder."""
    try:
        found = os.stat(model_dir / "model.safetensors")
    except OSError:
        return None
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def load_seq2seq_model(model_dir: Path, engine: str, **from_pretrained_kwargs):
    """The sequence-to-sequence model (float32, eval mode) and tokenizer in `model_dir`, for an export to `engine`;
    a folder that is not such a model of this project (another model type, a classifier, no tokenizer) is
    refused by name."""
    from transformers import AutoTokenizer

    from ..remote_code.configuration_vaswani import VaswaniConfig
    from ..remote_code.modeling_vaswani import VaswaniForConditionalGeneration

    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"model_dir (--model) {model_dir} is not a folder; pass a model folder (a {SEQ2SEQ_ARCHITECTURE} "
            "saved with save_pretrained, with its tokenizer)."
        )
    check_model_folder(model_dir)  # before any of its files is parsed
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"model_dir (--model) {model_dir} is not a model folder: it has no config.json.")
    raw = json.loads(config_file.read_text(encoding="utf-8"))
    if raw.get("model_type") != VaswaniConfig.model_type:
        raise ValueError(
            f"model_dir (--model) {model_dir} holds a {raw.get('model_type')!r} model; only models of this "
            f"project (model_type {VaswaniConfig.model_type!r}) can be exported."
        )
    architectures = raw.get("architectures") or []
    if SEQ2SEQ_ARCHITECTURE not in architectures:
        raise ValueError(
            f"model_dir (--model) {model_dir} holds a {', '.join(architectures) or 'model of no named class'} "
            f"(config.architectures={architectures}), not a {SEQ2SEQ_ARCHITECTURE}: {engine} runs "
            "sequence-to-sequence models (translation, summarization), not classifiers, taggers or a bare "
            "encoder-decoder without its output layer."
        )
    if not (model_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"model_dir (--model) {model_dir} has no tokenizer (tokenizer.json), which the exported folder needs to "
            "tokenize text. Save it beside the model with tokenizer.save_pretrained(folder)."
        )
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32, **from_pretrained_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    check_vocabulary(model, tokenizer)
    # the exported folder's config and tokenizer point to this project's code only
    keep_own_code_references(model.config, str(model_dir))
    keep_own_tokenizer_code_references(tokenizer, str(model_dir))
    return model.eval(), tokenizer


__all__ = ["ExportArguments", "SEQ2SEQ_ARCHITECTURE", "claim_output_dir", "load_seq2seq_model"]
