"""scripts/push_to_hub.py --space: a Gradio Space serving a checkpoint in the web demo holds the app, its
requirements, its card, the checkpoint and the package; it starts and serves; it replaces a folder only whole; its
mistakes are refused before any work; its upload sends exactly the dry-run folder."""

import sys
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from huggingface_hub.utils._http import default_client_factory
from transformers import AutoTokenizer

from helpers import REPO, free_port, start_app, stop_app, tiny_config
from hub_helpers import EXPECTED_FILES, FakeHub, files_of, push_to_hub, run
from vaswani import VaswaniForConditionalGeneration, VaswaniModel, pipelines
from vaswani.output_paths import OutputFolder


# --- a Space (--space): the web demo serving the checkpoint -----------------------------------------------------------


SPACE_ID = "someone/vaswani-tiny-demo"
MODEL_REPO_ID = "someone/vaswani-tiny-en-de"
# Runs the staged app.py in its folder with this project's installed package out of reach (the editable install's
# finder gone, no path entry holding a `vaswani` but the folder itself), so that the folder alone must suffice.
STAGED_APP = """
import os, runpy, sys
sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in getattr(finder, "__module__", "")]
here = os.getcwd()
sys.path[:] = [entry for entry in sys.path
               if os.path.abspath(entry or ".") == here or not os.path.isdir(os.path.join(entry, "vaswani"))]
import vaswani
assert os.path.dirname(vaswani.__file__) == os.path.join(here, "vaswani"), vaswani.__file__
runpy.run_path("app.py", run_name="__main__")
"""


def space_arguments(checkpoint, output, *more):
    return ["--model", str(checkpoint), "--space", "--repo_id", SPACE_ID, "--model_repo_id", MODEL_REPO_ID,
            "--dry-run", "--output_dir", str(output), *more]


@pytest.fixture(scope="module")
def space_folder(checkpoint, tmp_path_factory):
    pytest.importorskip("gradio", reason="--space needs gradio (the demo extra): pip install -e '.[demo]'")
    output = tmp_path_factory.mktemp("space") / "space"
    assert push_to_hub.main(space_arguments(checkpoint, output)) == output
    return output


def test_a_space_holds_the_app_its_requirements_its_card_the_checkpoint_and_the_package(space_folder, dry_run_folder):
    import gradio

    import vaswani

    files = files_of(space_folder)
    assert {name for name in files if "/" not in name} == {"README.md", "app.py", "requirements.txt"}
    # the checkpoint as a model repository holds it, its card naming the model repository
    assert {name[len("model/"):] for name in files if name.startswith("model/")} == EXPECTED_FILES
    assert files["model/model.safetensors"] == files_of(dry_run_folder)["model.safetensors"]
    model_card = files["model/README.md"].decode()
    assert f'pipeline("translation", model="{MODEL_REPO_ID}", trust_remote_code=True)' in model_card
    # the package's sources, laid out as they import
    package = Path(vaswani.__file__).parent
    for name in ("__init__.py", "serving/app.py", "serving/demo_tasks.py", "remote_code/pipeline_vaswani.py",
                 "pipelines/__init__.py", "evaluation/metrics/rouge/rouge.py"):
        source = package / name if not name.startswith("pipelines/") else REPO / name
        assert files[f"vaswani/{name}"] == source.read_bytes(), name
    assert not [name for name in files if "__pycache__" in name]
    card = huggingface_hub.SpaceCard.load(space_folder / "README.md").data.to_dict()
    assert {key: card[key] for key in ("sdk", "sdk_version", "app_file", "license", "models")} == {
        "sdk": "gradio", "sdk_version": gradio.__version__, "app_file": "app.py", "license": "apache-2.0",
        "models": [MODEL_REPO_ID],
    }
    assert card["title"] == "vaswani-tiny-demo"
    requirements = files["requirements.txt"].decode().splitlines()
    assert "torch>=2.6" in requirements and "matplotlib>=3.8" in requirements
    assert not [line for line in requirements if line.startswith(("pytest", "gradio", "onnx"))]
    # staged beside its place and renamed into it: nothing else is left there
    assert [path.name for path in space_folder.parent.iterdir()] == ["space"]


