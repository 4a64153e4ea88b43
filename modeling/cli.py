"""What every command in scripts/ shares about its command line.

How it ends on a problem with its input or its environment (a bad argument, a missing file, an extra not installed):
one line, `script.py: error: <message>`, and exit status 1. The messages say what to do; a traceback would bury them.
Anything else is a bug and keeps its traceback. A training command stopped by SIGTERM or SIGUSR1 after saving a
checkpoint (`vaswani.training.preemption`) says so in one line and exits with status 75, "resumable".

    if __name__ == "__main__":
        run_command(main)

How it reads the options of the last release: `modern_argv` rewrites them to today's names (those of transformers'
example scripts) before parsing, with one warning line on stderr for each. `OLD_OPTIONS` is the list; it goes in the
next release. And `parse_config_overrides`, the one reader of `--config_overrides "key=value,key=value"`, and
`require_folder_or_hub_id`, which names a missing checkpoint or tokenizer folder as missing.

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
import shlex
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .configuration_vaswani import misspelled_fields
from .data import looks_like_hub_dataset
from .training.preemption import StoppedBySignal


USER_ERRORS = (ValueError, OSError, ImportError)  # OSError: missing files, folders given as files, full disks


def run_command(main, *more_user_errors: type[BaseException]) -> None:
    """Call `main(sys.argv[1:])`, reporting the user's errors (and `more_user_errors`) as one line, and a stop by a
    signal as one line (from the first process of a distributed launch) with its own exit status."""
    try:
        main(sys.argv[1:])
    except StoppedBySignal as stop:
        if os.environ.get("RANK", "0") == "0":
            print(f"{Path(sys.argv[0]).name}: {stop}", file=sys.stderr)
        sys.exit(stop.exit_status)
    except (*USER_ERRORS, *more_user_errors) as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        sys.exit(1)


# --- checkpoints and tokenizers by folder or Hub id ---------------------------------------------------------------


def require_folder_or_hub_id(value: str, option: str, needed_file: str = "config.json") -> None:
    """Where a checkpoint or a tokenizer is read from (`--model`, `--tokenizer`, `--model_name_or_path`): a folder
    that is there, or a Hub repository id. A path that is not there is said to be missing (transformers would call it
    a malformed repository id), and so is a Hub id that cannot be had offline (HF_HUB_OFFLINE set, `needed_file` of
    the repository not in the cache): one line naming the option and the value, where transformers gives two lines
    naming neither. Any other Hub id goes to the Hub."""
    if os.path.lexists(value):
        return
    if not looks_like_hub_repo_id(value):
        raise FileNotFoundError(f"{option} {value}: no such folder. Give a folder that exists, or a Hub repository id.")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(value, needed_file), str):
        raise FileNotFoundError(
            f"{option} {value}: no such folder, and as a Hub repository id it is not in the cache while Hub downloads "
            "are off (HF_HUB_OFFLINE=1). Give a folder that exists, or go online to download the repository."
        )


def looks_like_hub_repo_id(value: str) -> bool:
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
        if not is_number(value, self.integer):
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
            bounds.append(f"{'>' if self.above else '>='} {plain(self.minimum)}")
        if self.maximum is not None:
            bounds.append(f"{'<' if self.below else '<='} {plain(self.maximum)}")
        text = "a whole number" if self.integer else "a finite number"
        text += (" " + " and ".join(bounds)) if bounds else ""
        text += ", or unset" if self.optional else ""
        return text + (f" ({self.meaning})" if self.meaning else "")


def plain(number: float) -> str:
    """`4294967295`, `1`, `0.5`, `1e-09`: whole numbers without an exponent or a fraction."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def is_number(value, integer: bool = False) -> bool:
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


def check_option(name: str, value, allowed: Allowed) -> None:
    """`--name value` is allowed, else a ValueError naming the option, the value and what is allowed."""
    if not allowed.admits(value):
        raise ValueError(f"--{name} must be {allowed.describe()}; got {reprlib.repr(value)}.")


def check_numbers(arguments, rules: Mapping[str, Allowed]) -> None:
    """Every integer and float option of the dataclasses `arguments` (one, or a sequence) holds a finite value of its
    type (or None, where its type allows it), and each option named in `rules` is in the range they give."""
    groups = arguments if isinstance(arguments, (list, tuple)) else [arguments]
    for group in groups:
        for name, (kind, optional) in numeric_fields(type(group)).items():
            rule = rules.get(name, Allowed())
            check_option(name, getattr(group, name),
                         dataclasses.replace(rule, integer=rule.integer or kind is int, optional=optional))


