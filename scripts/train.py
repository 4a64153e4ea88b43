"""Train a Vaswani encoder-decoder from scratch on a translation or summarization dataset, with Hugging Face
Accelerate: the same command runs in one CPU process, on several GPUs and on several machines.

    # one process (CPU or one GPU); the toy task the project writes itself, no download
    python scripts/train.py --config scripts/configs/quickstart.yaml

    # several GPUs (DDP), mixed precision; FSDP or DeepSpeed by an `accelerate config` file, no code change
    accelerate launch --multi_gpu --num_processes 4 scripts/train.py --config scripts/configs/multi30k_en_de.yaml \
        --mixed_precision bf16

    # continue a run that was stopped or killed, from its latest checkpoint (SIGTERM or SIGUSR1, as a preempted job
    # gets, stops it after the update under way with a checkpoint and exit status 75)
    python scripts/train.py --config scripts/configs/multi30k_en_de.yaml --resume

Options come from the dataclasses in `vaswani.training.arguments` (`--help` lists them); `--config FILE` (YAML or
JSON) sets any of them, and the command line overrides the file. The output folder then holds `best/` and `last/`
(models saved with `save_pretrained` and the tokenizer: they load with the Auto classes and the pipelines),
`checkpoints/step-*/` (full state, for --resume and scripts/average_checkpoints.py), `metrics.jsonl`,
`tensorboard/`, `training_curves.png` and `summary.json`.
"""

import os
import signal
import sys


def _stopped_while_starting(number, frame):
    """A stop signal while the libraries are imported (the first seconds), before any handler of the project is in
    place: one line and the resumable exit status, as a stop during the run's set-up gets, not a silent 143."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{os.path.basename(sys.argv[0])}: stopped by {signal.Signals(number).name} while the command was "
              "starting, before the run was set up: nothing was trained, so nothing is lost; the same command starts "
              "it again (exit status 75: stopped by a signal, resumable).", file=sys.stderr, flush=True)
    sys.exit(75)


if __name__ == "__main__":
    for _number in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(_number, _stopped_while_starting)

from transformers.utils import logging as transformers_logging  # noqa: E402

from vaswani.cli import require_folder_or_hub_id, run_command  # noqa: E402
from vaswani.training.arguments import parse_arguments  # noqa: E402
from vaswani.runs.errors import TrainingError  # noqa: E402
from vaswani.training.loop import train  # noqa: E402


def main(argv: list[str] | None = None):
    data, model, training = parse_arguments(argv)
    if model.tokenizer is not None:
        require_folder_or_hub_id(model.tokenizer, "--tokenizer", needed_file="tokenizer_config.json")
    transformers_logging.disable_progress_bar()  # one "Writing model shards" bar per save would bury the training bar
    outcome = train(data, model, training)
    for number in (signal.SIGTERM, signal.SIGUSR1):  # the run is done: no longer "while starting"
        if signal.getsignal(number) is _stopped_while_starting:
            signal.signal(number, signal.SIG_DFL)
    outcome.accelerator.end_training()  # closes the trackers and the process group
    return outcome


if __name__ == "__main__":
    run_command(main, TrainingError)
