"""The checks a model of this project runs on what it loads, before anything is allocated: the files of a folder from
elsewhere (its JSON files bounded, its safetensors weights readable, floating point and finite, pickled weights
refused) and whether the weights fit in the memory left where they would be built.

The models' `from_pretrained` and `from_config` run them (modeling_vaswani.py), the tokenizer asks here for the memory
left (tokenization_vaswani.py), and the commands run the same checks on a whole model folder first
(`vaswani.safe_loading`). This file is copied into every saved model with the model file, which imports it, so it
imports from this project only with relative imports.
"""

import os
from pathlib import Path

import torch

from .configuration_vaswani import VaswaniConfig, check_json_file, check_regular_files


# The weights files transformers unpickles (torch.load) where a folder has no safetensors weights.
PICKLED_WEIGHTS_PATTERNS = ("pytorch_model*.bin", "pytorch_model.bin.index.json")
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
# The files of a model folder that transformers parses as JSON.
MODEL_JSON_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json")


def check_model_files(folder: Path) -> None:
    """What a model folder from elsewhere must pass before anything in it is parsed or loaded: its JSON files are
    bounded (`check_json_file`), its safetensors headers readable, and pickled weights are refused; before any of
    them is opened, every entry is a regular file or a folder (`check_regular_files`: no FIFO, device or socket)."""
    check_regular_files(folder)
    for name in MODEL_JSON_FILES:
        if (folder / name).is_file():
            check_json_file(folder / name)
    refuse_pickled_weights(folder)
    for weights_file in sorted(folder.glob("*.safetensors")):
        check_weights_file(weights_file)


def refuse_pickled_weights(folder: Path) -> None:
    """Refuse a folder whose weights would be unpickled (`pytorch_model.bin`, with no safetensors weights beside it):
    OSError naming the file. Pickled weights are never loaded here: unpickling runs whatever code the file holds,
    and torch's `weights_only` guard, which would stop most of it, answers with advice to turn itself off."""
    if any((folder / name).is_file() for name in SAFETENSORS_WEIGHTS):
        return  # transformers and the Trainer read the safetensors weights and ignore any pickle beside them
    pickled = sorted(path for pattern in PICKLED_WEIGHTS_PATTERNS for path in folder.glob(pattern))
    if pickled:
        raise OSError(
            f"{pickled[0]} is refused: it holds pickled weights, which are never loaded (unpickling a file can run "
            "code hidden in it). Convert it to safetensors (model.safetensors) with a tool you trust, or save the "
            "model again with save_pretrained where it was made."
        )


