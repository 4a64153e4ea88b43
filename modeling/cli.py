"""What every command in scripts/ shares about its command line.

How it ends on a problem with its input or its environment (a bad argument, a missing file, an extra not installed):
one line, `script.py: error: <message>`, and exit status 1. The messages say what to do; a traceback would bury them.
Anything else is a bug and keeps its traceback. A training command stopped by SIGTERM or SIGUSR1 after saving a
checkpoint (`vaswani.runs.preemption`) says so in one line and exits with status 75, "resumable".

    if __name__ == "__main__":
        run_command(main)

How it reads what its options share: `parse_config_overrides`, the one reader of `--config_overrides
"key=value,key=value"`, and `require_folder_or_hub_id`, which names a missing model or tokenizer folder as
missing.

How it checks its numeric options, right after parsing and before anything is loaded: `check_numbers` holds every
integer and float option of the parsed dataclasses to its type and to a finite value (a config file's values and
`nan` / `inf` pass the parser as they are), and each option named in its rules (`Allowed`) to its range, in one line
naming the option, the value and what is allowed.
"""

import dataclasses
import json
import math
import os
import reprlib
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .remote_code.configuration_vaswani import misspelled_fields, special_kind
from .runs.errors import TrainingError
from .runs.launch_status import report_exit, report_start
from .runs.preemption import StoppedBySignal


# OSError: missing files, folders given as files, full disks; TrainingError: a folder in use by another run, a
# checkpoint that cannot be resumed or written (vaswani.runs.errors: messages that say what to do)
USER_ERRORS = (ValueError, OSError, ImportError, TrainingError)


def run_command(main, *more_user_errors: type[BaseException]) -> None:
    """Call `main(sys.argv[1:])`, reporting the user's errors (and `more_user_errors`) as one line, and a stop by a
    signal as one line (from the first process of a distributed launch) with its own exit status. Under
    `vaswani.runs.launch_status.run_reporting_status` (a launcher's command run so that its status says
    "resumable"), the process reports its id and its exit status."""
    report_start()
    status = 0
    try:
        main(sys.argv[1:])
    except StoppedBySignal as stop:
        if os.environ.get("RANK", "0") == "0":
            print(f"{Path(sys.argv[0]).name}: {stop}", file=sys.stderr)
        status = stop.exit_status
    except (*USER_ERRORS, *more_user_errors) as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        status = 1
    except SystemExit as exit_:  # argparse's usage errors (2), --help (0)
        report_exit(exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None))
        raise
    except BaseException:  # a bug: its traceback
        report_exit(1)
        raise
    report_exit(status)
    if status:
        sys.exit(status)


# --- models and tokenizers by folder or Hub id ---------------------------------------------------------------


def require_folder_or_hub_id(value: str, option: str, needed_file: str = "config.json") -> None:
    """Where a model or a tokenizer is read from (`--model`, `--tokenizer`, `--model_name_or_path`): a folder
    that is there, or a Hub repository id. A path that is not there is said to be missing (transformers would call it
    a malformed repository id), and so is a Hub id that cannot be had offline (HF_HUB_OFFLINE set, `needed_file` of
    the repository not in the cache): one line naming the option and the value, where transformers gives two lines
    naming neither. Any other Hub id goes to the Hub."""
    if os.path.lexists(value):
        if not os.path.exists(value):  # a link that leads nowhere, or round in a loop: not "no such folder"
            kind = special_kind(value) or f"a symbolic link to {os.readlink(value)}, which is not there"
            raise FileNotFoundError(f"{option} {value}: it is {kind}. Give the folder itself.")
        return
    if not _looks_like_hub_repo_id(value):
        raise FileNotFoundError(f"{option} {value}: no such folder. Give a folder that exists, or a Hub repository id.")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(value, needed_file), str):
        raise FileNotFoundError(
            f"{option} {value}: no such folder, and as a Hub repository id it is not in the cache while Hub downloads "
            "are off (HF_HUB_OFFLINE=1). Give a folder that exists, or go online to download the repository."
        )


def _looks_like_hub_repo_id(value: str) -> bool:
    """`name` or `namespace/name` as the Hub spells them, not a path (`./x`, `/abs/x`, `~/x`, `a/b/c`)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if value.startswith((".", "/", "~")) or value.count("/") > 1:
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


# --- numeric options --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowed:
    """The values a numeric option takes: a whole number (`integer`) or any finite number, from `minimum` and up to
    `maximum` (either bound left out where `above` / `below` say so), or unset where `optional`. `meaning` says what a
    special value does ("0 turns clipping off")."""

    integer: bool = False
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # the minimum itself is not allowed
    below: bool = False  # the maximum itself is not allowed
    optional: bool = False
    meaning: str = ""

    def admits(self, value) -> bool:
        if value is None:
            return self.optional
        if not _is_number(value, self.integer):
            return False
        if self.minimum is not None and (value <= self.minimum if self.above else value < self.minimum):
            return False
        if self.maximum is not None and (value >= self.maximum if self.below else value > self.maximum):
            return False
        return True

    def describe(self) -> str:
        """`a whole number >= 1, or unset (unset: no limit)`"""
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.above else '>='} {_plain(self.minimum)}")
        if self.maximum is not None:
            bounds.append(f"{'<' if self.below else '<='} {_plain(self.maximum)}")
        text = "a whole number" if self.integer else "a finite number"
        text += (" " + " and ".join(bounds)) if bounds else ""
        text += ", or unset" if self.optional else ""
        return text + (f" ({self.meaning})" if self.meaning else "")


def _plain(number: float) -> str:
    """`4294967295`, `1`, `0.5`, `1e-09`: whole numbers without an exponent or a fraction."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _is_number(value, integer: bool = False) -> bool:
    """An int (not a bool) where `integer`, else a finite int or float."""
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)


