"""The package as a user installs it: a wheel, installed without the checkout, holds every module of `vaswani` and
the model card's template (it renders a card), and none of the repository's tools (scripts/tools/vaswani_tools)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from helpers import REPO
from vaswani import VaswaniConfig
from vaswani.hub.model_card import render_model_card

SOURCES = ("pyproject.toml", "README.md", "model_card.md", "modeling", "pipelines")  # what the build reads
TOOL_MODULES = sorted(path.stem for path in (REPO / "scripts" / "tools" / "vaswani_tools").glob("*.py")
                      if path.stem != "__init__")
CARD = dict(num_parameters=1_234_567, repo_id="someone/vaswani-tiny-en-de")


def tiny_config() -> VaswaniConfig:
    return VaswaniConfig.from_preset("tiny", vocab_size=128, source_lang="en", target_lang="de")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds, from a copy of the sources (the build writes its own folders beside them, never into
    the checkout; the template's link inside the package is copied as a link, as git keeps it)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    str(wheels), str(source)], check=True, timeout=600)
    return next(wheels.glob("vaswani_transformer-*.whl"))


def test_the_wheel_holds_every_module_of_the_package_and_the_card_template_but_no_tool(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        template = archive.read("vaswani/hub/model_card.md")
    package = {f"vaswani/{path.relative_to(REPO / 'modeling').as_posix()}" for path in (REPO / "modeling").rglob("*.py")}
    package |= {f"vaswani/pipelines/{path.name}" for path in (REPO / "pipelines").glob("*.py")}
    assert package - names == set()  # a subpackage missing from pyproject's `packages` would be left out
    assert template == (REPO / "model_card.md").read_bytes()  # the file itself, not the link
    assert TOOL_MODULES and not [name for name in names if Path(name).stem in TOOL_MODULES]


def test_a_card_renders_from_the_installed_wheel_without_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    code = textwrap.dedent(f"""
        import json
        import vaswani
        from vaswani.hub.model_card import render_model_card
        config = vaswani.VaswaniConfig.from_preset("tiny", vocab_size=128, source_lang="en", target_lang="de")
        print(json.dumps({{"file": vaswani.__file__, "card": render_model_card(config, **{CARD!r})}}))
    """)
    elsewhere = tmp_path / "elsewhere"  # neither the checkout nor the site folder: nothing importable by accident
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve().is_relative_to(site.resolve())
    assert result["card"] == render_model_card(tiny_config(), **CARD)  # the checkout's template, rendered the same
    assert "someone/vaswani-tiny-en-de" in result["card"]


def test_every_command_is_installed_and_answers_help_outside_the_checkout(wheel, tmp_path):
    """Each [project.scripts] entry: a command in the installed wheel's bin/, whose function (the one its script in
    scripts/ runs) answers --help with its own options, in a folder away from the checkout."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    commands = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert {"vaswani-train", "vaswani-finetune-seq2seq", "vaswani-finetune-classification",
            "vaswani-finetune-token-classification", "vaswani-evaluate", "vaswani-predict", "vaswani-export-onnx",
            "vaswani-export-ctranslate2", "vaswani-push", "vaswani-app"} <= set(commands)
    assert all((site / "bin" / name).is_file() for name in commands)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = textwrap.dedent(f"""
        import contextlib, importlib, io, json, sys
        answers = {{}}
        for name, target in {commands!r}.items():
            module, function = target.split(":")
            sys.argv = [name, "--help"]
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                getattr(importlib.import_module(module), function)()
            answers[name] = [importlib.import_module("vaswani").__file__, out.getvalue()]
        print(json.dumps(answers))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    options = {"vaswani-train": "--max_tokens_per_batch", "vaswani-predict": "--read_batch_size",
               "vaswani-evaluate": "--num_beams", "vaswani-finetune-classification": "--label_column",
               "vaswani-finetune-token-classification": "--tags_column", "vaswani-finetune-seq2seq": "--source_column",
               "vaswani-export-ctranslate2": "--quantization", "vaswani-export-onnx": "--output_dir",
               "vaswani-push": "--repo_id", "vaswani-app": "--port", "vaswani-train-tokenizer": "--vocab_size",
               "vaswani-average-checkpoints": "--last"}
    for name, (package, help_text) in answers.items():
        assert Path(package).resolve().is_relative_to(site.resolve()), name
        assert options[name] in help_text, f"{name} --help:\n{help_text[:500]}"
