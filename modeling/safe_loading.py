"""The checks a command runs on a model folder (a saved model, or a training checkpoint's) before it loads anything
from it.

A folder given to a command may come from elsewhere. The classes of this project check what they read themselves
(`VaswaniConfig` its config.json, `VaswaniTokenizer` its JSON files, the models their files, with pickled weights
refused, and the memory their weights need), also where a model is loaded with its own copy of their code. But a
command loads through transformers' Auto classes, which parse config.json and tokenizer_config.json before any class
of this project is involved, and a foreign model (`--trust_remote_code`) brings classes of its own: so each
command checks the whole folder first, with the same checks. A failure is one line naming the file.

A model loaded to be scored must also have trained weights for its task's head (`require_trained_head`): a head
that a model lacks would be initialized at random, and scored.
"""

import json
import pickle
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig

from .remote_code.configuration_vaswani import VaswaniConfig, check_json_file
from .remote_code.loading_checks import check_model_files
from .remote_code.modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)
from .runs.records import TRAINER_STATE_FILE
from .remote_code.tokenization_vaswani import check_tokenizer_files


TOKENIZER_CONFIG = "tokenizer_config.json"
MODEL_CLASSES = (VaswaniModel, VaswaniForConditionalGeneration, VaswaniForSequenceClassification,
                 VaswaniForTokenClassification)
# What the Trainer reads from a checkpoint it resumes from, besides the model: its progress as JSON
# (TRAINER_STATE_FILE), and the states it pickles, which it loads with torch.load(weights_only=True) (tensors and plain
# data only; no code runs).
TRAINER_STATE_PICKLES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")


def check_model_folder(path) -> None:
    """Refuse a model folder any of whose files would be unsafe to load, or that transformers would fail on in
    many lines: a JSON file too large or too deeply nested to parse, a damaged safetensors header, pickled weights,
    weights that are not finite floats, a tokenizer config without its tokenizer.json or with a special token that is
    not text, a config of this project's classes under another model type, weights of other shapes than the
    config's. One line naming the file. A path that is not a local folder (a Hub id) is left to transformers."""
    folder = Path(str(path))
    if folder.is_dir():
        check_model_files(folder)
        check_tokenizer_files(folder)
        _check_tokenizer_config(folder)
        _check_model_type(folder)
        _check_weight_shapes(folder)


SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _check_tokenizer_config(folder: Path) -> None:
    path = folder / TOKENIZER_CONFIG
    if not path.is_file():
        return
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder} has {TOKENIZER_CONFIG} but no tokenizer.json, which holds the tokenizer "
                                "itself: copy it from where the model was saved.")
    config = _json_object(path)
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if value is not None and not isinstance(value, (str, dict)):
            raise ValueError(f"{path}: `{name}` is {value!r}; a special token is given as its text (e.g. \"</s>\"), "
                             "not as an id.")


def _check_model_type(folder: Path) -> None:
    """A config naming this project's classes in `auto_map` under another model type is damaged: transformers would
    ask for trust_remote_code to run the folder's code."""
    path = folder / "config.json"
    if not path.is_file():
        return
    config = _json_object(path)
    auto_map = config.get("auto_map")
    ours = isinstance(auto_map, dict) and any(str(value).startswith("modeling_vaswani.") for value in auto_map.values())
    if ours and config.get("model_type") != VaswaniConfig.model_type:
        raise ValueError(f"{path}: model_type is {config.get('model_type')!r}, but its auto_map names this project's "
                         f"classes (model_type {VaswaniConfig.model_type!r}): the config is damaged; save or download "
                         "the model again.")


