"""No command deletes or overwrites what it reads (vaswani.output_paths), results files are replaced whole or not at
all, demo.py runs no code from a model folder, and a missing checkpoint or tokenizer folder is named as missing.

For every script of scripts/ that writes, an `--output_dir` / `--output_file` that is one of its inputs, lies inside
one or holds one is refused with one message naming both options and both paths, and nothing on disk changes (a
listing with the hash of every file, before and after). Every refusal comes before anything is loaded, so each case
takes a fraction of a second.
"""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import (
    PAIRS,
    QUIET,
    file_size_limit,
    run_main,
    save_seq2seq_model,
    script_module,
    snapshot,
    write_jsonl,
)
from vaswani.output_paths import write_text_atomically
from vaswani.training.arguments import TrainArguments
from vaswani.runs.ownership import release_output_dir
from vaswani.training.preparation import prepare_output_dir


pytestmark = pytest.mark.usefixtures("one_thread")  # the tiny models run fastest on one thread


@pytest.fixture(scope="module")
def pristine(tokenizer, tmp_path_factory):
    """A tiny checkpoint (which is also a tokenizer folder) and a data file with en/de columns, copied into each case,
    and a second copy of each that the cases read as their other inputs."""
    folder = tmp_path_factory.mktemp("pristine")
    checkpoint = save_seq2seq_model(folder / "checkpoint", tokenizer, source_lang="en", target_lang="de")
    data = write_jsonl(folder / "data.jsonl", [{"en": en, "de": de} for en, de in PAIRS])
    return {"model": checkpoint, "data": data}


# --- the writing scripts, each with one input given as the output, inside it, or around it ---------------------


@dataclass(frozen=True)
class Case:
    script: str
    input_option: str  # as the message names it
    output_option: str
    kind: str  # what the input is: "model" (a checkpoint folder, also a tokenizer folder) or "data" (a file)
    argv: str  # the command line; {input}, {output}, {model} and {data} (the other inputs) filled in
    suffix: str = ""  # the output must end so (a picture)
    inside: str = "out"  # the name of an output inside the input folder: an existing file of it, for output files


EXPORT = ("model_dir (--model)", "output_dir (--output_dir)")
HEATMAP = "--text Hello. --output_file {output}"
FINE_TUNING = "--train_file {data} --output_dir {output} --do_train " + " ".join(QUIET)
CASES = [
    Case("train", "--tokenizer", "--output_dir", "model",
         "--train_file {data} --tokenizer {input} --output_dir {output} --overwrite_output_dir --preset tiny "
         "--max_steps 1 --max_source_length 32 --max_target_length 32 --eval_max_new_tokens 8 --report_to none"),
    Case("train", "--train_file", "--output_dir", "data",
         "--train_file {input} --output_dir {output} --overwrite_output_dir --preset tiny --max_steps 1 "
         "--max_source_length 32 --max_target_length 32 --eval_max_new_tokens 8 --report_to none"),
    Case("train_tokenizer", "--train_file", "--output_dir", "data",
         "--train_file {input} --columns en --output_dir {output}"),
    Case("average_checkpoints", "--checkpoints", "--output_dir", "model",
         "--checkpoints {input} {model} --output_dir {output}"),
    Case("make_denoising_pairs", "--texts", "--output_dir", "data", "--texts {input}:en --output_dir {output}"),
    Case("make_pseudo_summaries", "--train_file", "--output_dir", "data",
         "--train_file {input} --column en --output_dir {output}"),
    Case("finetune_classification", "--model_name_or_path", "--output_dir", "model",
         "--model_name_or_path {input} " + FINE_TUNING),
    Case("finetune_classification", "--train_file", "--output_dir", "data",
         "--model_name_or_path {model} --output_dir {output} --train_file {input} --do_train " + " ".join(QUIET)),
    Case("finetune_seq2seq", "--model_name_or_path", "--output_dir", "model",
         "--model_name_or_path {input} --task translation --source_column en --target_column de " + FINE_TUNING),
    Case("finetune_token_classification", "--tokenizer_name", "--output_dir", "model",
         "--preset tiny --tokenizer_name {input} " + FINE_TUNING),
    Case("evaluate_model", "--model", "--output_file", "model",
         "--model {input} --task translation --validation_file {data} --output_file {output}", inside="config.json"),
    Case("evaluate_model", "--validation_file", "--output_file", "data",
         "--model {model} --task translation --validation_file {input} --output_file {output}"),
    Case("extractive_baseline", "--validation_file", "--output_file", "data",
         "--method first_lines --validation_file {input} --source_column en --target_column de --output_file {output}"),
    Case("attention_heatmap", "--model", "--output_file (its .json beside the picture)", "model",
         "--model {input} " + HEATMAP, suffix=".png", inside="config.png"),
    Case("demo", "--model", "--output_file (its .json beside the picture)", "model",
         "--model {input} " + HEATMAP, suffix=".png", inside="config.png"),
    Case("push_to_hub", "--model", "--output_dir", "model",
         "--model {input} --dry-run --output_dir {output} --overwrite_output_dir"),
    Case("export_ctranslate2", *EXPORT, "model", "--model {input} --output_dir {output} --overwrite_output_dir"),
    Case("export_onnx", *EXPORT, "model", "--model {input} --output_dir {output} --overwrite_output_dir"),
]
RELATIONS = {"model": ("is", "lies inside", "holds"), "data": ("is", "holds")}


