"""What the tests share besides their fixtures (those are in the conftest.py files): the repository's paths, a
small parallel corpus and NER corpus, tiny model configs and checkpoints, JSON Lines files, the scripts as modules,
fresh-process runs and commands run in this process, web servers started on a free port. A test file imports them with `from helpers import ...`
(pytest's `pythonpath` option, in pyproject.toml, puts tests/ on sys.path).

Imported after tests/conftest.py has set the offline Hugging Face environment: pytest loads that file first.
"""

import hashlib
import importlib.util
import io
import json
import os
import resource
import runpy
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from vaswani import VaswaniConfig, VaswaniForConditionalGeneration


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

needs_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(),
    reason=f"needs the datasets in {SHARED_DATA} (present in the project's CI; absent on a user's machine)",
)

# A small parallel corpus written for the tests (English -> German), plus text in other scripts.
PAIRS = [
    ("A man is riding a horse.", "Ein Mann reitet ein Pferd."),
    ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
    ("A girl is reading a book in the park.", "Ein Mädchen liest ein Buch im Park."),
    ("The children are playing football outside.", "Die Kinder spielen draußen Fußball."),
    ("A woman in a red dress is drinking coffee.", "Eine Frau in einem roten Kleid trinkt Kaffee."),
    ("Two men are walking down the street.", "Zwei Männer gehen die Straße entlang."),
    ("A little boy jumps into the water.", "Ein kleiner Junge springt ins Wasser."),
    ("People are sitting at a table outside a cafe.", "Leute sitzen an einem Tisch vor einem Café."),
    ("A black dog runs across the grass.", "Ein schwarzer Hund läuft über das Gras."),
    ("An old man is selling vegetables at the market.", "Ein alter Mann verkauft Gemüse auf dem Markt."),
]
OTHER_SCRIPTS = ["Привет, как дела?", "Καλημέρα κόσμε", "こんにちは世界", "مرحبا بالعالم", "नमस्ते दुनिया"]

# A small NER corpus in CoNLL-2003's tags (token classification, and its evaluation).
NER_SENTENCES = [
    ("Peter Blackburn lives in Brussels .", "B-PER I-PER O O B-LOC O"),
    ("EU rejects German call to boycott British lamb .", "B-ORG O B-MISC O O O B-MISC O O"),
    ("Angela Merkel visited Paris on Monday .", "B-PER I-PER O B-LOC O O O"),
    ("The United Nations met in New York .", "O B-ORG I-ORG O O B-LOC I-LOC O"),
    ("Maria works for Siemens in Munich .", "B-PER O O B-ORG O B-LOC O"),
]
NER_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]