def test_the_staged_space_starts_and_serves_its_model(space_folder, tmp_path):
    """The staged app, run in its folder as a Space runs it with the installed package out of reach, serves the
    checkpoint's translation tab: its answer through gradio_client is the pipeline's on the staged model."""
    gradio_client = pytest.importorskip("gradio_client", reason="needs gradio_client (the demo extra)")

    model_folder = space_folder / "model"
    translator = pipelines.pipeline("translation", model=VaswaniForConditionalGeneration.from_pretrained(model_folder),
                                    tokenizer=AutoTokenizer.from_pretrained(model_folder))
    text = "A man is riding a horse."
    expected = translator(text)[0]["translation_text"]
    process, url = start_app([sys.executable, "-c", STAGED_APP, "--port", str(free_port())], space_folder,
                             tmp_path / "space.log")
    try:
        translation, picture = gradio_client.Client(url, verbose=False).predict(text, api_name="/translate_en_de")
    finally:
        stop_app(process)
    assert translation == expected
    assert Path(picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_space_replaces_a_folder_only_with_overwrite_and_then_whole(checkpoint, space_folder, tmp_path):
    output = tmp_path / "space"
    run(space_arguments(checkpoint, output))
    earlier = (output / "app.py").read_text()
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        run(space_arguments(checkpoint, output))
    # an app.py the user changed is named, even with --overwrite_output_dir; as the command wrote it, it is replaced
    (output / "app.py").write_text("the user's changes")
    with pytest.raises(FileExistsError, match="holds app.py \\(a file\\), which was changed after"):
        run(space_arguments(checkpoint, output, "--overwrite_output_dir"))
    assert (output / "app.py").read_text() == "the user's changes"
    (output / "app.py").write_text(earlier)
    run(space_arguments(checkpoint, output, "--overwrite_output_dir"))
    assert files_of(output) == files_of(space_folder)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["space"]
    # a file this project did not write stays, and so does the folder, even with --overwrite_output_dir
    (output / "notes.txt").write_text("the user's")
    with pytest.raises(FileExistsError, match="notes.txt"):
        run(space_arguments(checkpoint, output, "--overwrite_output_dir"))
    assert (output / "notes.txt").read_text() == "the user's"


def test_a_space_that_fails_half_way_leaves_the_old_folder_and_no_part(checkpoint, tmp_path, monkeypatch):
    from vaswani.hub import space

    pytest.importorskip("gradio", reason="--space needs gradio (the demo extra): pip install -e '.[demo]'")
    output = tmp_path / "space"
    with OutputFolder(output, {}) as earlier, earlier.publish() as folder:  # an earlier Space, which it wrote
        (folder / "app.py").write_text("the old Space")

    def full_disk(folder, *arguments):
        (folder / "app.py").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(space, "write_space_files", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        run(space_arguments(checkpoint, output, "--overwrite_output_dir"))
    assert files_of(output) == {"app.py": b"the old Space"}
    assert [path.name for path in tmp_path.iterdir()] == ["space"]


def test_space_mistakes_are_refused_before_any_work(checkpoint, tokenizer, tmp_path):
    import vaswani

    with pytest.raises(ValueError, match="--model_repo_id names the model a Space serves: it goes with --space"):
        run(["--model", str(checkpoint), "--model_repo_id", MODEL_REPO_ID, "--dry-run", "--output_dir",
             str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--model_repo_id 'not a repo' is not a valid Hub repository id"):
        run(space_arguments(checkpoint, tmp_path / "o", "--model_repo_id", "not a repo"))
    inside = Path(vaswani.__file__).parent / "space-output"
    with pytest.raises(ValueError, match=r"--output_dir .* lies inside --space \(the package's sources\)"):
        run(space_arguments(checkpoint, inside))
    assert not inside.exists()
    bare = tmp_path / "bare"
    VaswaniModel(tiny_config(vocab_size=len(tokenizer))).save_pretrained(bare)
    tokenizer.save_pretrained(bare)
    with pytest.raises(ValueError, match="--model .* names the model class 'VaswaniModel', which serves none of this"):
        run(space_arguments(bare, tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_a_space_upload_sends_exactly_the_dry_run_folder_to_a_gradio_space(checkpoint, space_folder, monkeypatch):
    hub = FakeHub(repo_id=SPACE_ID, repo_type="space")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    huggingface_hub.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(hub)))
    try:
        url = push_to_hub.main(["--model", str(checkpoint), "--space", "--repo_id", SPACE_ID, "--model_repo_id",
                                MODEL_REPO_ID, "--token", "hf_fake_token"])
    finally:
        huggingface_hub.set_client_factory(default_client_factory)
    assert url == f"https://huggingface.co/{SPACE_ID}/commit/abc123"
    assert hub.created == {"name": "vaswani-tiny-demo", "organization": "someone", "type": "space", "sdk": "gradio",
                           "visibility": "public"}
    assert hub.received_files() == files_of(space_folder)