def place(case: Case, relation: str, root: Path, pristine: dict) -> tuple[Path, Path]:
    """Copy the case's input under `root` and choose an output that is the input, lies inside it or holds it
    (`relation`); returns (input, output). Beside the input lies a file of the user's that nothing may touch."""
    holder = root / f"holder{case.suffix}"
    name = "in" + case.suffix if case.kind == "model" else "train.jsonl"
    given = holder / name if relation == "holds" else root / name
    given.parent.mkdir(parents=True, exist_ok=True)
    if case.kind == "model":
        shutil.copytree(pristine["model"], given)
    else:
        shutil.copy(pristine["data"], given)
    (given.parent / "notes.txt").write_text("the user's own file\n")
    output = {"is": given, "lies inside": given / case.inside, "holds": holder}[relation]
    return given, output


def argv_of(case: Case, given: Path, output: Path, pristine: dict) -> list[str]:
    return case.argv.format(input=given, output=output, model=pristine["model"], data=pristine["data"]).split()


@pytest.mark.parametrize(
    "case, relation",
    [(case, relation) for case in CASES for relation in RELATIONS[case.kind]],
    ids=lambda value: value.script + ":" + value.input_option if isinstance(value, Case) else value.replace(" ", "-"),
)
def test_an_output_that_is_inside_or_holds_an_input_is_refused_and_nothing_changes(
    case, relation, pristine, tmp_path
):
    given, output = place(case, relation, tmp_path, pristine)
    argv = argv_of(case, given, output, pristine)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as refused:
        run_main(case.script, argv)
    message = str(refused.value)
    # a picture's .json is checked beside it: the picture itself may be a new name where its .json is not
    output_named = output.with_suffix(".json") if case.suffix and relation == "lies inside" else output
    assert f"{output_named} {relation} {case.input_option} {given}" in message, message
    assert case.output_option.split(" ")[0] in message and "\n" not in message
    assert snapshot(tmp_path) == before


def test_average_checkpoints_into_its_first_checkpoint_is_refused(pristine, tmp_path):
    """The case that was found: `--checkpoints A B --output_dir A` replaced A's weights with the mean."""
    first = shutil.copytree(pristine["model"], tmp_path / "A")
    second = shutil.copytree(pristine["model"], tmp_path / "B")
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=f"--output_dir {first} is --checkpoints {first}"):
        run_main("average_checkpoints", ["--checkpoints", str(first), str(second), "--output_dir", str(first)])
    assert snapshot(tmp_path) == before


# --- symbolic links -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["push_to_hub", "export_ctranslate2", "export_onnx"])
def test_an_output_folder_given_as_a_link_is_refused_naming_it(name, pristine, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("not the command's to delete\n")
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    argv = ["--model", str(pristine["model"]), "--output_dir", str(link), "--overwrite_output_dir"]
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=f"{link} is a symbolic link to {target}: a command writes its outputs at the "
                       "path given, never through a link") as refused:
        run_main(name, argv + (["--dry-run"] if name == "push_to_hub" else []))
    assert "\n" not in str(refused.value)
    assert snapshot(tmp_path) == before