def _check_weight_shapes(folder: Path) -> None:
    """Each tensor of the weights has the shape the config gives it (a model of the config's class built on the meta
    device, no memory): transformers would fail halfway through loading, in a report of many lines."""
    config_file, weights_file = folder / "config.json", folder / "model.safetensors"
    if not (config_file.is_file() and weights_file.is_file()):
        return
    config = _json_object(config_file)
    classes = {cls.__name__: cls for cls in MODEL_CLASSES}
    architecture = next(iter(config.get("architectures") or []), None)
    if config.get("model_type") != VaswaniConfig.model_type or architecture not in classes:
        return
    with torch.device("meta"):
        expected = {name: tuple(tensor.shape) for name, tensor in
                    classes[architecture](VaswaniConfig.from_pretrained(folder)).state_dict().items()}
    with safe_open(str(weights_file), framework="pt") as weights:
        for name in weights.keys():
            shape = tuple(weights.get_slice(name).get_shape())
            if name in expected and shape != expected[name]:
                raise ValueError(f"{weights_file}: {name} has the shape {list(shape)}, and config.json makes it "
                                 f"{list(expected[name])}: the weights and the config are not of one model.")


def _json_object(path: Path) -> dict:
    try:
        return read_json_record(path)
    except ValueError as error:
        raise ValueError(f"{path.parent}: {error}: save or download the model again.") from None


def check_trainer_checkpoint(path) -> None:
    """`check_model_folder` for a Trainer checkpoint to resume from, plus its progress file, and each state the
    Trainer will unpickle, loaded first the way it will load it: one holding anything but tensors and plain data is
    named in one line, instead of torch's advice to turn its guard off."""
    # imported here: they load the Trainer's and Accelerate's modules, which only fine-tuning needs
    from transformers.trainer_pt_utils import safe_globals

    folder = Path(str(path))
    check_model_folder(folder)
    if (folder / TRAINER_STATE_FILE).is_file():
        check_json_file(folder / TRAINER_STATE_FILE)
    for pattern in TRAINER_STATE_PICKLES:
        for state_file in sorted(folder.glob(pattern)):
            try:
                with safe_globals():  # numpy's random state, allowed as the Trainer allows it
                    torch.load(state_file, map_location="cpu", weights_only=True)
            except Exception as error:  # UnpicklingError for anything beyond tensors and plain data
                raise ValueError(
                    f"{folder} cannot be resumed from: {state_file.name}: {describe_load_error(error)}."
                ) from None


def require_trained_head(auto_class, model_name_or_path: str, task: str, trust_remote_code: bool = False):
    """Load a model for evaluation, refusing one that lacks weights of the task's head (they would be random)."""
    check_model_folder(model_name_or_path)
    model, info = auto_class.from_pretrained(
        model_name_or_path, trust_remote_code=trust_remote_code, output_loading_info=True
    )
    if info["missing_keys"]:
        # the config as saved names the class the model was trained as
        saved = AutoConfig.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
        trained_as = ", ".join(saved.architectures or ["an unknown architecture"])
        raise ValueError(
            f"{model_name_or_path} is a model of {trained_as}, not fine-tuned for {task}: it has no weights for "
            f"{', '.join(module_names(info['missing_keys']))}, which would be random. Fine-tune it for {task} first "
            "(scripts/finetune_*.py), then evaluate the fine-tuned model."
        )
    return model


def module_names(keys) -> list[str]:
    """Weight names shortened to the modules that hold them, one entry per stack of layers:
    `model.decoder.layers.1.self_attn.q_proj.weight` -> `model.decoder.layers`, `classifier.bias` -> `classifier`."""
    names = set()
    for key in keys:
        parts = key.split(".")[:-1] or key.split(".")
        for position, part in enumerate(parts):
            if part.isdigit():
                parts = parts[:position]
                break
        names.add(".".join(parts))
    return sorted(names)


def read_json_record(path: Path) -> dict:
    """A JSON object from a checkpoint; ValueError (with the file's name) if it is not one."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # ValueError: not JSON, or an integer of 5,000 digits
        raise ValueError(f"{path.name} cannot be read ({error})") from None
    if not isinstance(content, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return content


def describe_load_error(error: Exception) -> str:
    """One line for an error of loading a checkpoint file."""
    if isinstance(error, pickle.UnpicklingError):
        return "it holds objects other than tensors and plain data, which are refused: no code in it ran"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


__all__ = [
    "check_model_folder",
    "check_trainer_checkpoint",
    "describe_load_error",
    "module_names",
    "read_json_record",
    "require_trained_head",
]
