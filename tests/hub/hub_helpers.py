"""What the publishing tests share beyond helpers.py: the command, the files a published folder holds, a results file
to publish with."""

from helpers import load_script
from vaswani.remote_code.modeling_vaswani import code_files_to_ship
from vaswani.runs.manifests import MANIFEST_FILE


push_to_hub = load_script("push_to_hub")


REPO_ID = "someone/vaswani-tiny-en-de"
CODE_FILES = {path.name for path in code_files_to_ship()}  # the package's remote_code/ folder
EXPECTED_FILES = CODE_FILES | {
    "README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
}
RESULTS = {
    "model": "runs/tiny",
    "task": "translation",
    "dataset": {"name": "bentrevett/multi30k", "config": None, "split": "test", "columns": {"source": "en", "target": "de"},
                "num_examples": 1000},
    "decoding": {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 64},
    "metrics": [
        {"type": "sacrebleu", "name": "sacreBLEU", "value": 12.34, "signature": "nrefs:1|case:mixed|tok:13a"},
        {"type": "tokenized_bleu", "name": "BLEU (tokenized, lowercased)", "value": 14.56, "signature": "moses|lc"},
    ],
    "conventions": "Beam 4, length penalty 0.6, no checkpoint averaging.",
    "time_seconds": 1.5,
    "created": "2026-11-22T10:00:00Z",
}


def files_of(folder) -> dict[str, bytes]:
    """What a folder holds for the Hub: its files but its manifest (the local record of what the command wrote there,
    never uploaded)."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and path.name != MANIFEST_FILE}
