"""Shared test setup: the offline Hugging Face environment, and the fixtures every folder uses (a tiny tokenizer, one
torch thread). What the tests share besides fixtures is in helpers.py (`from helpers import ...`).

The environment is set here, before anything imports transformers, so that no test waits on the unreachable Hub
and nothing is written to the user's cache: pytest loads this file before any test file or helper module.
"""

import atexit
import os
import shutil
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="vaswani-tests-hf-home-")
# the caches of this test session (and of the isolated processes it starts) go when it ends
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# pytest-xdist (pyproject's addopts run the suite on one worker per core): each worker, and every process a test starts,
# gets its share of the cores, set before torch is imported; OpenMP threads beyond the cores spin against each other
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(max(1, _CORES // _WORKERS))

import pytest  # noqa: E402

from helpers import OTHER_SCRIPTS, PAIRS, torch_threads  # noqa: E402
from vaswani import VaswaniTokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer() -> VaswaniTokenizer:
    texts = [text for pair in PAIRS for text in pair] + OTHER_SCRIPTS
    return VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=600, min_frequency=1, model_max_length=128)


@pytest.fixture(scope="module")
def one_thread():
    """Run the module's tiny models on one thread: on CPU cores shared with other work, a second torch thread mostly
    waits for the first (a step of the tiny model took 10x longer with two threads than with one)."""
    with torch_threads(1):
        yield
