"""vaswani.training.run_files: a run deletes, replaces or prunes only what a run of this project wrote, and its run
folder is known as one by what it keeps in sight, lock or not.

- A run's clean-up leaves the user's hidden folders in --output_dir (it deleted every `.tmp-*` and `.old-*`, by
  name) and removes only the leftovers that hold a run's mark.
- `--overwrite_output_dir` deletes only what an earlier run wrote: another tool's `checkpoints/fairseq_best.pt`, a
  `tokenizer/sentencepiece.model`, a file of the user's in `best/` or one changed there are named, and nothing is
  deleted (it deleted every folder named as a run's, whatever it held).
- A run folder copied without its dotfiles (no `.run.lock`) is still a run's: average_checkpoints refuses to write
  into its `checkpoints/`, and no results file goes there; `--resume` refuses a folder in `checkpoints/` that is not
  a run's checkpoint before any work (it warned that it did not use it, then saved its own checkpoint over it).
"""

import shutil
from pathlib import Path

import pytest

from helpers import run_main, snapshot
from training_helpers import copy_of, run_in_process, tiny_argv
from vaswani.output_paths import OutputFolder, check_output_file
from vaswani.runs.errors import TrainingError
from vaswani.runs.manifests import MANIFEST_FILE
from vaswani.runs.ownership import LOCK_FILE
from vaswani.training.checkpoints import list_checkpoints
from vaswani.training.run_files import CHECKPOINT, MODEL, mark

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = dict(max_steps=2, save_steps=2, eval_steps=2, keep_checkpoints=2)


def test_a_run_leaves_the_users_hidden_folders_and_removes_its_own_leftovers(tmp_path, capsys):
    run = tmp_path / "run"
    for name in (".tmp-notes", ".old-photos", ".tmp-best"):  # the user's (the last named as a killed save's was)
        (run / name).mkdir(parents=True)
        (run / name / "keep.txt").write_text("the user's\n")
    mark(run / ".tmp-last", MODEL)  # what a save killed on the way leaves: marked as the run's
    before = snapshot(run)
    with pytest.raises(TrainingError) as refused:  # .tmp-best: where the run would save best/, before any work
        run_in_process(tiny_argv(run, **SHORT))
    assert str(refused.value) == (
        f"--output_dir {run} holds .tmp-best, under the name(s) the run saves under, without the mark a run leaves "
        "in what it writes (an earlier version's leftover of a killed save, or a folder of yours): not touched. Move "
        "it away, then run again.")
    assert without_lock(snapshot(run)) == without_lock({key: value for key, value in before.items()
                                                        if not key.startswith(".tmp-last")})
    assert f"Note: removed {run / '.tmp-last'}, left by a save that was killed" in capsys.readouterr().out

    shutil.move(run / ".tmp-best", tmp_path / "moved")
    run_in_process(tiny_argv(run, **SHORT))
    assert {key: value for key, value in snapshot(run).items() if key.startswith((".tmp-notes", ".old-photos"))} == {
        key: value for key, value in before.items() if key.startswith((".tmp-notes", ".old-photos"))}


def without_lock(listing: dict) -> dict:
    """A snapshot without the run's lock, which a run (refused or not) takes, writing its record there."""
    return {key: value for key, value in listing.items() if Path(key).name != LOCK_FILE}