def at_least(minimum: float, integer: bool = True, **more) -> Allowed:
    """`minimum` or more: a whole number unless `integer` is False."""
    return Allowed(integer=integer, minimum=minimum, **more)


POSITIVE = at_least(1)  # a count: updates, tokens, examples, beams
FRACTION = Allowed(minimum=0, maximum=1, below=True)  # a probability or decay rate in [0, 1)
SEED = Allowed(integer=True, minimum=0, maximum=2**32 - 1)  # what numpy's seeding takes
# A vocabulary to learn: the BPE trainer reserves memory for every id before it reads a text (about 4 bytes each), and
# aborts the process (SIGABRT) on a size it cannot allocate (2**32 and up); no BPE vocabulary comes near 2**24.
VOCAB_SIZE = Allowed(integer=True, minimum=1, maximum=2**24)


def check_option(name: str, value, allowed: Allowed) -> None:
    """`--name value` is allowed, else a ValueError naming the option, the value and what is allowed."""
    if not allowed.admits(value):
        raise ValueError(f"--{name} must be {allowed.describe()}; got {reprlib.repr(value)}.")


def check_numbers(arguments, rules: Mapping[str, Allowed]) -> None:
    """Every integer and float option of the dataclasses `arguments` (one, or a sequence) holds a finite value of its
    type (or None, where its type allows it), and each option named in `rules` is in the range they give."""
    groups = arguments if isinstance(arguments, (list, tuple)) else [arguments]
    for group in groups:
        for name, (kind, optional) in _numeric_fields(type(group)).items():
            rule = rules.get(name, Allowed())
            check_option(name, getattr(group, name),
                         dataclasses.replace(rule, integer=rule.integer or kind is int, optional=optional))


def _numeric_fields(cls) -> dict[str, tuple[type, bool]]:
    """The fields of dataclass `cls` typed int or float, each with that type and whether None is allowed too."""
    hints = typing.get_type_hints(cls)
    found = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = set(typing.get_args(hint)) - {type(None)} if union else {hint}
        if kinds in ({int}, {float}):
            found[field.name] = (kinds.pop(), union and type(None) in typing.get_args(hint))
    return found


# --- config overrides -------------------------------------------------------------------------------------------


_PYTHON_CONSTANTS = {"True": True, "False": False, "None": None}  # `is_encoder_decoder=False` means the value False


def parse_config_overrides(text: str | None) -> dict:
    """`"dropout=0.2,layer_norm_position=pre"` -> {"dropout": 0.2, "layer_norm_position": "pre"}; values are read
    as JSON where they parse (numbers, true/false, null), Python's spellings True/False/None as those values, else
    kept as strings. A near miss of a config field (`layer_norm_epsilon`) is a typo, refused here: the config itself
    keeps any extra attribute."""
    overrides = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, equals, raw = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--config_overrides: {item!r} is not of the form key=value (e.g. 'dropout=0.2').")
        try:
            overrides[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key.strip()] = _PYTHON_CONSTANTS.get(raw.strip(), raw.strip())
    for name, field_name in misspelled_fields(overrides).items():  # the first one
        raise ValueError(f"--config_overrides: unknown config field {name!r}; did you mean {field_name!r}?")
    return overrides


def format_config_overrides(overrides: dict) -> str:
    """The `key=value,key=value` text that `parse_config_overrides` reads back as `overrides` (a config file's
    mapping): a string as it is where it reads back as itself, else JSON."""
    items = []
    for key, value in overrides.items():
        text = json.dumps(value, ensure_ascii=False)
        if isinstance(value, str) and "," not in value and parse_config_overrides(f"key={value}") == {"key": value}:
            text = value  # `pre`, not `"pre"`
        if "," in text or "," in str(key) or "=" in str(key):
            raise ValueError(f"--config_overrides: {key}={text} cannot be one of key=value pairs separated by commas.")
        items.append(f"{key}={text}")
    return ",".join(items)


def option_name(token: str) -> str | None:
    """The option a command-line token names, as its field is called: `--max-examples=3` -> `max_examples`."""
    if not token.startswith("--") or token == "--":
        return None
    return token[2:].split("=", 1)[0].replace("-", "_")


def given_options(argv: list[str]) -> set[str]:
    return {name for name in map(option_name, argv) if name}


__all__ = [
    "Allowed",
    "FRACTION",
    "POSITIVE",
    "SEED",
    "USER_ERRORS",
    "VOCAB_SIZE",
    "at_least",
    "check_numbers",
    "check_option",
    "format_config_overrides",
    "given_options",
    "option_name",
    "parse_config_overrides",
    "require_folder_or_hub_id",
    "run_command",
]
