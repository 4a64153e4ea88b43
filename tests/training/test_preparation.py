"""vaswani.training.preparation: the output folder a run takes: not one that holds another run, not one where
--overwrite_output_dir would delete the run's tokenizer, and one that can be written (said before training)."""

import pytest

from helpers import REPO, command_in_process
from training_helpers import copy_of, reset_accelerate, run_in_process, tiny_argv
from vaswani.runs.errors import TrainingError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_run_refuses_a_folder_that_holds_another_run(finished_run):
    output_dir, _ = finished_run
    with pytest.raises(TrainingError, match=r"already holds a run .*--resume.*--overwrite_output_dir"):
        run_in_process(tiny_argv(output_dir))


def test_overwriting_a_folder_refuses_to_delete_the_tokenizer_the_run_was_given(finished_run, tmp_path):
    run = copy_of(finished_run[0], tmp_path)
    with pytest.raises(ValueError, match=r"--output_dir .*run holds --tokenizer .*run/last: writing there would "
                                         r"delete or overwrite"):
        run_in_process(tiny_argv(run, overwrite_output_dir=True, tokenizer=str(run / "last"), vocab_size=None))
    assert (run / "last" / "tokenizer.json").is_file()


def test_an_unwritable_output_folder_is_reported_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    try:
        result = command_in_process(REPO / "scripts" / "train.py", tiny_argv(blocker / "run"))
    finally:
        reset_accelerate()
    assert result.returncode == 1
    assert f"train.py: error: --output_dir {blocker / 'run'} is not writable" in result.stderr
    assert "Traceback" not in result.stderr  # the message, not a stack trace
