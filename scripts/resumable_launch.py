"""Run a launcher's command (`accelerate launch`, torchrun) so that it ends with the status its processes ended with:
75 when a stop signal (SIGTERM, SIGUSR1) stopped the run after a checkpoint, for a job script to requeue on. A
launcher alone ends such a run with 1 (a failed child, or its own SignalException).

    ACCELERATE_USE_CPU=1 python scripts/resumable_launch.py accelerate launch --multi_gpu --num_processes 2 \
        scripts/train.py --config scripts/configs/quickstart.yaml --resume

A stop signal sent to this process alone (a container's first process) is passed on to each process of the run.
How: vaswani.runs.launch_status.
"""

import sys

from vaswani.runs.launch_status import run_reporting_status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} LAUNCHER_COMMAND... (e.g. accelerate launch ... scripts/train.py ...)")
    sys.exit(run_reporting_status(sys.argv[1:]))
