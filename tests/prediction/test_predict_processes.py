"""scripts/predict.py as a process: two processes under `accelerate launch` write the bytes one process writes, a
SIGTERM stops it resumably (exit status 75) and a `kill -9` loses nothing: the same command finishes the job, byte for
byte."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import PAIRS, REPO, launch, run_main, save_spread_translator


SCRIPT = REPO / "scripts" / "predict.py"
SENTENCES = [text for pair in PAIRS for text in pair]


@pytest.fixture(scope="module")
def translator(tokenizer, tmp_path_factory):
    return save_spread_translator(tmp_path_factory.mktemp("translator"), tokenizer)


def one_process(translator, corpus, output, *options) -> bytes:
    run_main("predict", ["--model", str(translator), "--input_file", str(corpus), "--output_file", str(output),
                         "--quiet", *map(str, options)])
    return output.read_bytes()


def test_two_processes_write_the_bytes_of_one(translator, tmp_path):
    corpus = tmp_path / "corpus.en"
    corpus.write_text("".join(text + "\n" for text in SENTENCES * 2))
    options = ["--read_batch_size", "3", "--batch_size", "2", "--num_beams", "2", "--max_new_tokens", "8"]
    expected = one_process(translator, corpus, tmp_path / "one.de", *options)
    output = tmp_path / "two.de"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        launch(SCRIPT, ["--model", str(translator), "--input_file", str(corpus), "--output_file", str(output),
                        *options]),
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert output.read_bytes() == expected
    assert result.stderr.count(f"{len(SENTENCES) * 2:,} lines to {output}") == 1, "the first process reports"
    assert not list(tmp_path.glob(".two.de*"))


def wait_for_a_window(work, process, deadline=180):
    end = time.monotonic() + deadline
    while not any(path.stem.isdigit() for path in work.glob("*.json")):
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.monotonic() < end, "no window was finished in time"
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and forked workers as on Linux")
def test_sigterm_stops_it_resumably_and_kill_9_loses_nothing(translator, tmp_path):
    corpus = tmp_path / "corpus.en"
    corpus.write_text("".join(text + "\n" for text in SENTENCES * 40))  # 800 lines, 80 windows
    options = ["--read_batch_size", "10", "--workers", "2", "--num_beams", "2", "--max_new_tokens", "12"]
    expected = one_process(translator, corpus, tmp_path / "whole.de", *options)
    output, work = tmp_path / "out.de", tmp_path / ".out.de.predict"
    command = [sys.executable, str(SCRIPT), "--model", str(translator), "--input_file", str(corpus), "--output_file",
               str(output), "--quiet", *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    stopped = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    wait_for_a_window(work, stopped)
    stopped.send_signal(signal.SIGTERM)
    _, stderr = stopped.communicate(timeout=120)
    assert stopped.returncode == 75, stderr
    assert "stopped by SIGTERM with" in stderr and "the same command continues from there" in stderr
    assert not output.exists()

    killed = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, start_new_session=True)
    done_before = {path.name for path in work.glob("*.json")}
    end = time.monotonic() + 180
    while {path.name for path in work.glob("*.json")} <= done_before:  # at least one more window
        assert killed.poll() is None and time.monotonic() < end, killed.stderr.read()[-3000:]
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)  # the command and its workers, at once
    killed.wait()
    assert not output.exists()

    finished = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert output.read_bytes() == expected
    assert not work.exists() and not (tmp_path / ".out.de.lock").exists()
