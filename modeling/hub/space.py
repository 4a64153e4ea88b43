"""A Hugging Face Space for a model (`scripts/push_to_hub.py --space`): the folder a Gradio Space's repository
holds to serve the model in the web demo (`vaswani.serving.app`), a tab for its task.

    README.md         the Space's card: its YAML header (sdk: gradio, sdk_version, python_version, app_file, license,
                      models) and what the Space is
    app.py            what the Space runs: the web demo on model/
    requirements.txt  the package's dependencies (and matplotlib, for the heatmap); gradio itself is the sdk_version's
    model/            the model, as push_to_hub.py writes a model repository (weights, tokenizer, its own card)
    vaswani/          the package's sources, which app.py imports from its own folder

How the Space gets `vaswani`: the package is not on PyPI, so the folder holds a copy of the sources of the version
that staged it (`python app.py` puts the Space's folder first on the import path). That is the code whose tests ran
where the folder was made, readable in the Space's file browser, with nothing to build at staging time and nothing
binary beside the weights; a wheel in the folder would need a build step and hide the code, and a requirement on the
project's git repository would tie the Space to a remote and a revision other than the one staged.

The app loads the model through these sources' classes (no `trust_remote_code`), so the code files inside
model/ (there for users of the model folder alone) never run in the Space.
"""

import shutil
import sys
from importlib import metadata
from pathlib import Path

from huggingface_hub import SpaceCard, SpaceCardData
from packaging.requirements import Requirement


DISTRIBUTION = "vaswani-transformer"  # pyproject's name
MODEL_FOLDER = "model"
PACKAGE_FOLDER = "vaswani"
SPACE_FILES = ("README.md", "app.py", "requirements.txt")
EXTRAS = ("plot",)  # matplotlib: the translation tab's heatmap
TASK_NAMES = {
    "translation": "translation, with the cross-attention heatmap of each translation",
    "summarization": "summarization",
    "text-classification": "text classification",
    "token-classification": "named-entity tagging, the entities highlighted in the text",
}

APP = '''"""The web demo of the model in model/ (the package's web demo, vaswani.serving.app, from the sources in
vaswani/ beside this file).

A Space runs `python app.py`; so can you, after `pip install -r requirements.txt gradio=={gradio_version}`: the page is
at http://127.0.0.1:7860 (a Space sets GRADIO_SERVER_NAME to listen on every address). Options go to the app:
`python app.py --port 8000`, `python app.py --help`.
"""

import sys
from pathlib import Path

from vaswani.cli import run_command
from vaswani.serving.app import main


if __name__ == "__main__":
    sys.argv[1:1] = ["--model", str(Path(__file__).resolve().parent / "{model_folder}")]
    run_command(main)
'''


def gradio_version() -> str:
    """The installed gradio's version: the Space's `sdk_version`, the gradio the app was tested with here."""
    try:
        import gradio
    except ImportError:
        raise ImportError(
            "--space needs gradio installed (its version becomes the Space's sdk_version): "
            "pip install 'vaswani-transformer[demo]'."
        ) from None
    return gradio.__version__


def package_folders() -> list[Path]:
    """The folders the package's sources come from (`vaswani`, and `vaswani.pipelines`, which lives apart)."""
    import vaswani
    import vaswani.pipelines

    return [Path(vaswani.__file__).resolve().parent, Path(vaswani.pipelines.__file__).resolve().parent]


def copy_package(destination: Path) -> list[Path]:
    """Copy the package's Python sources into `destination` (a `vaswani/` folder), laid out as they import: every
    `.py` file of the package (its data files included: the metrics' modules), no caches. Returns the files."""
    package, pipelines = package_folders()
    copied = []
    for source_folder, target_folder in ((package, destination), (pipelines, destination / "pipelines")):
        for source in sorted(source_folder.rglob("*.py")):
            relative = source.relative_to(source_folder)
            if "__pycache__" in relative.parts or (source_folder == package and _inside(source, pipelines)):
                continue
            target = target_folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied.append(target)
    return copied


def _inside(path: Path, folder: Path) -> bool:
    return folder == path or folder in path.parents


def requirements() -> list[str]:
    """The package's installed requirements with the extras the app uses, as `requirements.txt` lines."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"--space reads the package's requirements from its installed metadata ({DISTRIBUTION}): install it "
            "(pip install -e .)."
        ) from None
    lines = []
    for text in declared:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in EXTRAS):
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            lines.append(f"{requirement.name}{extras}{requirement.specifier}")
    return lines


def space_card(title: str, task: str, license_id: str, model_repo_id: str | None, sdk_version: str,
               commit: str | None) -> str:
    """The Space's README.md: the configuration header the Hub reads, then what the Space is."""
    data = SpaceCardData(
        title=title,
        sdk="gradio",
        sdk_version=sdk_version,
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        app_file="app.py",
        license=license_id,
        models=[model_repo_id] if model_repo_id else None,
        tags=["vaswani", task],
        pinned=False,
        short_description=f"The original Transformer: {task}"[:60],
    )
    model_line = (
        f"The model is the model repository [{model_repo_id}](https://huggingface.co/{model_repo_id}), "
        f"copied into `{MODEL_FOLDER}/` with its card."
        if model_repo_id else f"The model is in `{MODEL_FOLDER}/`, with its card."
    )
    version = f" of commit `{commit}`" if commit else ""
    body = f"""
# {title}

A web demo of a model of the original Transformer (*Attention Is All You Need*, Vaswani et al., 2017), written as a
Hugging Face `transformers` model by the `vaswani` project: {TASK_NAMES[task]}. The page holds an example to run in
one click, and the same answers come through its API (`gradio_client`, or "Use via API" at the foot of the page).

{model_line} The app (`app.py`) runs the project's web demo on it, from the project's sources{version} in
`{PACKAGE_FOLDER}/` (the package is not on PyPI); `requirements.txt` lists their dependencies. The model decodes with
its generation config, as its card reports, on its own CPU decoder (its default) where the Space has no GPU.

Run it on your machine: `pip install -r requirements.txt gradio=={sdk_version} && python app.py`, then open
http://127.0.0.1:7860.
"""
    return str(SpaceCard(f"---\n{data.to_yaml()}\n---\n{body}"))


def write_space_files(folder: Path, title: str, task: str, license_id: str, model_repo_id: str | None,
                      commit: str | None) -> None:
    """Write README.md, app.py, requirements.txt and vaswani/ into `folder` (the model is in model/)."""
    sdk_version = gradio_version()
    copy_package(folder / PACKAGE_FOLDER)
    (folder / "app.py").write_text(APP.format(gradio_version=sdk_version, model_folder=MODEL_FOLDER),
                                   encoding="utf-8")
    (folder / "requirements.txt").write_text(
        "# the vaswani package's dependencies (its sources are in vaswani/); gradio is the card's sdk_version\n"
        + "\n".join(requirements()) + "\n",
        encoding="utf-8",
    )
    card = space_card(title, task, license_id, model_repo_id, sdk_version, commit)
    (folder / "README.md").write_text(card, encoding="utf-8")


__all__ = ["MODEL_FOLDER", "PACKAGE_FOLDER", "SPACE_FILES", "copy_package", "package_folders", "requirements",
           "space_card", "write_space_files"]