@pytest.mark.parametrize("place, named", [
    ("checkpoints/fairseq_best.pt", "checkpoints/fairseq_best.pt (a file), which is not a checkpoint of this project's "
                                    "runs"),
    ("tokenizer/sentencepiece.model", "tokenizer/sentencepiece.model (a file), which is not a file this project "
                                      "writes"),
    ("best/notes.txt", "best/notes.txt (a file), which is not a file this project writes"),
    ("best/generation_config.json", "best/generation_config.json (a file), which was changed after train.py wrote it"),
    ("checkpoints/step-00000002/fairseq.pt", "checkpoints/step-00000002/fairseq.pt (a file), which is not a file this "
                                             "project writes"),
])
def test_overwriting_deletes_only_what_a_run_wrote(place, named, checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    path = run / place
    path.write_text(path.read_text() + "\n" if path.exists() else "another tool's\n")
    before = snapshot(tmp_path)
    with pytest.raises(TrainingError) as refused:
        run_in_process(tiny_argv(run, overwrite_output_dir=True, **SHORT))
    message = str(refused.value)
    expected = f"--overwrite_output_dir would delete what an earlier run wrote there, but it holds {run}/{named}"
    assert expected in message, message
    assert "nothing was deleted" in message and "\n" not in message
    assert without_lock(snapshot(tmp_path)) == without_lock(before)


def test_overwriting_a_run_of_its_own_starts_over(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    (run / "notes.txt").write_text("the user's, beside the run\n")
    run_in_process(tiny_argv(run, overwrite_output_dir=True, **SHORT))
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [2]
    assert (run / "notes.txt").read_text() == "the user's, beside the run\n"


def copied_without_dotfiles(run: Path, tmp_path: Path) -> Path:
    copy = copy_of(run, tmp_path)
    (copy / LOCK_FILE).unlink()
    return copy


def test_a_run_folder_without_its_lock_is_still_a_run(checkpointed_run, tmp_path):
    run = copied_without_dotfiles(checkpointed_run, tmp_path)
    checkpoints = run / "checkpoints"
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"lies inside checkpoints/ of the training run in .* \(it holds the run's "
                                         r"record arguments.json\)"):
        run_main("average_checkpoints", ["--checkpoints", str(checkpoints / "step-00000002"),
                                         str(checkpoints / "step-00000004"),
                                         "--output_dir", str(checkpoints / "step-00000030")])
    with pytest.raises(ValueError, match="lies inside checkpoints/ of the training run"):
        check_output_file(checkpoints / "step-00000004" / "model" / "evaluation_results.json", {})
    assert snapshot(tmp_path) == before


def test_resuming_beside_a_folder_that_is_not_a_checkpoint_is_refused_before_any_work(checkpointed_run, tmp_path):
    run = copied_without_dotfiles(checkpointed_run, tmp_path)
    foreign = run / "checkpoints" / "step-00000006"  # an averaged model put there by hand, where update 6 would go
    with OutputFolder(tmp_path / "averaged", {}) as output, output.publish() as folder:
        shutil.copytree(run / "last", folder, dirs_exist_ok=True)
    shutil.copytree(tmp_path / "averaged", foreign)
    before = snapshot(tmp_path)
    with pytest.raises(TrainingError) as refused:
        run_in_process(tiny_argv(run, resume=True, **{**SHORT, "max_steps": 6}))
    message = str(refused.value)
    assert f"{foreign} is not a checkpoint of this project's runs" in message
    assert "Move it out of checkpoints/" in message
    assert without_lock(snapshot(tmp_path)) == without_lock(before)


def test_a_checkpoint_saved_again_at_its_update_replaces_only_the_runs_own(tmp_path):
    """The marks the clean-up and the replace go by: a checkpoint's manifest says what wrote it."""
    mark(tmp_path / "step-00000002", CHECKPOINT)
    (tmp_path / "step-00000003").mkdir()
    from vaswani.training.run_files import foreign_checkpoint, is_own_checkpoint

    assert is_own_checkpoint(tmp_path / "step-00000002") and not is_own_checkpoint(tmp_path / "step-00000003")
    assert foreign_checkpoint(tmp_path) == tmp_path / "step-00000003"


def test_a_run_of_an_earlier_version_resumes_and_its_folders_are_replaced(checkpointed_run, tmp_path):
    """Without manifests (an earlier version's run), best/, last/ and the checkpoints are known by their content:
    the run resumes, replaces them, prunes the old checkpoints and starts over with --overwrite_output_dir."""
    run = copy_of(checkpointed_run, tmp_path)
    for manifest in run.rglob(MANIFEST_FILE):
        manifest.unlink()
    run_in_process(tiny_argv(run, resume=True, **{**SHORT, "max_steps": 6, "keep_checkpoints": 1}))
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [6]
    for manifest in run.rglob(MANIFEST_FILE):
        manifest.unlink()
    run_in_process(tiny_argv(run, overwrite_output_dir=True, **SHORT))
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [2]
