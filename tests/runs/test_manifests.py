"""A folder is replaced only where its manifest proves it this project's (vaswani.runs.manifests,
vaswani.output_paths.OutputFolder), and a replace cannot lose both folders.

- `--overwrite_output_dir` on a folder of the user's own files (`analysis.py`, `settings.json`, `corpus.jsonl`,
  `README.md`, `photo.png`), or on one a command wrote where the user then added them or changed a file, is refused
  by every command that publishes a folder, naming the file, with nothing on disk changed (they were all deleted,
  exit 0, no word: they matched the file name patterns that decided). A folder a command wrote, and a model folder
  of an earlier version (no manifest) that holds only what save_pretrained and a card write, are replaced.
- A command killed on the way (SIGKILL, in a fresh process): between the two renames of a replace, where the system
  has no renameat2 exchange (push_to_hub, export_ctranslate2, average_checkpoints: the earlier folder survived only
  as a hidden `.NAME.replaced-*` that nothing ever restored or removed); right after the exchange (the path holds the
  new folder at once); before the publish rename (a complete-looking `.hub.partial-*`, `.tok.partial-*` stayed
  forever). The next command on the path puts it right, in one line, and leaves nothing beside it.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import PAIRS, REPO, run_main, save_seq2seq_model, snapshot, write_jsonl
from vaswani.output_paths import OutputFolder
from vaswani.runs.manifests import MANIFEST_FILE
from vaswani.runs import manifests


pytestmark = pytest.mark.usefixtures("one_thread")

USER_FILES = {
    "analysis.py": "import pandas\n", "settings.json": '{"theme": "dark"}\n', "corpus.jsonl": '{"text": "mine"}\n',
    "README.md": "# My notes\n", "photo.png": "\x89PNG not really\n",
}


@pytest.fixture(scope="module")
def inputs(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    return {
        "model": save_seq2seq_model(folder / "model", tokenizer, source_lang="en", target_lang="de"),
        "other": save_seq2seq_model(folder / "other", tokenizer, seed=1, source_lang="en", target_lang="de"),
        "data": write_jsonl(folder / "pairs.jsonl", [{"en": en, "de": de} for en, de in PAIRS]),
    }


# every command that publishes a folder (OutputFolder), with --overwrite_output_dir
COMMANDS = {
    "export_onnx": "--model {model} --output_dir {output} --overwrite_output_dir",
    "push_to_hub": "--model {model} --dry-run --output_dir {output} --overwrite_output_dir",
    "train_tokenizer": "--train_file {data} --columns en --vocab_size 300 --min_frequency 1 --output_dir {output} "
                       "--overwrite_output_dir",
    "export_ctranslate2": "--model {model} --output_dir {output} --overwrite_output_dir",
    "average_checkpoints": "--checkpoints {model} {other} --output_dir {output} --overwrite_output_dir",
    "make_denoising_pairs": "--texts {data}:en --validation_size 1 --output_dir {output} --overwrite_output_dir",
    "make_pseudo_summaries": "--train_file {data} --column en --validation_size 1 --output_dir {output} "
                             "--overwrite_output_dir",
}


def argv_of(name: str, output: Path, inputs: dict) -> list[str]:
    return COMMANDS[name].format(output=output, **inputs).split()


def refusal(name: str, output: Path, inputs: dict) -> str:
    """The one line a command refuses with; nothing it reads loaded."""
    with pytest.raises(FileExistsError) as refused:
        run_main(name, argv_of(name, output, inputs))
    message = str(refused.value)
    assert "\n" not in message and f"{output} holds " in message and "--overwrite_output_dir" in message, message
    return message


@pytest.mark.parametrize("name", COMMANDS)
def test_a_folder_of_the_users_files_is_never_replaced(name, inputs, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    for file, text in USER_FILES.items():
        (output / file).write_text(text)
    before = snapshot(tmp_path)
    message = refusal(name, output, inputs)
    assert "holds README.md (a file), which is not a file this project writes" in message, message
    assert snapshot(tmp_path) == before


# a command's own folder, then the user's files added to it, or one of its files changed
WRITTEN_AGAIN = ["train_tokenizer", "push_to_hub", "average_checkpoints", "make_denoising_pairs"]


@pytest.mark.parametrize("name", WRITTEN_AGAIN)
def test_a_folder_a_command_wrote_is_replaced_and_the_users_files_added_to_it_are_named(name, inputs, tmp_path):
    output = tmp_path / "out"
    run_main(name, argv_of(name, output, inputs))
    (output / "analysis.py").write_text(USER_FILES["analysis.py"])
    before = snapshot(tmp_path)
    assert "holds analysis.py (a file), which is not a file this project writes (it is not in the folder's " \
           f"{MANIFEST_FILE}" in refusal(name, output, inputs)
    assert snapshot(tmp_path) == before
    (output / "analysis.py").unlink()

    changed = sorted(path.name for path in output.iterdir()
                     if path.suffix in (".json", ".jsonl") and path.name != MANIFEST_FILE)[0]
    (output / changed).write_text((output / changed).read_text() + " ")
    before = snapshot(tmp_path)
    assert f"holds {changed} (a file), which was changed after" in refusal(name, output, inputs)
    assert snapshot(tmp_path) == before
    (output / changed).write_text((output / changed).read_text()[:-1])

    record = manifests.read_manifest(output)  # what the command wrote, listed
    assert record["complete"] and set(record["files"]) == {
        path.relative_to(output).as_posix() for path in output.rglob("*") if path.is_file()} - {MANIFEST_FILE}
    run_main(name, argv_of(name, output, inputs))  # its own folder: replaced
    assert manifests.read_manifest(output)["token"] != record["token"]


def test_a_model_folder_of_an_earlier_version_is_replaced_only_when_it_holds_nothing_else(inputs, tmp_path):
    """Without a manifest, a model folder is known by its files' content: config.json of this project's model type,
    weights, tokenizer, the code files identical to the package's, a card of this project."""
    output = shutil.copytree(inputs["other"], tmp_path / "out")
    run_main("push_to_hub", argv_of("push_to_hub", tmp_path / "card", inputs))  # a card this project writes
    shutil.copy(tmp_path / "card" / "README.md", output / "README.md")
    for damage, named in [("README.md", "which is not a model card of this project"),
                          ("modeling_vaswani.py", "which is not a code file of this version of the project")]:
        keep = (output / damage).read_bytes()
        (output / damage).write_text("# edited by the user\n")
        before = snapshot(tmp_path)
        assert named in refusal("average_checkpoints", output, inputs)
        assert snapshot(tmp_path) == before
        (output / damage).write_bytes(keep)
    run_main("average_checkpoints", argv_of("average_checkpoints", output, inputs))
    assert manifests.read_manifest(output)["complete"]