def test_a_link_to_the_input_is_the_input(pristine, tmp_path):
    model = shutil.copytree(pristine["model"], tmp_path / "model")
    link = tmp_path / "link"
    link.symlink_to(model, target_is_directory=True)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=f"--output_dir {link} is --model {model} \\(through symbolic links"):
        run_main("push_to_hub", ["--model", str(model), "--dry-run", "--output_dir", str(link),
                                 "--overwrite_output_dir"])
    assert snapshot(tmp_path) == before


class MainProcess:
    """What prepare_output_dir asks of an Accelerator, for one process."""

    is_main_process = True

    def print(self, *args):
        print(*args)

    def wait_for_everyone(self):
        pass


def test_starting_over_removes_a_linked_run_folder_and_not_what_it_points_to(tmp_path):
    """train.py --overwrite_output_dir deletes what an earlier run wrote; a `best` that is a link to a folder elsewhere
    goes as a link (rmtree refused it with "Cannot call rmtree on a symbolic link", naming no path)."""
    published = tmp_path / "published"
    published.mkdir()
    (published / "model.safetensors").write_bytes(b"weights")
    run = tmp_path / "run"
    (run / "last").mkdir(parents=True)
    (run / "best").symlink_to(published, target_is_directory=True)
    lock = prepare_output_dir(MainProcess(), run, TrainArguments(output_dir=str(run), overwrite_output_dir=True), {})
    release_output_dir(lock)
    assert not os.path.lexists(run / "best") and not (run / "last").exists()
    assert (published / "model.safetensors").read_bytes() == b"weights"


# --- results files replaced whole ---------------------------------------------------------------------------------


def test_a_results_file_is_replaced_whole_or_not_at_all(pristine, tmp_path, monkeypatch):
    """A results file that fails halfway through being written (the disk fills) leaves the previous one as it was,
    and no temporary file; written in full, it replaces it."""
    baseline = script_module("extractive_baseline")
    output = tmp_path / "results" / "evaluation_results.json"
    output.parent.mkdir()
    previous = '{"metrics": [], "conventions": "the previous results"}\n'
    output.write_text(previous)
    argv = ["--method", "first_lines", "--validation_file", str(pristine["data"]), "--source_column", "en",
            "--target_column", "de", "--output_file", str(output)]
    write_results = baseline.write_results

    def write_results_on_a_filling_disk(*args, **kwargs):
        with file_size_limit(len(previous) + 40):
            return write_results(*args, **kwargs)

    monkeypatch.setattr(baseline, "write_results", write_results_on_a_filling_disk)
    with pytest.raises(OSError):
        baseline.main(argv)
    assert output.read_text() == previous
    assert os.listdir(output.parent) == [output.name]

    monkeypatch.setattr(baseline, "write_results", write_results)
    results = baseline.main(argv)
    assert json.loads(output.read_text()) == results


def test_an_atomic_write_keeps_the_usual_permissions(tmp_path):
    """The temporary file is created as any new file is (the umask applies), not private to its owner."""
    ordinary = tmp_path / "ordinary.json"
    ordinary.write_text("{}")
    written = write_text_atomically(tmp_path / "atomic.json", "{}")
    assert written.stat().st_mode == ordinary.stat().st_mode


def test_an_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    """A results file the user made private (0600) stays private when it is written again (it became 0644)."""
    private = tmp_path / "evaluation_results.json"
    private.write_text('{"metrics": [], "conventions": "earlier"}')
    private.chmod(0o600)
    write_text_atomically(private, '{"metrics": [], "conventions": "new"}')
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and "new" in private.read_text()


# a write of a results file in a fresh process, killed (SIGKILL) once its temporary file is written, before the rename
KILLED_WRITE = """
import os, signal, sys
from vaswani.output_paths import write_atomically

def write_then_die(temporary):
    temporary.write_text('{"metrics": [], "conventions": "complete-looking"}')
    os.kill(os.getpid(), signal.SIGKILL)

write_atomically(sys.argv[1], write_then_die, "--output_file")
"""


