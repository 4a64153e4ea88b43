"""Run a command and measure it: its wall time, when lines matching given patterns first appeared in its output, the
peak memory of its whole process tree (the sum over the command and every process it started, sampled every half
second) and of its largest process, and the disk that given folders take at the end. For the data pipeline at
WMT's size (results/wmt14_en_de/notes.md):

    python scripts/tools/measure_command.py --mark learned="Learned the vocabulary" --disk /tmp/hf \
        --json run1.json -- python scripts/train.py --config scripts/configs/wmt14_en_de_base.yaml ...

The command's output is passed through (to stdout) and kept, with each line's second, in the JSON (`--json`): the
marks (the second each first matched, and the peak PSS of the tree until then), `seconds`, `peak_tree_rss_mib`
(resident memory of all its processes at once: pages that forked workers share with their parent count once for
each, so this is an upper bound), `peak_tree_pss_mib` (the same with shared pages divided among the processes that
share them: what they took together), `largest_process_rss_mib` (the largest single process), the machine's 1-minute
load average while it ran (`load_average_1min`: min, mean, max of the samples; the command's own processes count in
it), `disk_mib` per folder, and `returncode`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil


def tree_memory(root: psutil.Process) -> tuple[int, int, int]:
    """(RSS summed, PSS summed, the largest RSS) over `root` and its descendants, in bytes; processes that end
    while they are read are left out."""
    rss = pss = largest = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            info = process.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rss, pss, largest = rss + info.rss, pss + getattr(info, "pss", info.rss), max(largest, info.rss)
    return rss, pss, largest


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def measure(command: list[str], marks: dict[str, str], interval: float = 0.5) -> dict:
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    root = psutil.Process(process.pid)
    peaks = [0, 0, 0]
    loads = []  # the machine's 1-minute load average at each sample: how much else ran beside the command
    done = threading.Event()

    def sample():
        while not done.is_set():
            peaks[:] = [max(peak, now) for peak, now in zip(peaks, tree_memory(root))]
            loads.append(os.getloadavg()[0])
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines, found, pending = [], {}, b""
    patterns = {name: re.compile(pattern) for name, pattern in marks.items()}
    while chunk := process.stdout.read(4096):
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        pending += chunk
        *complete, pending = re.split(rb"[\r\n]", pending)
        for raw in complete:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            second = round(time.monotonic() - started, 1)
            lines.append([second, line])
            for name, pattern in patterns.items():
                if name not in found and pattern.search(line):
                    found[name] = {"second": second, "peak_tree_pss_mib_so_far": round(peaks[1] / 2**20)}
    returncode = process.wait()
    done.set()
    sampler.join()
    mib = 2**20
    return {
        "command": command, "returncode": returncode, "seconds": round(time.monotonic() - started, 1),
        "marks": {name: found.get(name) for name in marks},
        "peak_tree_rss_mib": round(peaks[0] / mib), "peak_tree_pss_mib": round(peaks[1] / mib),
        "largest_process_rss_mib": round(peaks[2] / mib),
        "load_average_1min": {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads)},
        "lines": lines,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mark", action="append", default=[], metavar="NAME=REGEX",
                        help="Record the second at which a line matching REGEX first appears, as NAME.")
    parser.add_argument("--disk", action="append", default=[], metavar="FOLDER",
                        help="A folder whose size to record at the end (the files under it).")
    parser.add_argument("--json", help="Where to write the measurements (with every line of output).")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="The command, after --.")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    marks = {}
    for mark in args.mark:
        name, separator, pattern = mark.partition("=")
        if not separator or not name:
            parser.error(f"--mark {mark!r}: expected NAME=REGEX")
        marks[name] = pattern
    result = measure(command, marks)
    result["disk_mib"] = {folder: round(folder_bytes(Path(folder)) / 2**20) for folder in args.disk}
    summary = {key: value for key, value in result.items() if key not in ("lines", "command")}
    print(json.dumps(summary, indent=2), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result["returncode"]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
