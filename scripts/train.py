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

import functools  # noqa: E402

from vaswani.cli import run_command  # noqa: E402
from vaswani.runs.errors import TrainingError  # noqa: E402
from vaswani.training.command import main as train_main  # noqa: E402

main = functools.partial(train_main, starting_handler=_stopped_while_starting)


if __name__ == "__main__":
    run_command(main, TrainingError)
