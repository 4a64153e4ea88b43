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
missing or damaged, a progress value of the wrong type or out of range, a random state that Accelerate would skip)
is named with the reason, and the newest one that can is used instead. Each checkpoint also records fingerprints of
the data and the tokenizer it was trained with (DATA_FILE), which a resume compares with its own.

Every folder is written under a temporary name (`.tmp-NAME`, marked as the run's from its first instant), listed in
its manifest (vaswani.training.run_files), flushed to disk, and only then renamed to its final name: a rename within
one file system is atomic, so a folder named `step-*` is always complete, whatever happened during the save.
Published models (`best/`, `last/`) are swapped in: one exchange (renameat2), so that the name holds the earlier
model or the new one at every instant, or where the system lacks it two renames (`.old-NAME` set aside first), which
the next run completes or rolls back. Only the last `keep` checkpoints are kept, and only the run's own are pruned or
replaced. A save that fails (a full disk: an OSError, safetensors' own error, or torch's RuntimeError from its zip
writer) removes its temporary folder and raises CheckpointError in one line, the earlier checkpoints and models left
as they were.

An averaged model carries `checkpoint_averaging.json`, naming the checkpoints it was made of, so that the evaluation
conventions beside its scores can state the averaging (`vaswani.runs.records.weights_provenance`).
"""

import errno
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import (
    is_cuda_available,
    is_hpu_available,
    is_mlu_available,
    is_musa_available,
    is_neuron_available,
    is_sdaa_available,
    is_torch_xla_available,
    is_xpu_available,
)
from accelerate.utils import load as load_weights_only  # torch.load(weights_only=True), numpy's arrays allowed
from safetensors import safe_open

from ..output_paths import describe_write_error, fsync_directory, fsync_tree, is_write_failure
from ..runs import manifests
from ..runs.errors import CheckpointError
from ..runs.records import ARGUMENTS_FILE, AVERAGING_RECORD  # the run's options; an averaged model's record
from ..safe_loading import describe_load_error, read_json_record
from . import run_files
from .run_files import CHECKPOINT, MODEL, RETIRED_PREFIX, TEMPORARY_PREFIX, is_own_checkpoint, mark, seal


CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")
PROGRESS_FILE = "training_progress.json"  # {"num_processes": N, "progress": {...}}: where the run is
LEGACY_PROGRESS_FILE = "custom_checkpoint_0.pkl"  # where earlier versions kept the progress, as a pickle
DATA_FILE = "data_fingerprints.json"  # {what: fingerprint} of the data files and the tokenizer the run trained with


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


def _checkpoint_step(folder: Path) -> int | None:
    """The update count of a checkpoint folder (`step-00009000/`, or its `model/`), None for other folders."""
    for name in (folder.name, folder.parent.name):
        if match := CHECKPOINT_NAME.match(name):
            return int(match.group(1))
    return None


def write_averaging_record(output_dir: Path, folders: list[Path]) -> None:
    """Beside a model that `scripts/average_checkpoints.py` averaged: which checkpoints went into it, so that the
    conventions written next to its scores can say so."""
    record = {"checkpoints": [str(folder) for folder in folders], "steps": [_checkpoint_step(f) for f in folders]}
    (output_dir / AVERAGING_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def is_count(value) -> bool:
    """A non-negative integer, as JSON and pickles hold one (a bool or a float such as 1e8 is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checkpoint_problem(folder: Path, progress_problem: Callable[[dict, int | None], str | None]) -> str | None:
    """Why the run cannot continue exactly from `folder`, in words; None if it can. Reads the JSON records (the
    progress checked field by field with `progress_problem(progress, update)`), the safetensors header and, with
    weights_only=True (no code runs), the schedule and every random state the checkpoint's processes wrote, whose
    contents are checked too (`_random_state_problem`)."""
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
        if (folder / DATA_FILE).exists():  # absent from the checkpoints of earlier versions
            read_json_record(folder / DATA_FILE)
    except ValueError as error:
        return str(error)
    written_by = record.get("num_processes")
    if not is_count(written_by) or written_by == 0:
        return f"{PROGRESS_FILE}: `num_processes` is {describe_value(written_by)}; allowed: an integer, 1 or more"
    problem = progress_problem(record.get("progress"), _checkpoint_step(folder))
    if problem is not None:
        return f"{PROGRESS_FILE}: {problem}"
    random_states = [f"random_states_{index}.pkl" for index in range(written_by)]
    for name in ["scheduler.bin", *random_states]:
        if not (folder / name).is_file():
            return f"{name} is missing, so the run would not continue as it would have"
    if (folder / "model.safetensors").is_file():
        try:
            with safe_open(folder / "model.safetensors", framework="pt"):
                pass
        except Exception as error:  # safetensors raises its own error types for a damaged header
            return f"model.safetensors is damaged ({error})"
    for name in ["scheduler.bin", *random_states]:
        try:
            content = load_weights_only(folder / name, map_location="cpu")
        except Exception as error:  # an UnpicklingError for anything but tensors and plain containers
            return f"{name} cannot be loaded safely ({describe_load_error(error)})"
        if name in random_states and (problem := _random_state_problem(content)) is not None:
            return f"{name} {problem}, so the run would not continue as it would have"
    return None


def _device_states(kind: str) -> Callable:
    """A check of the states of one kind of device's generators (`torch.<kind>.get_rng_state_all()`): one tensor per
    device, each like this machine's own."""
    def check(states) -> None:
        if not isinstance(states, (list, tuple)) or not states:
            raise TypeError(f"a {type(states).__name__}, not a list of one state per {kind} device")
        module = getattr(torch, kind, None)
        reference = module.get_rng_state() if hasattr(module, "get_rng_state") else torch.zeros(1, dtype=torch.uint8)
        for state in states:
            if not torch.is_tensor(state) or state.dtype != reference.dtype or state.dim() != 1:
                raise TypeError(f"holds a {describe_value(state)}, not a {reference.dtype} tensor")
            if hasattr(module, "get_rng_state") and state.shape != reference.shape:
                raise ValueError(f"holds a state of {state.numel()} bytes, not {reference.numel()}")
    return check


def _check_xla_seed(state) -> None:
    if not is_count(state):
        raise TypeError(f"{describe_value(state)}, not a non-negative integer")


def _random_state_checks() -> dict[str, tuple[str, Callable]]:
    """What Accelerate's load_state restores from `random_states_<process>.pkl` on this machine, by key: the
    generators of Python, NumPy and PyTorch's CPU, and those of each kind of device the machine has, with a check
    of each. Follows accelerate.checkpointing.load_accelerator_state (accelerate 1.15), which reads the same keys
    under the same conditions. Each check sets the state on a throwaway generator, or compares it with this
    machine's own, so that it changes none of the run's generators."""
    checks = {
        "random_state": ("Python's `random`", lambda state: random.Random().setstate(state)),
        "numpy_random_seed": ("NumPy's global generator", lambda state: np.random.RandomState().set_state(state)),
        "torch_manual_seed": ("PyTorch's CPU generator", lambda state: torch.Generator().set_state(state)),
    }
    kinds = [kind for kind, available in (("xpu", is_xpu_available), ("hpu", is_hpu_available),
                                          ("neuron", is_neuron_available), ("cuda", is_cuda_available)) if available()]
    kinds += [kind for kind, available in (("mlu", is_mlu_available), ("sdaa", is_sdaa_available),
                                           ("musa", is_musa_available)) if available()][:1]  # the first one only
    for kind in kinds:
        checks[f"torch_{kind}_manual_seed"] = (f"the {kind.upper()} generators", _device_states(kind))
    if is_torch_xla_available():
        checks["xm_seed"] = ("the XLA generator", _check_xla_seed)
    return checks


def _random_state_problem(states) -> str | None:
    """Why `states`, one process's random_states_*.pkl as loaded, would not restore every generator; None if it
    would. Accelerate's load_state sets the generators one after the other and, at the first key missing or value
    it cannot set, stops without a word (the log says "Could not load random states" at the info level): the
    generators after it keep the seed's state, and the run's dropout goes another way than the run that wrote it."""
    if not isinstance(states, dict):
        return f"holds a {describe_value(states)}, not the generators' states"
    for key, (what, check) in _random_state_checks().items():
        if key not in states:
            return f"holds no `{key}` (the state of {what})"
        try:
            check(states[key])
        except Exception as error:  # each generator has its own errors for a state it cannot take
            return f"holds a `{key}` (the state of {what}) that cannot be set ({describe_load_error(error)})"
    if "step" in states and not is_count(states["step"]):  # Accelerate's count of micro-batches
        return f"holds `step` {describe_value(states['step'])}; allowed: an integer, 0 or more"
    return None


def describe_value(value) -> str:
    """A value from a checkpoint in a few words: its type, and its value where that is a short number or text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        try:
            text = repr(value)
        except ValueError:  # an integer of more digits than Python converts to text
            text = ""
        if 0 < len(text) <= 40:
            return f"{type(value).__name__} {text}"
    return type(value).__name__


def resumable_checkpoint(
    root: Path, progress_problem: Callable[[dict, int | None], str | None]
) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under `root` the run can continue from exactly, and why each newer one cannot."""
    skipped = []
    for _, folder in reversed(list_checkpoints(root)):
        problem = checkpoint_problem(folder, progress_problem)
        if problem is None:
            return folder, skipped
        skipped.append(f"{folder}: {problem}")
    return None, skipped


def latest_checkpoint(root: Path) -> Path | None:
    checkpoints = list_checkpoints(root)
    return checkpoints[-1][1] if checkpoints else None


def remove_leftovers(folder: Path, say: Callable[[str], None] = print) -> list[str]:
    """What saves killed on the way left in `folder`: only folders holding the run's mark are removed or put back;
    returns those named so without it (`vaswani.training.run_files.remove_leftovers`)."""
    return run_files.remove_leftovers(folder, say)


def _clear_the_way(temporary: Path, kind: str) -> None:
    """The temporary folder's name free: a killed save's folder there (marked) is removed; anything else is not the
    run's to delete, and the save stops naming it."""
    if os.path.lexists(temporary) and not run_files.remove_own(temporary, kind):
        raise OSError(errno.EEXIST, f"{temporary.name} is in the way and is not the run's (move it away)",
                      str(temporary))


def _swap_into_place(temporary: Path, final: Path, kind: str) -> None:
    """Put the sealed folder `temporary` at `final`: a rename where nothing is there; else, where `final` is the run's
    own (its mark, or of an earlier version, a checkpoint's progress record or a model folder's files), an exchange
    in one step, the earlier folder then removed; where the system has no exchange, the earlier one is set aside as
    `.old-NAME` first (put back on a failure, by the next run after a kill)."""
    if os.path.islink(final):  # (`best` -> a published copy): replaced as a link, what it points to left as it is
        final.unlink()
    if not os.path.lexists(final):
        temporary.rename(final)
        return
    own = is_own_checkpoint(final) if kind == CHECKPOINT else (
        manifests.is_plain_folder(final) and manifests.foreign_entry(final, hashes=False) is None)
    if not own:
        foreign = None if kind == CHECKPOINT else manifests.foreign_entry(final, hashes=False)
        what = f"{foreign.path} ({foreign.kind()}) {foreign.why}" if foreign else f"{final} is not the run's"
        raise OSError(errno.EEXIST, f"{what}, and is not replaced (move it away)", str(final))
    # an earlier version's folder (proven by content) gets the run's mark first, so that one a kill leaves aside is
    # known as the run's by the next run
    if run_files.kind_of(final) != kind:
        seal(final, kind)
    if manifests.exchange(temporary, final):
        shutil.rmtree(temporary)  # the earlier folder
        return
    retired = final.with_name(f"{RETIRED_PREFIX}{final.name}")
    _clear_the_way(retired, kind)
    final.rename(retired)
    try:
        temporary.rename(final)
    except BaseException:
        if not os.path.lexists(final):
            retired.rename(final)
        raise
    shutil.rmtree(retired)


def all_processes_succeeded(accelerator, succeeded: bool) -> bool:
    """Every process learns whether every process succeeded, so that all of them stop together instead of some
    waiting forever for one that failed."""
    flag = torch.tensor([0 if succeeded else 1], device=accelerator.device)
    return int(accelerator.reduce(flag, reduction="sum").item()) == 0


def _save_model(accelerator, model, tokenizer, folder: Path) -> None:
    """`save_pretrained` of the model (gathered from its shards under FSDP or DeepSpeed) and of the tokenizer."""
    state_dict = accelerator.get_state_dict(model)  # every process must call this: it gathers shards
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(folder, state_dict=state_dict, save_function=accelerator.save)
        tokenizer.save_pretrained(folder)


def save_checkpoint(
    accelerator, model, tokenizer, root: Path, step: int, keep: int, records: dict[str, dict] | None = None,
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
            _clear_the_way(temporary, CHECKPOINT)
            mark(temporary, CHECKPOINT)
    except OSError as caught:
        error = caught
    if all_processes_succeeded(accelerator, error is None):
        try:
            accelerator.save_state(str(temporary))
            _save_model(accelerator, model, tokenizer, temporary / "model")
            if accelerator.is_main_process:
                for name, content in (records or {}).items():
                    (temporary / name).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
        except Exception as caught:  # safetensors and torch report a full disk as errors of their own
            if not is_write_failure(caught):
                raise
            error = caught
    if all_processes_succeeded(accelerator, error is None) and accelerator.is_main_process:
        try:
            seal(temporary, CHECKPOINT)
            fsync_tree(temporary)
            # (a checkpoint of this step is there already where a run resumed from its final checkpoint)
            _swap_into_place(temporary, final, CHECKPOINT)
            fsync_directory(root)
            for _, old in list_checkpoints(root)[:-keep]:
                if is_own_checkpoint(old):  # a folder of another's named so is never pruned
                    shutil.rmtree(old)
        except OSError as caught:
            error = caught
    if not all_processes_succeeded(accelerator, error is None):
        reason = describe_write_error(error, root) if error is not None else "another process failed to write its part"
        if accelerator.is_main_process:
            run_files.remove_own(temporary, CHECKPOINT)
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
    then swap it in (`_swap_into_place`). Raises CheckpointError, leaving the previous version in place."""
    temporary = final.with_name(f"{TEMPORARY_PREFIX}{final.name}")
    retired = final.with_name(f"{RETIRED_PREFIX}{final.name}")
    error = None
    try:
        if accelerator.is_main_process:
            _clear_the_way(temporary, MODEL)
            mark(temporary, MODEL)
        _save_model(accelerator, model, tokenizer, temporary)
        if accelerator.is_main_process:
            seal(temporary, MODEL)
            fsync_tree(temporary)
            _swap_into_place(temporary, final, MODEL)
    except Exception as caught:  # safetensors and torch report a full disk as errors of their own
        if not is_write_failure(caught):
            raise
        error = caught
    if not all_processes_succeeded(accelerator, error is None):
        reason = describe_write_error(error, final.parent) if error else "another process failed to write its part"
        if accelerator.is_main_process:
            run_files.remove_own(temporary, MODEL)
            if run_files.kind_of(retired) == MODEL and not os.path.lexists(final):
                retired.rename(final)
        raise CheckpointError(
            f"Could not save the model to {final}: {reason}. The previous version there is intact (its temporary "
            "folder is removed). Free disk space or make the folder writable."
        )


__all__ = [
    "DATA_FILE",
    "PROGRESS_FILE",
    "all_processes_succeeded",
    "checkpoint_path",
    "checkpoint_problem",
    "describe_value",
    "is_count",
    "latest_checkpoint",
    "list_checkpoints",
    "publish_model",
    "remove_leftovers",
    "resumable_checkpoint",
    "save_checkpoint",
    "write_averaging_record",
]
