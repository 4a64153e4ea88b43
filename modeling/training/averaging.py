"""Averaging the weights of a run's last checkpoints into one model, as the paper does (section 6.1):
scripts/average_checkpoints.py, the `vaswani-average-checkpoints` command."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, HfArgumentParser

from ..cli import run_command
from ..code_references import keep_own_code_references, keep_own_tokenizer_code_references
from ..output_paths import OutputFolder
from ..remote_code.configuration_vaswani import check_regular_files
from ..safe_loading import check_model_folder
from .checkpoints import list_checkpoints, write_averaging_record


@dataclass
class AveragingArguments:
    output_dir: str = field(metadata={"help": "Where to save the averaged model."})
    run_dir: str | None = field(default=None, metadata={"help": "A training run's output_dir (its checkpoints/)."})
    last: int = field(default=5, metadata={"help": "With --run_dir: how many of the newest checkpoints to average."})
    checkpoints: list[str] = field(default_factory=list, metadata={"help": "Or: the checkpoint folders themselves."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (by default an existing folder is refused)."}
    )


def model_folder(path: Path) -> Path:
    """A full training checkpoint keeps its loadable model in `model/`; a saved model folder is one itself."""
    if not path.is_dir():
        raise FileNotFoundError(f"--checkpoints {path}: no such folder; give checkpoint or saved model folders.")
    for folder in (path, path / "model"):  # a FIFO named config.json is named as such, and never opened
        check_regular_files(folder)
    if (path / "model" / "config.json").is_file():
        return path / "model"
    if (path / "config.json").is_file():
        return path
    raise FileNotFoundError(f"{path} is neither a checkpoint of scripts/train.py nor a saved model folder.")


def chosen_checkpoints(args: AveragingArguments) -> list[Path]:
    if bool(args.run_dir) == bool(args.checkpoints):
        raise ValueError("Give either --run_dir (with --last) or --checkpoints, not both and not neither.")
    if args.checkpoints:
        return [Path(path) for path in args.checkpoints]
    if args.last < 1:
        raise ValueError(f"--last must be at least 1, got {args.last}.")
    found = [path for _, path in list_checkpoints(Path(args.run_dir) / "checkpoints")]
    if not found:
        raise FileNotFoundError(f"No checkpoint in {Path(args.run_dir) / 'checkpoints'}.")
    if len(found) < args.last:
        print(f"Only {len(found)} checkpoints in {args.run_dir}; averaging all of them.")
    return found[-args.last :]


# What two checkpoints of one model may differ in: the version of transformers that saved them.
UNCOMPARED_CONFIG_FIELDS = ("transformers_version", "_name_or_path")
# What makes a tokenizer: its model (vocabulary and merges), added tokens, normalizer and pre-tokenizer.
COMPARED_TOKENIZER_PARTS = ("model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder")


def require_one_model(folders: list[Path]) -> None:
    """Refuse checkpoints whose configs or tokenizers differ from the first's: their mean would be saved with one
    tokenizer, which maps some ids to other tokens than the others did, or with a config that is not theirs."""
    first_config, first_tokenizer = _config_of(folders[0]), _tokenizer_of(folders[0])
    for folder in folders[1:]:
        config = _config_of(folder)
        for name in sorted(set(first_config) | set(config)):
            if first_config.get(name) != config.get(name):
                raise ValueError(
                    f"{folder} is not a checkpoint of the model of {folders[0]}: config.json's {name} is "
                    f"{config.get(name)!r}, not {first_config.get(name)!r}. Average checkpoints of one run."
                )
        tokenizer = _tokenizer_of(folder)
        for part in COMPARED_TOKENIZER_PARTS:
            if first_tokenizer.get(part) != tokenizer.get(part):
                raise ValueError(
                    f"{folder} has another tokenizer than {folders[0]} (tokenizer.json's {part!r} differs): the "
                    "same ids would stand for other tokens. Average checkpoints of one run."
                )


def _config_of(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return {name: value for name, value in config.items() if name not in UNCOMPARED_CONFIG_FIELDS}


def _tokenizer_of(folder: Path) -> dict:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json: the averaged model needs the checkpoints' tokenizer.")
    return json.loads(path.read_text(encoding="utf-8"))


def average_models(folders: list[Path]):
    """Load each model in turn and keep a running sum of its weights (in float64), so that memory holds two models
    at most, whatever their number. Returns the first model, holding the mean."""
    averaged = AutoModelForSeq2SeqLM.from_pretrained(folders[0])
    reference = averaged.state_dict()
    sums = {name: tensor.double().clone() for name, tensor in reference.items()}
    for folder in folders[1:]:
        state = AutoModelForSeq2SeqLM.from_pretrained(folder).state_dict()
        if state.keys() != sums.keys() or any(state[n].shape != sums[n].shape for n in sums):
            raise ValueError(f"{folder} holds a model of another shape than {folders[0]}: they cannot be averaged.")
        for name, tensor in state.items():
            sums[name] += tensor.double()
    with torch.no_grad():
        for name, tensor in reference.items():
            tensor.copy_((sums[name] / len(folders)).to(tensor.dtype))
    return averaged


def main(argv: list[str] | None = None) -> Path:
    (args,) = HfArgumentParser(AveragingArguments).parse_args_into_dataclasses(args=argv)
    checkpoints = chosen_checkpoints(args)
    output_dir = Path(args.output_dir)
    inputs = {"a checkpoint of --run_dir" if args.run_dir else "--checkpoints": checkpoints}
    with OutputFolder(output_dir, inputs, overwrite=args.overwrite_output_dir) as output:
        folders = [model_folder(path) for path in checkpoints]
        for folder in folders:
            check_model_folder(folder)  # every one before any is loaded
        require_one_model(folders)
        model = average_models(folders)
        keep_own_code_references(model.config, str(folders[0]))
        tokenizer = AutoTokenizer.from_pretrained(folders[-1])
        keep_own_tokenizer_code_references(tokenizer, str(folders[-1]))
        with output.publish() as folder:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            write_averaging_record(folder, folders)
    print(f"Averaged {len(folders)} checkpoints ({', '.join(str(f) for f in folders)}) into {output_dir}")
    return output_dir


def console_main() -> None:
    """The `vaswani-average-checkpoints` command."""
    run_command(main)


__all__ = [
    "AveragingArguments", "average_models", "chosen_checkpoints", "console_main", "main", "model_folder",
    "require_one_model",
]
