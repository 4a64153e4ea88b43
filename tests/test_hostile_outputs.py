"""No command writes over what it did not create (vaswani.output_paths): every output option of every script that
writes, walked through one table of hostile targets, refuses each, in one line saying why, with nothing on disk
changed (a listing of every path under the test's folder, with the hash of every file, before and after); and a
folder a command publishes appears whole or not at all when the disk fills.

The targets: a device node (a copy of /dev/null, made with mknod: root only), a FIFO, a symbolic link to one of the
command's inputs, an input whose file is a link into the output, an existing model folder that is not an input and
holds a file of the user's (with --overwrite_output_dir, where the command has it: only files this project writes
are replaced), a folder inside a training run's checkpoints/, and a folder another command is writing (its lock held
by another process). Every refusal comes before anything is loaded; train.py, which writes only its own files
beside a folder's others, runs in the model folder and leaves every file there as it was.
"""

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import (
    NER_LABELS,
    PAIRS,
    QUIET,
    file_size_limit,
    ner_rows,
    run_main,
    save_seq2seq_model,
    script_module,
    snapshot,
    write_jsonl,
)
from vaswani.output_paths import OutputFolder
from vaswani.runs.ownership import LOCK_FILE


pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass(frozen=True)
class Command:
    script: str
    argv: str  # {output}, {model}, {other}, {data}, {labels} and {ner} filled in
    kind: str = "folder"  # what the output is: "folder" or "file"
    in_place: bool = False  # writes into the folder as it goes (a run), rather than publishing it whole
    suffix: str = ""  # the output must end so (a picture)


FINE_TUNING = "--output_dir {output} --do_train --max_steps 1 " + " ".join(QUIET)
COMMANDS = [
    Command("train", "--train_file {data} --tokenizer {model} --output_dir {output} --preset tiny --max_steps 1 "
            "--eval_steps 1 --save_steps 1 --max_source_length 32 --max_target_length 32 --eval_num_beams 1 "
            "--eval_max_new_tokens 4 --report_to none --overwrite_output_dir", in_place=True),
    Command("finetune_classification", "--model_name_or_path {model} --train_file {labels} " + FINE_TUNING,
            in_place=True),
    Command("finetune_seq2seq", "--model_name_or_path {model} --task translation --source_column en --target_column "
            "de --train_file {data} " + FINE_TUNING, in_place=True),
    Command("finetune_token_classification", "--preset tiny --tokenizer_name {model} --train_file {ner} "
            + FINE_TUNING, in_place=True),
    Command("train_tokenizer", "--train_file {data} --columns en --vocab_size 300 --min_frequency 1 --output_dir "
            "{output} --overwrite_output_dir"),
    Command("average_checkpoints", "--checkpoints {model} {other} --output_dir {output} --overwrite_output_dir"),
    Command("make_denoising_pairs", "--texts {data}:en --validation_size 1 --output_dir {output} "
            "--overwrite_output_dir"),
    Command("make_pseudo_summaries", "--train_file {data} --column en --validation_size 1 --output_dir {output} "
            "--overwrite_output_dir"),
    Command("push_to_hub", "--model {model} --dry-run --output_dir {output} --overwrite_output_dir"),
    Command("export_ctranslate2", "--model {model} --output_dir {output} --overwrite_output_dir"),
    Command("export_onnx", "--model {model} --output_dir {output} --overwrite_output_dir"),
    Command("evaluate_model", "--model {model} --task translation --validation_file {data} --output_file {output}",
            kind="file"),
    Command("predict", "--model {model} --input_file {data} --text_column en --output_file {output}", kind="file"),
    Command("extractive_baseline", "--method first_lines --validation_file {data} --source_column en "
            "--target_column de --output_file {output}", kind="file"),
    Command("attention_heatmap", "--model {model} --text Hello. --output_file {output}", kind="file", suffix=".png"),
    Command("demo", "--model {model} --text Hello. --output_file {output}", kind="file", suffix=".png"),
    Command("tools/benchmark", "--presets tiny --json {output}", kind="file"),
]

# target -> what the refusal says (a regular expression)
TARGETS = {
    "device node": "is a character device",
    "FIFO": r"is a FIFO \(named pipe\)",
    "link to an input": r"(is a symbolic link to|through symbolic links)",
    "input file linked into the output": r"(share a file|through symbolic links)",
    "existing model folder": r"(holds notes.txt \(a file\), which is not a file this project writes|already holds a "
                             r"run or a model|is a folder)",
    "run's checkpoints folder": r"lies inside checkpoints/ of the training run",
    "second writer": "is in use by another run",
}
NOT_FOR_FILES = ("run's checkpoints folder", "second writer")  # a file is renamed into place whole: no lock


