"""Gather what a lent GPU machine lacks to run scripts/tools/gpu_suite.py, into two git-ignored folders of this
checkout that the device call carries (`carry: [".whl", ".data"]`):

    .venv/bin/python scripts/tools/gather_gpu_wheels.py    # again after a change: add --overwrite_output_dir

  .whl/             wheels, installed there by `python3 -m pip install --no-index --no-deps --target /tmp/site
                    .whl/*.whl` and PYTHONPATH=/tmp/site (the command is in scripts/tools/README.md, "The GPU suite")
  .data/multi30k/   the Multi30k files of the suite's recipe part (the lent machine has no ../shared)

The lent machine (the device tool's KINDS.md) has torch 2.11, transformers 5.17, accelerate 1.15 and about 190 other
packages (DEVICE_HAS), and reaches no package registry. Carried: this package's own wheel (built from this checkout:
run this again after any change to modeling/ or pipelines/, gpu_suite.py refuses a stale one), and CARRIED, each in
the version this environment has (the one the tests pass with) or, where this environment lacks it, in PINNED.
Every requirement of every carried wheel must be carried or on the machine, or this script stops and says which.
The whole tree that travels (the checkout's files and the carried folders) must stay under the device's 64 MiB: the
script prints it.
"""

import argparse
import subprocess
from pathlib import Path

from vaswani.cli import run_command
from vaswani_tools.gpu_wheels import PYTHON_VERSION, gather


REPO = Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi30k_dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--no_data", action="store_true", help="gather the wheels only")
    parser.add_argument("--python_version", default=PYTHON_VERSION,
                        help="the Python that installs the wheels (the lent machine's; another to try them here)")
    parser.add_argument("--wheel_dir", default=str(REPO / ".whl"),
                        help="where the wheels go, a folder written whole (an earlier one: see --overwrite_output_dir)")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="replace an earlier --wheel_dir (only where it holds wheels, nothing else)")
    return gather(parser.parse_args(argv), REPO)


if __name__ == "__main__":
    run_command(main, subprocess.CalledProcessError)