def check_weights_file(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt"):
            pass
    except Exception as error:  # the safetensors reader raises its own exception type
        raise OSError(
            f"Cannot read the weights file {path}: {error}. The file is truncated or is not a safetensors file; "
            "save or download the model again."
        ) from error
    check_weight_values(path)


# The dtypes a model of this project is saved in (safetensors' names): floating point, as it trains and runs.
FLOAT_WEIGHT_DTYPES = ("F64", "F32", "F16", "BF16")


def check_weight_values(path: Path) -> None:
    """Refuse weights a model of this project could not have saved, in one line naming the file and the tensor: a
    weight or bias of integers or booleans (loaded, it would be cast without a word) or a tensor holding NaN or
    infinity (the model would give NaN, and generate one output whatever the input). Read one tensor at a time.
    Other tensors than weights and biases, which no model of this project has, are left to the loader (unexpected
    keys)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as weights:
        for name in weights.keys():
            dtype = weights.get_slice(name).get_dtype()
            if dtype not in FLOAT_WEIGHT_DTYPES and not name.endswith((".weight", ".bias")):
                continue
            if dtype not in FLOAT_WEIGHT_DTYPES:
                raise OSError(f"The weights file {path} holds {name} as {dtype}: a model's weights are floating point "
                              f"({', '.join(FLOAT_WEIGHT_DTYPES)}). Save or download the model again.")
            if not torch.isfinite(weights.get_tensor(name)).all():
                raise OSError(f"The weights file {path} holds NaN or infinite values in {name}: the model would "
                              "compute NaN. Use a checkpoint saved before the training diverged, or download it again.")


def check_fits_in_memory(config: VaswaniConfig, dtype: torch.dtype | None = None, device=None) -> None:
    """Refuse a config whose weights would not fit in the memory left on `device` (default: where new tensors go),
    before anything is allocated: otherwise the allocator fails half-way through building the model, or the process
    is killed. Only the weights are counted, so a model that passes may still not train (gradients and optimizer
    states take about three times as much again)."""
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device) if device is not None else torch.get_default_device()
    available = available_memory(device)
    if available is None or not hasattr(config, "estimated_parameters"):
        return  # a device whose free memory cannot be read (meta, mps), or the config of an older model
    parameters = config.estimated_parameters()
    needed = parameters * dtype.itemsize
    if needed > available:
        raise ValueError(
            f"This config's weights need about {in_units(needed)} ({parameters:,} parameters in "
            f"{str(dtype).removeprefix('torch.')}), more than the {in_units(available)} of memory available on "
            f"{device.type}: lower d_model, encoder_layers / decoder_layers, encoder_ffn_dim / decoder_ffn_dim or "
            "vocab_size, or load the weights in a smaller dtype."
        )


# Copies of one step's scores over the vocabulary that a generate step holds at once (the logits, their float32
# log-softmax, the scores of every continuation of every beam); and a floor under which a call is never refused.
SCORE_COPIES = 3
SMALL_GENERATION_BYTES = 2**28  # 256 MiB


def generation_bytes(config, rows: int, source_length: int, target_length: int, itemsize: int = 4) -> int | None:
    """About how many bytes `generate()` holds at its last step for `rows` sequences (inputs x beams, or x returned
    sequences) of a source of `source_length` tokens and a target of `target_length`: each decoder layer's keys and
    values of the target so far and of the source, the encoder's output, and a step's scores over the vocabulary. A
    lower bound (the model's activations of one step are left out); None for a config that does not say its sizes."""
    try:
        d_model, layers, vocabulary = int(config.d_model), int(config.decoder_layers), int(config.vocab_size)
    except (AttributeError, TypeError, ValueError):
        return None
    per_row = (layers * 2 * (target_length + source_length) + source_length) * d_model * itemsize
    per_row += SCORE_COPIES * vocabulary * 4
    return rows * per_row


def check_generation_fits(config, rows: int, source_length: int, target_length: int, what: str,
                          dtype: torch.dtype | None = None, device=None) -> None:
    """Refuse a generation whose caches and scores (`generation_bytes`) would not fit in the memory left on `device`
    before it starts: `num_beams=100000` made a shipped model ask for 40-160 GB, and the allocator's error (or the
    kernel's kill) came long after. `what` names the numbers the rows come from ("a batch of 16 inputs x num_beams
    100000"), for the message; ValueError in one line."""
    needed = generation_bytes(config, rows, source_length, target_length, (dtype or torch.float32).itemsize)
    if needed is None or needed <= SMALL_GENERATION_BYTES:
        return
    device = torch.device(device) if device is not None else torch.device("cpu")
    available = available_memory(device)
    if available is not None and needed > available:
        raise ValueError(
            f"Generating {rows:,} sequences at once ({what}), up to {target_length:,} tokens each from sources of up "
            f"to {source_length:,}, needs at least {in_units(needed)} of memory, more than the {in_units(available)} "
            f"available on {device.type}: lower num_beams, num_return_sequences or the batch size."
        )


def in_units(count: int) -> str:
    """A number of bytes in words: "52.1 GB", "300.5 KB"."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} bytes"


def loading_dtype(dtype, config: VaswaniConfig) -> torch.dtype | None:
    """The dtype `from_pretrained` / `from_config` will build the weights in, from their `dtype` argument ("auto":
    the config's); None where it is not known (the default dtype is then assumed)."""
    if dtype == "auto":
        dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if isinstance(dtype, torch.dtype) else None


def loading_device(device_map) -> torch.device | None:
    """The one device `from_pretrained` puts the weights on, from its `device_map` (none: the CPU); None where the
    weights are spread by a plan ("auto", a dict), which Accelerate sizes itself."""
    if device_map is None:
        return torch.device("cpu")
    try:
        return torch.device(device_map)
    except (RuntimeError, TypeError):
        return None


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device`; None where that cannot be read."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return None  # transformers says so itself
        free, _ = torch.cuda.mem_get_info(device)
        return free
    if device.type == "cpu":
        return cpu_memory_available()
    return None


def cpu_memory_available() -> int | None:
    """What the kernel can give without swapping (MemAvailable; the free pages where /proc/meminfo cannot be read),
    at most a container's memory limit (its cgroup's)."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit = cgroup_memory_limit()
    return available if limit is None else min(available, limit)


# The memory limit of the process's cgroup (a container's), version 2 then version 1. Only the limit is read: the
# cgroup's usage counts the page cache, which the kernel gives back when asked.
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def cgroup_memory_limit() -> int | None:
    for limit_file in CGROUP_MEMORY_LIMITS:
        try:
            limit = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():  # "max": no limit
            return int(limit)
    return None


__all__ = [
    "available_memory",
    "check_fits_in_memory",
    "check_generation_fits",
    "check_model_files",
    "check_weights_file",
    "cpu_memory_available",
    "generation_bytes",
    "loading_device",
    "loading_dtype",
    "refuse_pickled_weights",
]
