"""Every command ends on a bad input with one line `script.py: error: ...` and exit status 1 (vaswani.cli)."""

import sys

import pytest

from helpers import REPO, command_in_process


@pytest.mark.parametrize("script, arguments, message", [
    ("evaluate_model.py", ["--model", "no/such/folder", "--task", "translation", "--validation_file", "x.jsonl"],
     "--model no/such/folder: no such folder"),
    ("train_tokenizer.py", ["--train_file", "no/such/file.jsonl", "--columns", "en", "--output_dir", "unused"],
     "--train_file no/such/file.jsonl: no such file."),
    ("finetune_classification.py", ["--model_name_or_path", "no/such/folder", "--output_dir", "unused"],
     "Nothing to do: pass --do_train and/or --do_eval"),
])
def test_a_bad_input_is_one_line_on_stderr_and_status_1(script, arguments, message, tmp_path):
    done = command_in_process(REPO / "scripts" / script, arguments, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}: error: ") and message in last, last


def test_a_bug_keeps_its_traceback(monkeypatch, capsys):
    from vaswani.cli import run_command

    def broken(argv):
        raise KeyError("a bug")

    monkeypatch.setattr(sys, "argv", ["tool.py"])
    with pytest.raises(KeyError):
        run_command(broken)
    with pytest.raises(SystemExit) as exit_info:
        run_command(lambda argv: (_ for _ in ()).throw(FileNotFoundError("x.jsonl does not exist")))
    assert exit_info.value.code == 1 and capsys.readouterr().err == "tool.py: error: x.jsonl does not exist\n"
