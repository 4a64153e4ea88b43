"""Checkpoints that a crash, a kill or a full disk cannot break.

A full checkpoint (`checkpoints/step-00001000/`) holds everything a run needs to continue exactly: what
`accelerator.save_state` writes (model, optimizer, schedule, gradient scaler, every process's random number
generators), the training progress (update count, data position, best score) and the run's options as JSON, plus a
`model/` folder saved with `save_pretrained` and the tokenizer, loadable on its own (and what
`scripts/average_checkpoints.py` averages).

A checkpoint folder may come from elsewhere (shared, downloaded, writable by someone else), so resuming never
unpickles: the progress and the options are JSON, the weights safetensors, and the optimizer, schedule and random
states that Accelerate pickles are read with `torch.load(weights_only=True)`, which builds tensors and plain
containers and refuses anything else (no code runs). A checkpoint that cannot be resumed from exactly (a state
missing or damaged, written by another number of processes) is named with the reason, and the newest one that can
is used instead.

Every folder is written under a temporary name, flushed to disk, and only then renamed to its final name: a rename
within one file system is atomic, so a folder named `step-*` is always complete, whatever happened during the save.
Published models (`best/`, `last/`) are swapped in the same way. Only the last `keep` checkpoints are kept. A save
that fails (a full disk: an OSError, safetensors' own error, or torch's RuntimeError from its zip writer) removes its
temporary folder and raises CheckpointError in one line, the earlier checkpoints and models left as they were.

An averaged model carries `checkpoint_averaging.json`, naming the checkpoints it was made of, so that the evaluation
conventions beside its scores can state the averaging (`weights_provenance`).
"""

import json
import logging
import os
import pickle
import re
import shutil
import signal
from pathlib import Path

import torch
from accelerate.utils import load as load_weights_only  # torch.load(weights_only=True), numpy's arrays allowed
from safetensors import SafetensorError, safe_open

from ..model_card import ARGUMENTS_FILE  # the options of the run that wrote the checkpoint
from .errors import CheckpointError


CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")
TEMPORARY_PREFIX = ".tmp-"
RETIRED_PREFIX = ".old-"
AVERAGING_RECORD = "checkpoint_averaging.json"
PROGRESS_FILE = "training_progress.json"  # {"num_processes": N, "progress": {...}}: where the run is
LEGACY_PROGRESS_FILE = "custom_checkpoint_0.pkl"  # where earlier versions kept the progress, as a pickle


class _TiedWeightsNotice(logging.Filter):
    """`accelerator.save_state` announces, at every save, that it stores the shared embedding matrix once rather than
    three times. The model ties them by design (section 3.4) and `load_state` ties them again: not worth a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


logging.getLogger("accelerate.utils.other").addFilter(_TiedWeightsNotice())


def checkpoint_path(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints under `root`, oldest first (temporary folders of an interrupted save excluded)."""
    if not root.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in root.iterdir() if (match := CHECKPOINT_NAME.match(path.name))]
    return sorted(found)


def checkpoint_step(folder: Path) -> int | None:
    """The update count of a checkpoint folder (`step-00009000/`, or its `model/`), None for other folders."""
    for name in (folder.name, folder.parent.name):
        if match := CHECKPOINT_NAME.match(name):
            return int(match.group(1))
    return None