# The options every Trainer run in the tests shares: quiet, no pinned memory (there is no GPU), nothing reported
# anywhere.
QUIET = ["--dataloader_pin_memory", "false", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0"]


def english_sentences(count: int) -> list[str]:
    """The first sentences of Multi30k's test_2016_flickr (real captions), or those of PAIRS where the shared data
    are absent."""
    test_file = SHARED_DATA / "multi30k" / "test_2016_flickr.jsonl"
    if test_file.is_file():
        with test_file.open(encoding="utf-8") as lines:
            return [json.loads(line)["en"] for _, line in zip(range(count), lines)]
    return [source for source, _ in PAIRS[:count]]


def tiny_config(**overrides) -> VaswaniConfig:
    """The `tiny` preset with dropout off (deterministic outputs), and any field overridden."""
    return VaswaniConfig.from_preset("tiny", **{"dropout": 0.0, **overrides})


def random_batch(batch: int = 3, length: int = 9, vocab: int = 1000, seed: int = 0, pad_id: int = 0):
    """Token ids in [4, vocab) with right padding of different lengths, and the matching attention mask."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab, (batch, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch):
        attention_mask[row, length - 2 * row :] = 0
    return input_ids.masked_fill(attention_mask == 0, pad_id), attention_mask


def spread_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give an untrained model varied weights (and non-zero relative biases), so that its greedy outputs differ from
    step to step and comparisons between two code paths mean something."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() >= 1 and "layer_norm" not in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


def save_seq2seq_model(folder: Path, tokenizer, seed: int = 0, **config) -> Path:
    """An untrained tiny seq2seq checkpoint (model and tokenizer) in `folder`, to fine-tune or evaluate."""
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **config))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_spread_translator(folder: Path, tokenizer, **generation) -> Path:
    """A tiny en->de checkpoint with varied weights (`spread_weights`: its outputs differ from sentence to sentence)
    and its tokenizer in `folder`, its generation config given `generation` (num_beams=2, ...)."""
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), source_lang="en", target_lang="de"))).eval()
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def as_saved_without_word_alignment(backend):
    """A copy of a tokenizer backend (tokenizers.Tokenizer) of this project as it was saved before its word starts
    were aligned (`word_start_alignment`: its offsets covered the space before each word) and before its normalizer
    marked the spaces (`space_marks`: added tokens were never found)."""
    from tokenizers import Tokenizer
    from vaswani.remote_code.tokenization_vaswani import flat_steps, space_marks, word_start_alignment

    state = json.loads(backend.to_str())
    alignment = [json.loads(step.__getstate__()) for step in word_start_alignment()]
    steps = [step for step in state["pre_tokenizer"]["pretokenizers"] if step not in alignment]
    state["pre_tokenizer"] = steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}
    *normalizer_steps, last = flat_steps(state["normalizer"], "normalizers")
    if last == json.loads(space_marks().__getstate__()):
        state["normalizer"] = {"type": "Sequence", "normalizers": normalizer_steps}
    return Tokenizer.from_str(json.dumps(state))


def ner_rows():
    return [{"id": i, "tokens": text.split(), "ner_tags": tags.split()} for i, (text, tags) in enumerate(NER_SENTENCES)]


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def load_script(name: str):
    """A script of scripts/ as a module, to call its `main(argv)` in this process (`name` relative to scripts/:
    "train", "tools/results_table"). Scripts are not put on sys.path: they are commands, not a library."""
    spec = importlib.util.spec_from_file_location(Path(name).name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SCRIPTS = {}


def script_module(name: str):
    """A script of scripts/ as a module (`load_script`), loaded once per session: the one `run_main` calls."""
    if name not in _SCRIPTS:
        _SCRIPTS[name] = load_script(name)
    return _SCRIPTS[name]


def run_main(name: str, argv: list[str]):
    """`main(argv)` of a script of scripts/ (`script_module`), with Accelerate's state reset after it (train.py's
    Accelerator), for the next call."""
    from accelerate.state import AcceleratorState, GradientState

    try:
        return script_module(name).main(argv)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


ISOLATION_PRELUDE = textwrap.dedent(
    """
    import os, sys

    class _NoVaswani:
        # stands for a machine where this project's package is not installed
        def find_spec(self, name, path=None, target=None):
            if name == "vaswani" or name.startswith("vaswani."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, _NoVaswani())
    try:
        import vaswani
        raise SystemExit("the package is importable: the test would prove nothing")
    except ModuleNotFoundError:
        pass
    """
)


def run_isolated(code: str, timeout: int = 240) -> str:
    """Run `code` in a fresh Python process, in another working directory, with a clean PYTHONPATH, offline, and
    with this project's package not importable. Returns stdout; fails the test with stderr if the process fails."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as workdir, tempfile.TemporaryDirectory() as hf_home:
        env["HF_HOME"] = hf_home
        result = subprocess.run(
            [sys.executable, "-c", ISOLATION_PRELUDE + textwrap.dedent(code)],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if result.returncode != 0:
        pytest.fail(f"isolated process failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def launch(program: Path, argv: list[str]) -> list[str]:
    """The command that runs `program` in two CPU processes under `accelerate launch` (its environment needs
    ACCELERATE_USE_CPU=1), on a free port (the suite's workers launch at the same time; Accelerate's default is
    always 29500)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--main_process_port", "0", "--mixed_precision", "no", "--dynamo_backend", "no",
            str(program), *argv]


def command_in_process(script: Path, arguments, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python script arguments...` as the command runs it, but in this process: its `__main__` block under that
    `sys.argv` (and in `cwd`), with what it prints to stdout and stderr and its exit status (0 when it returns).
    For what a command prints on a bad input, where a fresh interpreter would spend ~5 s on imports (on two cores)
    to print one line; an error the command does not catch propagates and fails the test, as its traceback would."""
    stdout, stderr = io.StringIO(), io.StringIO()
    argv, directory, status = sys.argv, os.getcwd(), 0
    sys.argv = [str(script), *map(str, arguments)]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(stdout), redirect_stderr(stderr):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = argv
        os.chdir(directory)
    return subprocess.CompletedProcess([str(script), *arguments], status, stdout.getvalue(), stderr.getvalue())


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root`, not followed through links and never opened unless it is a regular file: the hash of
    a file, the target of a link, "folder", or the kind of a special file (a FIFO is never read: it would block)."""
    listing = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            key = str(path.relative_to(root))
            if stat.S_ISLNK(mode):
                listing[key] = f"link to {os.readlink(path)}"
            elif stat.S_ISDIR(mode):
                listing[key] = "folder"
            elif stat.S_ISREG(mode):
                listing[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                listing[key] = f"special file {stat.S_IFMT(mode):o} {path.lstat().st_rdev}"
    return listing


@contextmanager
def file_size_limit(size: int):
    """Writes past `size` bytes in any file fail with EFBIG, as a full disk fails them halfway."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel ends the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@contextmanager
def torch_threads(count: int):
    """Run the block on `count` torch threads, then go back to as many as before."""
    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


SERVER_STARTUP_SECONDS = 180  # a web demo: imports, its models and the server, on two busy cores


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_app(command: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start a demo server (`command` ends with its --port) and wait until its page answers: (process, URL). The
    test fails with the server's output if it exits or does not answer within SERVER_STARTUP_SECONDS."""
    port = int(command[command.index("--port") + 1])
    url = f"http://127.0.0.1:{port}/"
    environment = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVER_STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the demo exited with status {process.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return process, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    stop_app(process)
    pytest.fail(f"the demo did not answer at {url} within {SERVER_STARTUP_SECONDS} s:\n{log.read_text()[-4000:]}")


def stop_app(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