def numeric_fields(cls) -> dict[str, tuple[type, bool]]:
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


def parse_config_overrides(text: str | None) -> dict:
    """`"dropout=0.2,layer_norm_position=pre"` -> {"dropout": 0.2, "layer_norm_position": "pre"}; values are read
    as JSON where they parse (numbers, true/false, null), else kept as strings. A near miss of a config field
    (`layer_norm_epsilon`) is a typo, refused here: the config itself keeps any extra attribute."""
    overrides = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, equals, raw = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--config_overrides: {item!r} is not of the form key=value (e.g. 'dropout=0.2').")
        try:
            overrides[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key.strip()] = raw.strip()
    for name, field_name in misspelled_fields(overrides).items():  # the first one
        raise ValueError(f"--config_overrides: unknown config field {name!r}; did you mean {field_name!r}?")
    return overrides


def format_config_overrides(overrides: dict) -> str:
    """The `key=value,key=value` text that `parse_config_overrides` reads back as `overrides` (a config file's
    mapping; the JSON object of the last release): a string as it is where it reads back as itself, else JSON."""
    items = []
    for key, value in overrides.items():
        text = json.dumps(value, ensure_ascii=False)
        if isinstance(value, str) and "," not in value and parse_config_overrides(f"key={value}") == {"key": value}:
            text = value  # `pre`, not `"pre"`
        if "," in text or "," in str(key) or "=" in str(key):
            raise ValueError(f"--config_overrides: {key}={text} cannot be one of key=value pairs separated by commas.")
        items.append(f"{key}={text}")
    return ",".join(items)


# --- the options of the last release ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OldOption:
    """An option of the last release: `new` turns its value into today's (option name, value). With `only_with`, the
    name is old only in a call that also has that old option; elsewhere it means what it means today."""

    new: Callable[[object], tuple[str, object]]
    only_with: str | None = None


def renamed(name: str) -> Callable[[object], tuple[str, object]]:
    """The same value under today's name."""
    return lambda value: (name, value)


def file_or_hub(file_option: str) -> Callable[[object], tuple[str, object]]:
    """An old option that took local files or a Hub dataset alike: today's file option for files, --dataset_name for
    a Hub id (and for train.py's `synthetic`)."""
    return lambda value: (
        "dataset_name" if isinstance(value, str) and looks_like_hub_dataset(value) else file_option, value
    )


def overrides_from_json(value) -> tuple[str, object]:
    """train.py's --model_overrides took a JSON object (a mapping in a config file); --config_overrides takes
    key=value pairs."""
    overrides = value
    if isinstance(value, str):
        try:
            overrides = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"--model_overrides must be a JSON object, got {value!r} ({error.msg}).") from None
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError(f"--model_overrides must be a JSON object, got {value!r}.")
    return "config_overrides", None if overrides is None else format_config_overrides(overrides)


EVERY_DATA_SCRIPT = {"dataset_config": OldOption(renamed("dataset_config_name"))}
# by script: train.py; the three fine-tuning scripts; the two that write results files (evaluate_model.py,
# extractive_baseline.py); train_tokenizer.py; make_pseudo_summaries.py
OLD_OPTIONS = {
    "train.py": {
        **EVERY_DATA_SCRIPT,
        "dataset": OldOption(file_or_hub("train_file")),
        "validation_dataset": OldOption(file_or_hub("validation_file")),
        "max_train_examples": OldOption(renamed("max_train_samples")),
        "max_eval_examples": OldOption(renamed("max_eval_samples")),
        "model_overrides": OldOption(overrides_from_json),
    },
    "fine-tuning": {
        **EVERY_DATA_SCRIPT,
        "train_data": OldOption(file_or_hub("train_file")),
        "validation_data": OldOption(file_or_hub("validation_file")),
    },
    "evaluation": {
        **EVERY_DATA_SCRIPT,
        "dataset": OldOption(file_or_hub("validation_file")),
        # beside --dataset, --dataset_name was the name written into the results file
        "dataset_name": OldOption(renamed("dataset_label"), only_with="dataset"),
        "max_examples": OldOption(renamed("max_eval_samples")),
    },
    "train_tokenizer.py": {
        **EVERY_DATA_SCRIPT,
        "dataset": OldOption(file_or_hub("train_file")),
        "max_examples": OldOption(renamed("max_train_samples")),
    },
    "make_pseudo_summaries.py": {**EVERY_DATA_SCRIPT, "dataset": OldOption(file_or_hub("train_file"))},
}
REMOVAL = "removed in the next release"


