"""The checks a command runs on a checkpoint folder before it loads anything from it.

A folder given to a command may come from elsewhere. The classes of this project check what they read themselves
(`VaswaniConfig` its config.json, `VaswaniTokenizer` its JSON files, the models their files, with pickled weights
refused, and the memory their weights need), also where a checkpoint is loaded with its own copy of their code. But a
command loads through transformers' Auto classes, which parse config.json and tokenizer_config.json before any class
of this project is involved, and a foreign checkpoint (`--trust_remote_code`) brings classes of its own: so each
command checks the whole folder first, with the same checks. A failure is one line naming the file.
"""

from pathlib import Path

import torch

from .configuration_vaswani import check_json_file
from .modeling_vaswani import check_model_files
from .tokenization_vaswani import check_tokenizer_files


# What the Trainer reads from a checkpoint it resumes from, besides the model: its progress as JSON, and the states it
# pickles, which it loads with torch.load(weights_only=True) (tensors and plain data only; no code runs).
TRAINER_STATE_JSON = "trainer_state.json"
TRAINER_STATE_PICKLES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")


def check_checkpoint_folder(path) -> None:
    """Refuse a checkpoint folder any of whose files would be unsafe to load: a JSON file too large or too deeply
    nested to parse, a damaged safetensors header, pickled weights. A path that is not a local folder (a Hub id) is
    left to transformers."""
    folder = Path(str(path))
    if folder.is_dir():
        check_model_files(folder)
        check_tokenizer_files(folder)


def check_trainer_checkpoint(path) -> None:
    """`check_checkpoint_folder` for a Trainer checkpoint to resume from, plus its progress file, and each state the
    Trainer will unpickle, loaded first the way it will load it: one holding anything but tensors and plain data is
    named in one line, instead of torch's advice to turn its guard off."""
    # imported here: they load the Trainer's and Accelerate's modules, which only fine-tuning needs
    from transformers.trainer_pt_utils import safe_globals

    from .training.checkpoints import describe_load_error

    folder = Path(str(path))
    check_checkpoint_folder(folder)
    if (folder / TRAINER_STATE_JSON).is_file():
        check_json_file(folder / TRAINER_STATE_JSON)
    for pattern in TRAINER_STATE_PICKLES:
        for state_file in sorted(folder.glob(pattern)):
            try:
                with safe_globals():  # numpy's random state, allowed as the Trainer allows it
                    torch.load(state_file, map_location="cpu", weights_only=True)
            except Exception as error:  # UnpicklingError for anything beyond tensors and plain data
                raise ValueError(
                    f"{folder} cannot be resumed from: {state_file.name}: {describe_load_error(error)}."
                ) from None


__all__ = ["check_checkpoint_folder", "check_trainer_checkpoint"]
