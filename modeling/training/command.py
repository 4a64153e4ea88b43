"""The `vaswani-train` command, which scripts/train.py runs too: the options parsed (`vaswani.training.arguments`),
the run (`vaswani.training.loop.train`), its trackers and process group closed at the end."""

import signal

from transformers.utils import logging as transformers_logging

from ..cli import require_folder_or_hub_id, run_command
from ..runs.errors import TrainingError
from ..runs.preemption import STOP_SIGNALS
from .arguments import parse_arguments
from .loop import train


def main(argv: list[str] | None = None, starting_handler=None):
    """Train as the options say; the run's outcome. `starting_handler`: the handler scripts/train.py puts on the stop
    signals before its imports (a stop while the libraries load is one line and exit status 75), taken off once the
    run is done."""
    data, model, training = parse_arguments(argv)
    if model.tokenizer is not None:
        require_folder_or_hub_id(model.tokenizer, "--tokenizer", needed_file="tokenizer_config.json")
    transformers_logging.disable_progress_bar()  # one "Writing model shards" bar per save would bury the training bar
    outcome = train(data, model, training)
    for number in STOP_SIGNALS:  # the run is done: no longer "while starting"
        if starting_handler is not None and signal.getsignal(number) is starting_handler:
            signal.signal(number, signal.SIG_DFL)
    outcome.accelerator.end_training()  # closes the trackers and the process group
    return outcome


def console_main() -> None:
    """The `vaswani-train` command."""
    run_command(main, TrainingError)


__all__ = ["console_main", "main"]