def option_name(token: str) -> str | None:
    """The option a command-line token names, as its field is called: `--max-examples=3` -> `max_examples`."""
    if not token.startswith("--") or token == "--":
        return None
    return token[2:].split("=", 1)[0].replace("-", "_")


def given_options(argv: list[str]) -> set[str]:
    return {name for name in map(option_name, argv) if name}


def modern_argv(argv: list[str] | None, old_options: dict[str, OldOption], program: str | None = None) -> list[str]:
    """`argv` (default: sys.argv[1:]) with each option of the last release (`--old value`, `--old=value`,
    `--old-name value`) written as today's, and one warning on stderr for each. A rewrite that would give an option
    two different values is an error naming both."""
    program = program or Path(sys.argv[0]).name
    argv = list(sys.argv[1:] if argv is None else argv)
    present = given_options(argv)
    result, settings, rewritten, warned, position = [], [], set(), set(), 0  # settings: (option, value, as written)
    while position < len(argv):
        token, name = argv[position], option_name(argv[position])
        inline = token.partition("=")[2] if name and "=" in token else None
        takes_next = inline is None and position + 1 < len(argv) and not argv[position + 1].startswith("--")
        value = inline if inline is not None else argv[position + 1] if takes_next else None
        written = f"--{name}" + (f" {value}" if value is not None else "")
        old = old_options.get(name) if name else None
        if old is None or (old.only_with is not None and old.only_with not in present):
            result.append(token)
            if name:
                settings.append((f"--{name}", value, written))
            position += 1
            continue
        new_name, new_value = old.new(value)
        new_option = f"--{new_name}"
        if name not in warned:
            shown = f"--{name}" + (f" beside --{old.only_with}" if old.only_with else "")
            warn(program, shown, replacement(new_option, value, new_value))
            warned.add(name)
        result += [new_option] + ([str(new_value)] if new_value is not None else [])
        settings.append((new_option, new_value, written))
        rewritten.add(new_option)
        position += 1 if inline is not None or not takes_next else 2
    check_one_value(settings, rewritten)
    return result


def modern_options(
    values: dict, old_options: dict[str, OldOption], where: str | None = None, program: str | None = None
) -> dict:
    """A mapping of option names to values (a config file's; the record of a run of the last release) with the old
    names written as today's, as `modern_argv` does. With `where` (the config file), one warning for each."""
    result, settings, rewritten = {}, [], set()
    for name, value in values.items():
        written = f"{name}: {value}" + (f" in {where}" if where else "")
        old = old_options.get(name)
        if old is None or (old.only_with is not None and old.only_with not in values):
            result[name] = value
            settings.append((name, value, written))
            continue
        new_name, new_value = old.new(value)
        if where is not None:
            warn(program or Path(sys.argv[0]).name, f"{name} (in {where})", replacement(new_name, value, new_value))
        result[new_name] = new_value
        settings.append((new_name, new_value, written))
        rewritten.add(new_name)
    check_one_value(settings, rewritten)
    return result


def replacement(new_option: str, value, new_value) -> str:
    """Today's option, with its value where that changed too (`--config_overrides d_model=128`)."""
    changed = new_value is not None and new_value != value
    return new_option + (f" {shlex.quote(str(new_value))}" if changed else "")


def warn(program: str, old: str, new: str) -> None:
    """`train.py: warning: --dataset is deprecated (removed in the next release); use --train_file`, from the first
    process of a distributed launch only."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{program}: warning: {old} is deprecated ({REMOVAL}); use {new}", file=sys.stderr)


def check_one_value(settings: list[tuple[str, object, str]], rewritten: set[str]) -> None:
    """A rewritten option gets one value (`--train_data A --validation_data B`, two Hub names, would both be
    --dataset_name)."""
    for option in rewritten:
        found = [(value, written) for setting, value, written in settings if setting == option]
        for value, written in found[1:]:
            if value != found[0][0]:
                raise ValueError(
                    f"{found[0][1]} and {written} would both set {option}, to {found[0][0]!r} and {value!r}: give "
                    f"{option} once."
                )


__all__ = [
    "Allowed",
    "FRACTION",
    "OLD_OPTIONS",
    "POSITIVE",
    "SEED",
    "USER_ERRORS",
    "at_least",
    "check_numbers",
    "check_option",
    "format_config_overrides",
    "given_options",
    "modern_argv",
    "modern_options",
    "option_name",
    "parse_config_overrides",
    "require_folder_or_hub_id",
    "run_command",
]
