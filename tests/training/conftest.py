"""The runs that several training test files inspect: each is trained once a session, on one torch thread, and a
test that changes one changes a copy (`training_helpers.copy_of`)."""

import pytest

from helpers import torch_threads
from training_helpers import REPORT_TO, run_in_process, tiny_argv


# Session-scoped: a module's `one_thread` is set up after any session fixture, so these set their thread count
# themselves.
@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """One complete tiny run, shared by the tests that inspect what a run leaves behind."""
    output_dir = tmp_path_factory.mktemp("run")
    with torch_threads(1):
        outcome = run_in_process(tiny_argv(output_dir, report_to=REPORT_TO))
    return output_dir, outcome.summary


@pytest.fixture(scope="session")
def checkpointed_run(tmp_path_factory):
    """A run of 4 updates with checkpoints at 2 and 4, to copy and tamper with."""
    output_dir = tmp_path_factory.mktemp("checkpointed")
    with torch_threads(1):
        run_in_process(tiny_argv(output_dir, max_steps=4, save_steps=2, eval_steps=100, dropout=0.1))
    return output_dir
