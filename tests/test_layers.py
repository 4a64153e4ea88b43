"""The package's layers ([tool.importlinter] in pyproject.toml), checked by import-linter on the package laid out as it
is installed (`vaswani.pipelines` lives in pipelines/, outside modeling/, where import-linter would not find it): no
module imports from a layer above its own, training, fine-tuning and publishing know nothing of each other, and no
top-level module or room imports one that imports it back."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytest.importorskip("importlinter", reason="the layer contract needs import-linter: pip install -e '.[test]'")

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def installed_layout(root: Path) -> Path:
    """modeling/ as root/vaswani and pipelines/ as root/vaswani/pipelines: the package's modules as a wheel holds
    them."""
    ignore = shutil.ignore_patterns("__pycache__", "*.md")
    shutil.copytree(REPO / "modeling", root / "vaswani", ignore=ignore)
    shutil.copytree(REPO / "pipelines", root / "vaswani" / "pipelines", ignore=ignore)
    return root


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with the repository's contracts, on the package under `root` (first on the path)."""
    return subprocess.run([sys.executable, "-c", LINT, str(REPO / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": str(Path(sys.executable).parent)}, capture_output=True,
                          text=True, timeout=300)


def test_the_package_keeps_its_layers(tmp_path):
    done = lint_imports(installed_layout(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_an_import_from_a_layer_above_breaks_the_contract(tmp_path):
    """What the package had before its layers: a shared module reaching up into a room for a name."""
    root = installed_layout(tmp_path)
    with open(root / "vaswani" / "cli.py", "a", encoding="utf-8") as cli:
        cli.write("\nfrom .training.checkpoints import DATA_FILE  # noqa\n")
    done = lint_imports(root)
    assert done.returncode == 1
    assert "vaswani.cli is not allowed to import vaswani.training" in done.stdout
    assert "vaswani.cli -> vaswani.training.checkpoints" in done.stdout