def test_the_next_write_of_a_file_removes_what_a_killed_write_left(tmp_path, capfd):
    output = tmp_path / "res.json"
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(output)], capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == -9, killed.stderr
    [left] = [path.name for path in tmp_path.iterdir()]
    assert left.startswith(".res.json.") and left.endswith(".partial")  # complete-looking, and it stayed forever
    (tmp_path / ".res.json.mine.partial").write_text("the user's, named alike\n")
    write_text_atomically(output, '{"metrics": [], "conventions": "new"}')
    assert sorted(path.name for path in tmp_path.iterdir()) == [".res.json.mine.partial", "res.json"]
    said = capfd.readouterr().err
    assert f"Note: {output}: removed {left}, the unfinished copy a write of it left when it was killed" in said, said


# --- no code from a model folder ----------------------------------------------------------------------------------


def test_demo_runs_no_code_from_the_model_folder_and_still_translates(pristine, tmp_path):
    """A folder's own code files (the planted line would create a file) are never run: the installed package's
    classes load the checkpoint."""
    pytest.importorskip("matplotlib", reason="the plot extra is not installed: pip install -e '.[plot]'")
    folder = shutil.copytree(pristine["model"], tmp_path / "model")
    marker = tmp_path / "the-planted-line-ran"
    code_files = sorted(folder.glob("*.py"))
    assert {path.name for path in code_files} >= {"pipeline_vaswani.py", "modeling_vaswani.py"}
    for path in code_files:
        path.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n" + path.read_text())
    picture = tmp_path / "attention.png"
    translations = run_main("demo", ["--model", str(folder), "--text", "A man is riding a horse.",
                                     "--output_file", str(picture)])
    assert not marker.exists()
    assert len(translations) == 1 and isinstance(translations[0], str)
    assert picture.is_file() and picture.with_suffix(".json").is_file()


# --- a missing checkpoint or tokenizer folder ---------------------------------------------------------------------


MISSING = [
    ("evaluate_model", "--model", "--model {missing} --task translation --validation_file {data} --output_file r.json"),
    ("attention_heatmap", "--model", "--model {missing} --text Hello. --output_file a.png"),
    ("finetune_classification", "--model_name_or_path",
     "--model_name_or_path {missing} --train_file {data} --output_dir out --do_train"),
    ("finetune_seq2seq", "--tokenizer_name",
     "--model_name_or_path {model} --tokenizer_name {missing} --train_file {data} --output_dir out --do_train"),
    ("train", "--tokenizer", "--tokenizer {missing} --train_file {data} --output_dir out --preset tiny"),
]


@pytest.mark.parametrize("name, option, command", MISSING, ids=[f"{name}:{option}" for name, option, _ in MISSING])
@pytest.mark.parametrize("missing", ["a/missing/folder", "someone/missing-model"], ids=["path", "hub-id"])
def test_a_missing_folder_is_named_as_missing(name, option, command, missing, pristine, tmp_path, monkeypatch):
    """A path that is not there is said to be missing (transformers said "Repo id must be in the form ..."); a name in
    the form of a Hub id cannot be fetched offline (the tests run with HF_HUB_OFFLINE=1): one line either way."""
    monkeypatch.chdir(tmp_path)
    argv = command.format(missing=missing, model=pristine["model"], data=pristine["data"]).split()
    with pytest.raises(FileNotFoundError) as refused:
        run_main(name, argv)
    message = str(refused.value)
    assert message.startswith(f"{option} {missing}: no such folder") and "\n" not in message, message
    if missing.count("/") == 1:
        assert "HF_HUB_OFFLINE" in message


def test_a_full_disk_while_a_results_file_is_written_names_the_file(pristine, tmp_path, monkeypatch):
    """The write fails part-way with ENOSPC: one line naming the option and the file (it was a bare [Errno 28]), and
    neither the file nor a partial one is left."""
    output = tmp_path / "results" / "evaluation_results.json"
    write_text = Path.write_text

    def write_half_then_fill(self, text, *args, **kwargs):
        if self.parent == output.parent:
            write_text(self, text[: len(text) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_half_then_fill)
    with pytest.raises(OSError) as refused:
        run_main("extractive_baseline", [
            "--method", "first_lines", "--validation_file", str(pristine["data"]), "--source_column", "en",
            "--target_column", "de", "--output_file", str(output)])
    assert str(refused.value) == (
        f"could not write --output_file {output}: [Errno 28] No space left on device. The file is as it was (the "
        "partial file is removed). Free disk space (or make the folder writable), then run the command again.")
    assert os.listdir(output.parent) == []