@pytest.fixture(scope="module")
def inputs(tokenizer, tmp_path_factory):
    """What the commands read: two tiny checkpoints (also tokenizer folders), translation pairs, labelled texts,
    tagged sentences."""
    folder = tmp_path_factory.mktemp("inputs")
    return {
        "model": save_seq2seq_model(folder / "model", tokenizer, source_lang="en", target_lang="de"),
        "other": save_seq2seq_model(folder / "other", tokenizer, seed=1, source_lang="en", target_lang="de"),
        "data": write_jsonl(folder / "pairs.jsonl", [{"en": en, "de": de} for en, de in PAIRS]),
        "labels": write_jsonl(folder / "labels.jsonl", [{"text": en, "label": i % 2} for i, (en, _) in
                                                        enumerate(PAIRS)]),
        "ner": write_ner(folder / "ner"),
    }


def write_ner(folder: Path) -> Path:
    path = write_jsonl(folder / "train.jsonl", ner_rows())
    (folder / "labels.json").write_text(json.dumps(NER_LABELS))
    return path


def argv_of(command: Command, output: Path, inputs: dict) -> list[str]:
    return command.argv.format(output=output, **inputs).split()


class LockHolder:
    """Another process holding a folder's lock, as a command writing there would."""

    def __init__(self, folder: Path, lock_file: Path):
        code = textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from vaswani.runs.ownership import take_output_dir
            take_output_dir(Path({str(folder)!r}), lock_file=Path({str(lock_file)!r}))
            print("holding", flush=True)
            sys.stdin.read()
        """)
        self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout.readline().strip() == "holding"

    def release(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


READS_A_MODEL = ("train", "finetune_classification", "finetune_seq2seq", "finetune_token_classification",
                 "average_checkpoints", "push_to_hub", "export_ctranslate2", "export_onnx", "evaluate_model",
                 "attention_heatmap", "demo")


def place(target: str, command: Command, root: Path, inputs: dict) -> tuple[Path, dict, LockHolder | None]:
    """Make the hostile target under `root` and return the output path to give the command, its inputs (the model
    and the pairs copied under `root`, where the target involves them) and a lock holder (for a second writer)."""
    inputs = {**inputs, "model": shutil.copytree(inputs["model"], root / "model"),
              "data": Path(shutil.copy(inputs["data"], root / "pairs.jsonl"))}
    # the input a link or a shared file involves: the checkpoint, else the data
    reads_model = command.script in READS_A_MODEL
    input_file = inputs["model"] / "tokenizer.json" if reads_model else inputs["data"]
    output = root / ("out" + (command.suffix if command.kind == "file" else ""))
    holder = None
    if target == "device node":
        if os.geteuid() != 0:
            pytest.skip("making a device node (mknod) needs root; the FIFO row covers the other special files")
        os.mknod(output, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif target == "FIFO":
        os.mkfifo(output)
    elif target == "link to an input":
        output.symlink_to(input_file if command.kind == "file" else input_file.parent)
    elif target == "input file linked into the output":
        # the input's file lives in the output, and the input holds a link to it
        moved = output / input_file.name if command.kind == "folder" else output
        moved.parent.mkdir(exist_ok=True)
        input_file.rename(moved)
        input_file.symlink_to(moved)
    elif target == "existing model folder":  # a model with the user's notes: --overwrite_output_dir is given
        shutil.copytree(inputs["other"], output)
        (output / "notes.txt").write_text("the user's own file\n")
    elif target == "run's checkpoints folder":
        run = root / "run"
        (run / "checkpoints" / "step-00000010").mkdir(parents=True)
        (run / "checkpoints" / "step-00000010" / "training_progress.json").write_text("{}")
        (run / LOCK_FILE).write_text("{}")
        output = run / "checkpoints" / "step-99999999"
    elif target == "second writer":
        if command.in_place:
            output.mkdir()
        lock_file = output / LOCK_FILE if command.in_place else OutputFolder(output, {}).lock_file
        holder = LockHolder(output, lock_file)
    return output, inputs, holder


# A second writer is refused by one of two locks: a run's folder (vaswani.runs.ownership, the commands writing in place)
# or a folder published whole (vaswani.output_paths.OutputFolder); each command reaches it after its own set-up, which
# is what makes these cases slow (12 of them took about 270 s). One command of each lock and each kind of set-up
# stands for the others: a training run, a Trainer run, a publisher that loads a model, one that loads none.
SECOND_WRITERS = ("train", "finetune_classification", "export_onnx", "train_tokenizer")
CASES = [(command, target) for command in COMMANDS for target in TARGETS
         if not (command.kind == "file" and target in NOT_FOR_FILES)
         and not (command.script == "tools/benchmark" and target == "input file linked into the output")
         and not (target == "second writer" and command.script not in SECOND_WRITERS)]


@pytest.mark.parametrize(
    "command, target", CASES,
    ids=[f"{command.script}:{target.replace(' ', '-')}" for command, target in CASES],
)
def test_every_output_option_refuses_every_hostile_target_and_nothing_changes(command, target, inputs, tmp_path):
    output, inputs, holder = place(target, command, tmp_path, inputs)
    before = snapshot(tmp_path)
    try:
        if command.script == "train" and target == "existing model folder":
            # a run writes its own files beside a folder's others, and touches none of them
            run_main(command.script, argv_of(command, output, inputs))
            after = snapshot(tmp_path)
            assert {key: value for key, value in after.items() if key in before} == before
            own = ("checkpoints", "best", "last", "metrics.jsonl", "summary.json", "arguments.json", LOCK_FILE,
                   "tensorboard", "training_curves.png")
            assert all(Path(key).parts[1] in own for key in set(after) - set(before))
            return
        with pytest.raises((ValueError, OSError, RuntimeError)) as refused:
            run_main(command.script, argv_of(command, output, inputs))
    finally:
        if holder is not None:
            holder.release()
    message = str(refused.value)
    assert "\n" not in message, message
    assert re.search(TARGETS[target], message), message
    assert str(output) in message or str(output.parent) in message, message
    assert snapshot(tmp_path) == before


# --- a full disk: a folder appears whole or not at all --------------------------------------------------------------

PUBLISHERS = [command for command in COMMANDS if command.kind == "folder" and not command.in_place]


@pytest.mark.parametrize("command", PUBLISHERS, ids=[command.script for command in PUBLISHERS])
@pytest.mark.parametrize("earlier", [False, True], ids=["new", "replacing"])
def test_a_full_disk_leaves_no_folder_that_looks_complete_and_names_the_file(command, earlier, inputs, tmp_path,
                                                                             monkeypatch):
    """Writes fail past 4,096 bytes, as on a disk that fills (the tiny model's weights are 200 kB; the pairs' files,
    1 kB, past 200 bytes while they are written, after the data are read into datasets' cache): the command ends in
    one line naming the output and the file it could not write, and the folder is as it was (absent, or the earlier
    one: replaced only by a complete one), with no partial folder beside it. The earlier folder is one a command
    published (its manifest lists what it holds)."""
    extra = {"export_ctranslate2": "ctranslate2", "export_onnx": "onnx"}.get(command.script)
    if extra is not None:  # (an export that cannot start writes nothing: the extra's message, tested with it absent)
        pytest.importorskip(extra, reason=f"the {extra} extra is not installed: pip install -e '.[{extra}]'")
    output = tmp_path / "out"
    if earlier:
        with OutputFolder(output, {}) as earlier_output, earlier_output.publish() as folder:
            (folder / "config.json").write_text('{"earlier": true}')
    before = snapshot(tmp_path)
    full_disk = file_size_limit(4096)
    if command.script.startswith("make_"):
        write_pairs = script_module(command.script).write_train_validation

        def write_pairs_on_a_filling_disk(*args):
            with file_size_limit(200):
                return write_pairs(*args)

        monkeypatch.setattr(script_module(command.script), "write_train_validation", write_pairs_on_a_filling_disk)
        full_disk = contextlib.nullcontext()
    with full_disk, pytest.raises(OSError) as refused:
        run_main(command.script, argv_of(command, output, inputs))
    message = str(refused.value)
    assert "\n" not in message and f"{output}: could not write " in message, message
    written = message.split("could not write ", 1)[1].split(":", 1)[0]
    assert written != "its files" and "/" not in written, message
    assert "Nothing was published" in message
    assert snapshot(tmp_path) == before
