"""The shipped models' code has one source, the package's modeling/remote_code/ (scripts/tools/refresh_shipped_code.py,
vaswani_tools.shipped_code): every shipped folder holds a copy of each of its files and no other code, its card names
that code by a content hash and the commit that holds it, and a folder copied elsewhere with `cp -r` loads with
`trust_remote_code=True` where this package is not installed."""

import json
import shutil
import subprocess

import pytest

from helpers import REPO, run_isolated
from vaswani_tools.shipped_code import carried_files, code_digest, problems, refresh, shipped_folders


def test_every_shipped_folder_holds_the_packages_code_and_its_card_says_which():
    folders = shipped_folders()
    assert len(folders) == 5
    assert problems(folders) == [], "run: python scripts/tools/refresh_shipped_code.py (after committing the code)"
    names = set(carried_files())
    assert {"modeling_vaswani.py", "configuration_vaswani.py", "tokenization_vaswani.py", "pipeline_vaswani.py",
            "cpu_decoding.py", "model_functions.py"} <= names and "__init__.py" not in names
    assert {path.name for path in (REPO / "modeling" / "remote_code").glob("*.py")} == names | {"__init__.py"}


@pytest.fixture
def copied(tmp_path):
    """A checkout-like tree holding one shipped folder (a copy: refresh writes into it)."""
    folder = tmp_path / "results" / "multi30k_en_de" / "model"
    shutil.copytree(REPO / "results" / "multi30k_en_de" / "model", folder)
    return tmp_path, folder


def test_what_differs_is_named_and_refresh_puts_it_right(copied):
    root, folder = copied
    assert problems([folder], root, check_commit=False) == []
    (folder / "search.py").write_text("# changed\n")
    (folder / "search_old.py").write_text("# a module the package no longer has\n")
    (folder / "vocabulary.py").unlink()
    card = folder / "README.md"
    card.write_text(card.read_text().replace(code_digest(carried_files()), "0" * 64))
    found = problems([folder], root, check_commit=False)
    assert found == [
        "results/multi30k_en_de/model/vocabulary.py: missing",
        "results/multi30k_en_de/model/search_old.py: not a file the package carries",
        "results/multi30k_en_de/model/search.py: differs from modeling/remote_code/search.py",
        f"results/multi30k_en_de/model/README.md: its code digest is not that of modeling/remote_code's files "
        f"({code_digest(carried_files())})",
    ]
    commit = "0" * 40
    changes = refresh([folder], root, commit=commit)
    assert set(changes) == {"results/multi30k_en_de/model/search.py: written",
                            "results/multi30k_en_de/model/vocabulary.py: written",
                            "results/multi30k_en_de/model/search_old.py: removed (the package carries no such file)",
                            "results/multi30k_en_de/model/README.md: code line"}
    assert problems([folder], root, check_commit=False) == []
    assert f"of commit `{commit}`" in card.read_text() and card.read_text().count("Code files: ") == 1
    assert refresh([folder], root, commit=commit) == []  # nothing left to do


def _commit(root, files: dict[str, bytes]) -> str:
    """A commit of `files` as root's modeling/remote_code/ (root a git repository of its own)."""
    source = root / "modeling" / "remote_code"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name, data in files.items():
        (source / name).write_bytes(data)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run([*git, "add", "-A", "modeling"], cwd=root, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", "code"], cwd=root, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_card_names_a_commit_that_holds_its_code(copied):
    root, folder = copied
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    files = carried_files()
    holding = _commit(root, {**files, "__init__.py": b"# not carried\n"})
    refresh([folder], root, commit=holding)
    assert problems([folder], root) == []
    other = _commit(root, {**files, "search.py": b"# other code\n"})
    refresh([folder], root, commit=other)
    assert problems([folder], root) == [
        f"results/multi30k_en_de/model/README.md: commit {other[:12]} holds other code in modeling/remote_code"]


def test_a_shipped_folder_copied_with_cp_r_loads_without_the_package(tmp_path):
    copy = tmp_path / "elsewhere"
    subprocess.run(["cp", "-r", str(REPO / "results" / "multi30k_en_de" / "model"), str(copy)], check=True)
    assert not any(path.is_symlink() for path in copy.iterdir())
    out = run_isolated(f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        folder = {str(copy)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        ids = model.generate(**tokenizer(["Two dogs play in the snow."], return_tensors="pt"), max_new_tokens=20)
        print(json.dumps([type(model).__module__, tokenizer.decode(ids[0], skip_special_tokens=True)]))
    """)
    module, text = json.loads(out.strip().splitlines()[-1])
    assert module.startswith("transformers_modules.") and module.endswith(".modeling_vaswani")
    assert "Hunde" in text