def write_averaging_record(output_dir: Path, folders: list[Path]) -> None:
    """Beside a model that `scripts/average_checkpoints.py` averaged: which checkpoints went into it, so that the
    conventions written next to its scores can say so."""
    record = {"checkpoints": [str(folder) for folder in folders], "steps": [checkpoint_step(f) for f in folders]}
    (output_dir / AVERAGING_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def weights_provenance(model: str) -> str:
    """In words, for the conventions beside a model's scores: the average of which checkpoints, when the model folder
    holds the record of `scripts/average_checkpoints.py`, else the checkpoint as given."""
    record_file = Path(model) / AVERAGING_RECORD
    if not record_file.is_file():
        return "the checkpoint as given (no checkpoint averaging recorded in it)"
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if None in record["steps"]:  # folders that are not checkpoints of scripts/train.py: named as given
        which = ", ".join(record["checkpoints"])
    else:
        which = "updates " + ", ".join(f"{step:,}" for step in record["steps"])
    return f"the mean of {len(record['checkpoints'])} checkpoints ({which}; scripts/average_checkpoints.py)"


def read_json_record(path: Path) -> dict:
    """A JSON object from a checkpoint; ValueError (with the file's name) if it is not one."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path.name} cannot be read ({error})") from None
    if not isinstance(content, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return content


def checkpoint_problem(folder: Path, num_processes: int) -> str | None:
    """Why the run cannot continue exactly from `folder`, in words; None if it can. Reads the JSON records, the
    safetensors header and, with weights_only=True (no code runs), the schedule and random states."""
    if not (folder / PROGRESS_FILE).is_file():
        if (folder / LEGACY_PROGRESS_FILE).exists():
            return (
                f"it keeps the training progress in {LEGACY_PROGRESS_FILE}, a pickle written by an earlier version "
                "of this project, and pickles are never loaded (loading one can run any code it holds)"
            )
        return f"{PROGRESS_FILE} is missing"
    try:
        record = read_json_record(folder / PROGRESS_FILE)
        read_json_record(folder / ARGUMENTS_FILE)
    except ValueError as error:
        return str(error)
    written_by = record.get("num_processes")
    if written_by != num_processes:
        return (
            f"it was written by {written_by} process(es) and this run has {num_processes}: each process resumes its "
            "own share of the data and its own random state"
        )
    states = ["scheduler.bin", *(f"random_states_{index}.pkl" for index in range(num_processes))]
    for name in states:
        if not (folder / name).is_file():
            return f"{name} is missing, so the run would not continue as it would have"
    if (folder / "model.safetensors").is_file():
        try:
            with safe_open(folder / "model.safetensors", framework="pt"):
                pass
        except Exception as error:  # safetensors raises its own error types for a damaged header
            return f"model.safetensors is damaged ({error})"
    for name in states:
        try:
            load_weights_only(folder / name, map_location="cpu")
        except Exception as error:  # an UnpicklingError for anything but tensors and plain containers
            return f"{name} cannot be loaded safely ({describe_load_error(error)})"
    return None


def describe_load_error(error: Exception) -> str:
    """One line for an error of loading a checkpoint file."""
    if isinstance(error, pickle.UnpicklingError):
        return "it holds objects other than tensors and plain data, which are refused: no code in it ran"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def resumable_checkpoint(root: Path, num_processes: int) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under `root` the run can continue from exactly, and why each newer one cannot."""
    skipped = []
    for _, folder in reversed(list_checkpoints(root)):
        problem = checkpoint_problem(folder, num_processes)
        if problem is None:
            return folder, skipped
        skipped.append(f"{folder}: {problem}")
    return None, skipped


def latest_checkpoint(root: Path) -> Path | None:
    checkpoints = list_checkpoints(root)
    return checkpoints[-1][1] if checkpoints else None


def remove_leftovers(folder: Path) -> None:
    """Temporary folders left by a save that was interrupted; and a published model caught between its two renames
    (`best/` moved aside, the new one not yet in place) is put back."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.name.startswith(RETIRED_PREFIX):
            original = path.with_name(path.name[len(RETIRED_PREFIX) :])
            if original.exists():
                shutil.rmtree(path)
            else:
                path.rename(original)
        elif path.name.startswith(TEMPORARY_PREFIX):
            shutil.rmtree(path)


def all_processes_succeeded(accelerator, succeeded: bool) -> bool:
    """Every process learns whether every process succeeded, so that all of them stop together instead of some
    waiting forever for one that failed."""
    flag = torch.tensor([0 if succeeded else 1], device=accelerator.device)
    return int(accelerator.reduce(flag, reduction="sum").item()) == 0


def fsync_tree(folder: Path) -> None:
    """Push the folder's files to the disk before the rename that publishes them (a kill alone would not lose
    them, a power cut could)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_directory(folder)


def fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_model(accelerator, model, tokenizer, folder: Path) -> None:
    """`save_pretrained` of the model (gathered from its shards under FSDP or DeepSpeed) and of the tokenizer."""
    state_dict = accelerator.get_state_dict(model)  # every process must call this: it gathers shards
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(folder, state_dict=state_dict, save_function=accelerator.save)
        tokenizer.save_pretrained(folder)


# How torch.save reports a failed write: a RuntimeError from its zip writer (PytorchStreamWriter), whose message
# names no cause ("[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 534" on a full disk, raised while
# handling "basic_ios::clear: iostream error"; "PytorchStreamWriter failed writing file data/0: file write failed" in
# other versions)
TORCH_WRITE_FAILURES = ("PytorchStreamWriter", "inline_container.cc", "iostream error", "file write failed")