# --- a command killed on the way ---------------------------------------------------------------------------------

# a script of scripts/ in a fresh process that SIGKILLs itself at one point of its publish (the first argument)
KILLED = textwrap.dedent("""
    import os, pathlib, runpy, signal, sys
    from vaswani import output_paths
    from vaswani.runs import manifests

    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)

    when, sys.argv = sys.argv[1], sys.argv[2:]  # then the script and its arguments, as the script sees them
    if when == "between the renames":
        manifests.exchange = lambda first, second: False  # a system without renameat2's exchange
        rename = pathlib.Path.rename

        def rename_then_die(self, target):
            moved = rename(self, target)
            if ".replaced-" in pathlib.Path(target).name:
                die()
            return moved

        pathlib.Path.rename = rename_then_die
    elif when == "after the exchange":
        exchange = manifests.exchange
        manifests.exchange = lambda first, second: exchange(first, second) and die()
    elif when == "before the publish":
        output_paths.fsync_tree = die
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def killed(name: str, when: str, output: Path, inputs: dict) -> None:
    script = REPO / "scripts" / f"{name}.py"
    result = subprocess.run([sys.executable, "-c", KILLED, when, str(script), *argv_of(name, output, inputs)],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == -9, result.stderr[-3000:]


def beside(output: Path) -> list[str]:
    return sorted(path.name for path in output.parent.iterdir() if path.name.startswith(f".{output.name}."))


@pytest.mark.parametrize("name", ["push_to_hub", "export_ctranslate2", "average_checkpoints"])
def test_a_replace_killed_between_its_two_renames_is_completed_by_the_next_command(name, inputs, tmp_path, capsys):
    if name == "export_ctranslate2":
        pytest.importorskip("ctranslate2", reason="the export needs ctranslate2: pip install -e '.[ctranslate2]'")
    output = tmp_path / "out"
    run_main(name, argv_of(name, output, inputs))
    killed(name, "between the renames", output, inputs)
    assert not output.exists() and any(".replaced-" in leftover for leftover in beside(output))
    capsys.readouterr()
    run_main(name, argv_of(name, output, inputs))
    said = capsys.readouterr().err
    assert f"{output}: a command killed while it was writing there" in said and "completed" in said, said
    assert len([line for line in said.splitlines() if line.startswith("Note:")]) == 1
    assert beside(output) == [] and manifests.read_manifest(output)["complete"]


def test_a_replace_killed_right_after_the_exchange_leaves_the_new_folder_in_place(inputs, tmp_path, capsys):
    probe = tmp_path / "probe"
    (probe / "a").mkdir(parents=True)
    (probe / "b").mkdir()
    if not manifests.exchange(probe / "a", probe / "b"):
        pytest.skip("this file system has no renameat2 exchange (the two-rename case is tested above)")
    output = tmp_path / "out"
    run_main("average_checkpoints", argv_of("average_checkpoints", output, inputs))
    earlier = snapshot(output)
    killed("average_checkpoints", "after the exchange", output, inputs)
    assert output.is_dir() and snapshot(output) != earlier  # the new folder, at once
    left = beside(output)
    assert any(".partial-" in name for name in left), left  # the earlier folder, where the new one was staged
    capsys.readouterr()
    with pytest.raises(FileExistsError, match="exists and is not empty"):  # the next command, without the option
        run_main("average_checkpoints", argv_of("average_checkpoints", output, inputs)[:-1])
    said = capsys.readouterr().err
    assert "had put its new folder in place: the earlier one it set aside" in said and "is removed" in said, said
    assert beside(output) == []


@pytest.mark.parametrize("name, folder", [("push_to_hub", "hub"), ("train_tokenizer", "tok")])
def test_a_folder_killed_before_its_publish_is_removed_by_the_next_command(name, folder, inputs, tmp_path, capsys):
    output = tmp_path / folder
    killed(name, "before the publish", output, inputs)
    lock, staged = beside(output)  # the lock file holds the record of what was under way
    assert lock == f".{folder}.lock" and staged.startswith(f".{folder}.partial-")
    assert (tmp_path / staged / "tokenizer.json").is_file()  # complete-looking, never published
    capsys.readouterr()
    run_main(name, argv_of(name, output, inputs))
    said = capsys.readouterr().err
    assert f"left its unfinished folder {staged}: removed" in said, said
    assert beside(output) == [] and manifests.read_manifest(output)["complete"]


def test_what_an_earlier_version_left_beside_a_folder_is_named_not_touched(inputs, tmp_path, capsys):
    output = tmp_path / "out"
    left = tmp_path / ".out.replaced-4242-0123abcd"
    left.mkdir()
    (left / "config.json").write_text(json.dumps({"earlier": True}))
    before = snapshot(left)
    run_main("make_denoising_pairs", argv_of("make_denoising_pairs", output, inputs))
    said = capsys.readouterr().err
    assert f"beside it lie {left.name}, left by a command that was killed" in said and "not touched" in said, said
    assert snapshot(left) == before


def test_publish_records_its_progress_in_the_lock_and_clears_it(tmp_path):
    output = tmp_path / "out"
    with OutputFolder(output, {}) as folder:
        with folder.publish() as staging:
            record = json.loads(folder.lock_file.read_text())
            assert record["pending"]["staging"] == staging.name and record["pending"]["phase"] == "writing"
            (staging / "a.txt").write_text("a")
        assert "pending" not in json.loads(folder.lock_file.read_text())
    assert manifests.read_manifest(output)["files"]["a.txt"]["size"] == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