def is_write_failure(error: BaseException) -> bool:
    """Whether `error` says that a file could not be written (rather than a bug to show with its traceback)."""
    if isinstance(error, (OSError, SafetensorError)):
        return True
    return isinstance(error, RuntimeError) and any(
        marker in str(cause) for cause in (error, error.__context__) for marker in TORCH_WRITE_FAILURES
    )


def describe_write_error(error: BaseException, folder: Path) -> str:
    """One line for a failed write into `folder`; torch's own message names no cause, so the space left on that disk
    (before the temporary files go) is added."""
    if isinstance(error, (OSError, SafetensorError)):
        return str(error)
    lines = str(error).strip().splitlines()
    try:
        free = f"{shutil.disk_usage(folder if folder.exists() else folder.parent).free:,} bytes left on that disk"
    except OSError:
        free = "free space unknown"
    return f"torch could not write a file ({lines[0] if lines else type(error).__name__}; {free})"


def save_checkpoint(
    accelerator, model, tokenizer, root: Path, step: int, keep: int, records: dict[str, dict] | None = None,
    kill_halfway: bool = False,
) -> Path:
    """Write the full checkpoint of update `step` atomically, with `records` (file name -> content) as JSON files;
    keep the last `keep`. Raises CheckpointError (on every process) if it cannot be written, with the earlier
    checkpoints left as they were."""
    final = checkpoint_path(root, step)
    temporary = root / f"{TEMPORARY_PREFIX}{final.name}"
    error = None
    try:
        if accelerator.is_main_process:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
    except OSError as caught:
        error = caught
    if all_processes_succeeded(accelerator, error is None):
        try:
            accelerator.save_state(str(temporary))
            save_model(accelerator, model, tokenizer, temporary / "model")
            if accelerator.is_main_process:
                for name, content in (records or {}).items():
                    (temporary / name).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
        except Exception as caught:  # safetensors and torch report a full disk as errors of their own
            if not is_write_failure(caught):
                raise
            error = caught
    if kill_halfway:
        os.kill(os.getpid(), signal.SIGKILL)  # testing only: die with a half-finished save on disk
    if all_processes_succeeded(accelerator, error is None) and accelerator.is_main_process:
        try:
            fsync_tree(temporary)
            if final.exists():  # saved at this step already (a run resumed from its final checkpoint)
                shutil.rmtree(final)
            temporary.rename(final)
            fsync_directory(root)
            for _, old in list_checkpoints(root)[:-keep]:
                shutil.rmtree(old)
        except OSError as caught:
            error = caught
    if not all_processes_succeeded(accelerator, error is None):
        reason = describe_write_error(error, root) if error is not None else "another process failed to write its part"
        if accelerator.is_main_process:
            shutil.rmtree(temporary, ignore_errors=True)
        latest = latest_checkpoint(root)
        kept = f"the latest complete one is {latest}" if latest else "there is no earlier checkpoint"
        raise CheckpointError(
            f"Could not save the checkpoint of update {step} to {final}: {reason}. Its temporary folder is removed; "
            f"earlier checkpoints are intact ({kept}). Free disk space or make {root} writable, then continue with "
            "--resume."
        )
    return final


def publish_model(accelerator, model, tokenizer, final: Path) -> None:
    """Save a loadable model folder (`best/`, `last/`) so that a reader never finds it half written: write it aside,
    then swap it in with two renames. Raises CheckpointError, leaving the previous version in place."""
    temporary = final.with_name(f"{TEMPORARY_PREFIX}{final.name}")
    retired = final.with_name(f"{RETIRED_PREFIX}{final.name}")
    error = None
    try:
        if accelerator.is_main_process:
            shutil.rmtree(temporary, ignore_errors=True)
        save_model(accelerator, model, tokenizer, temporary)
        if accelerator.is_main_process:
            fsync_tree(temporary)
            if final.exists():
                final.rename(retired)
            temporary.rename(final)
            shutil.rmtree(retired, ignore_errors=True)
    except Exception as caught:  # safetensors and torch report a full disk as errors of their own
        if not is_write_failure(caught):
            raise
        error = caught
    if not all_processes_succeeded(accelerator, error is None):
        reason = describe_write_error(error, final.parent) if error else "another process failed to write its part"
        if accelerator.is_main_process:
            shutil.rmtree(temporary, ignore_errors=True)
            if retired.exists() and not final.exists():
                retired.rename(final)
        raise CheckpointError(
            f"Could not save the model to {final}: {reason}. The previous version there is intact (its temporary "
            "folder is removed). Free disk space or make the folder writable."
        )
