"""Publishing a checkpoint on the Hugging Face Hub (scripts/push_to_hub.py): the options, the folder the repository
will hold (the checkpoint loaded and saved again, the code files of this version of the project, the card rendered from
model_card.md with its results and, for a shipped model, its recipe and commit, the generation config set to the
decoding the card reports) and its upload as one commit that leaves the repository holding exactly that folder.
With --space, the folder of a Gradio Space serving the checkpoint in the web demo (`vaswani.hub.space`), staged
beside its place and published by a rename (`vaswani.output_paths.publish_folder`).
"""

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import AutoConfig, AutoTokenizer

from .. import (
    VaswaniConfig,
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)
from ..output_paths import check_output_dir, publish_folder, refuse_symbolic_link, staging_folder
from ..safe_loading import check_checkpoint_folder
from ..serving.demo_tasks import read_task
from . import space
from .model_card import TEMPLATE, load_results, render_model_card, training_from_record
from .recipes import Recipe, find_recipe, load_recipes


REPO = Path(__file__).resolve().parents[2]  # the checkout: modeling/hub/ is two folders down
RECIPES_FILE = REPO / "scripts" / "configs" / "recipes.yaml"
RESULTS_FILE = "evaluation_results.json"  # what scripts/evaluate_model.py writes into the checkpoint by default
CODE_FILES = ("configuration_vaswani.py", "modeling_vaswani.py", "tokenization_vaswani.py", "pipeline_vaswani.py")
REQUIRED_FILES = ("README.md", "config.json", "tokenizer.json", "tokenizer_config.json")
# the decoding settings a results file records (scripts/evaluate_model.py) that are GenerationConfig fields
DECODING_SETTINGS = ("num_beams", "length_penalty", "no_repeat_ngram_size", "max_new_tokens")
MODEL_CLASSES = {
    model_class.__name__: model_class
    for model_class in (
        VaswaniModel,
        VaswaniForConditionalGeneration,
        VaswaniForSequenceClassification,
        VaswaniForTokenClassification,
    )
}


@dataclass
class PushArguments:
    model_dir: str = field(metadata={"help": "The checkpoint: a folder with a model saved by save_pretrained and its tokenizer."})
    repo_id: str | None = field(
        default=None,
        metadata={"help": "The Hub repository to upload to, as namespace/name (with --dry-run, optional: the card then names the folder)."},
    )
    recipe: str | None = field(
        default=None,
        metadata={"help": f"The recipe of {RECIPES_FILE.relative_to(REPO)} that made the checkpoint (its name): the card's training data, commands, commit and, without --results, its results file."},
    )
    results: list[str] = field(
        default_factory=list,
        metadata={"help": f"Evaluation results file(s) for the card's model-index (default: {RESULTS_FILE} in --model_dir, if there)."},
    )
    dry_run: bool = field(default=False, metadata={"help": "Write the folder that would be uploaded to --output_dir, and stop."})
    output_dir: str | None = field(
        default=None, metadata={"help": "Where to write the folder (needed with --dry-run; otherwise a temporary folder)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (a shipped model being replaced)."}
    )
    private: bool = field(default=False, metadata={"help": "Create the repository as private (if it does not exist)."})
    revision: str | None = field(default=None, metadata={"help": "Branch to commit to (default: main)."})
    commit_message: str = field(default="Upload Vaswani Transformer checkpoint", metadata={"help": "The commit message."})
    token: str | None = field(default=None, metadata={"help": "Hub token (default: HF_TOKEN, or the one saved by `hf auth login`)."})
    license: str = field(default="apache-2.0", metadata={"help": "License id for the card's metadata."})
    language: list[str] | None = field(default=None, metadata={"help": "Language codes (default: the config's source_lang and target_lang)."})
    datasets: list[str] | None = field(default=None, metadata={"help": "Hub dataset ids (default: those named in the results files)."})
    tags: list[str] = field(default_factory=list, metadata={"help": "Extra tags for the card's metadata."})
    training_data: str | None = field(default=None, metadata={"help": "The card's 'Training data' section (text)."})
    training_procedure: str | None = field(default=None, metadata={"help": "The card's 'Training procedure' section (text)."})
    template: str = field(default=str(TEMPLATE), metadata={"help": "The model card template (Jinja2 markdown)."})
    space: bool = field(
        default=False,
        metadata={"help": "Stage a Gradio Space instead of a model repository: the web demo serving the checkpoint "
                  "(app.py, requirements.txt, the Space's README, the checkpoint in model/, the package's sources in "
                  "vaswani/); --repo_id then names the Space."},
    )
    model_repo_id: str | None = field(
        default=None,
        metadata={"help": "With --space: the checkpoint's model repository on the Hub (namespace/name), listed in the "
                  "Space's card (models:) and named by the checkpoint's card."},
    )


def _check_arguments(args: PushArguments) -> None:
    if args.repo_id is None and not args.dry_run:
        raise ValueError("--repo_id is needed to upload: give the Hub repository as namespace/name (or use --dry-run).")
    for option, repo_id in (("--repo_id", args.repo_id), ("--model_repo_id", args.model_repo_id)):
        if repo_id is not None:
            try:
                validate_repo_id(repo_id)
            except HFValidationError as error:
                raise ValueError(f"{option} {repo_id!r} is not a valid Hub repository id: {error}") from None
    if args.model_repo_id is not None and not args.space:
        raise ValueError("--model_repo_id names the model a Space serves: it goes with --space.")
    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"--model_dir {model_dir}: no such folder; give a checkpoint folder.")
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"--model_dir {model_dir} is not a checkpoint folder: it has no config.json.")
    if not (model_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"--model_dir {model_dir} has no tokenizer (tokenizer.json): save it beside the model with "
            "tokenizer.save_pretrained(model_dir)."
        )
    if args.space:
        read_task(model_dir, "--model_dir")  # a checkpoint of a task the web demo serves, before any work
    if args.dry_run and args.output_dir is None:
        raise ValueError("--dry-run writes the folder that would be uploaded: give it a place with --output_dir.")
    if args.output_dir is not None:
        output_dir = Path(args.output_dir)
        if output_dir.exists() and not output_dir.is_dir():
            raise ValueError(f"--output_dir {output_dir} is a file, not a folder.")
        check_output_dir(output_dir, {
            "--model_dir": model_dir,
            "--results": args.results,
            "--template": args.template,
            "--recipe (the recipes file)": RECIPES_FILE if args.recipe else None,
            "--space (the package's sources)": space.package_folders() if args.space else None,
        })
        if output_dir.exists() and any(output_dir.iterdir()) and not args.overwrite_output_dir:
            raise ValueError(
                f"--output_dir {output_dir} exists and is not an empty folder: everything in it would be uploaded. "
                "Choose a new folder, or replace its contents with --overwrite_output_dir."
            )
        if args.overwrite_output_dir:
            refuse_symbolic_link(output_dir)
            if output_dir.resolve() == REPO.resolve():
                raise ValueError(f"--output_dir {output_dir} with --overwrite_output_dir would delete the project.")


def _git(*arguments: str) -> str | None:
    try:
        result = subprocess.run(["git", *arguments], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _training_data_of(recipe: Recipe) -> str:
    return (
        f"The files the recipe's commands name (under Training procedure); it is evaluated on {recipe.data}, "
        "so its training data are that dataset's training split."
    )


def _provenance(recipe: Recipe) -> str:
    """The card's training procedure for a recipe's checkpoint: the recipe, the commit of the code, its commands."""
    commit = _git("rev-parse", "HEAD")
    changed = _git("diff", "--name-only", "HEAD", "--", "modeling", "pipelines", "scripts")
    if commit is None:
        code = "Code: not a git checkout, so no commit is recorded."
    else:
        code = f"Code: commit `{commit}` of the project (HEAD when this folder was written)"
        if changed:
            paths = changed.splitlines()
            code += f", with uncommitted changes to {', '.join(f'`{path}`' for path in paths[:12])}"
            code += f" and {len(paths) - 12} more" if len(paths) > 12 else ""
        code += "."
    return "\n".join([
        f"Made by the recipe **{recipe.name}** of `{RECIPES_FILE.relative_to(REPO)}` (hardware: {recipe.hardware}). {code}",
        "",
        "Its commands, run from the repository root (training, evaluation, and the copy into this folder):",
        "",
        "```bash",
        recipe.command,
        "```",
    ])


def _results_files(args: PushArguments, recipe: Recipe | None = None) -> list[Path]:
    if args.results:
        return [Path(path) for path in args.results]
    if recipe is not None:
        return [REPO / recipe.results]
    default = Path(args.model_dir) / RESULTS_FILE
    return [default] if default.is_file() else []


def _load_model(model_dir: Path):
    check_checkpoint_folder(model_dir)  # before any of its files is parsed
    config = AutoConfig.from_pretrained(model_dir)
    if config.model_type != VaswaniConfig.model_type:
        raise ValueError(f"--model_dir {model_dir} holds a {config.model_type!r} model, not a Vaswani one.")
    architecture = (config.architectures or [None])[0]
    if architecture not in MODEL_CLASSES:
        raise ValueError(
            f"--model_dir {model_dir}: config.json names the model class {architecture!r}; expected one of "
            f"{sorted(MODEL_CLASSES)}."
        )
    return MODEL_CLASSES[architecture].from_pretrained(model_dir, dtype="auto")


def _decode_as_scored(model, results: list[dict]) -> dict:
    """Set `model.generation_config` to the decoding of the first results file that records one; returns the
    settings applied ({} when no results file records a decoding, or the model does not generate)."""
    recorded = next((result["decoding"] for result in results if result["decoding"].get("num_beams")), None)
    if recorded is None or not model.can_generate():
        return {}
    settings = {name: recorded[name] for name in DECODING_SETTINGS if recorded.get(name) is not None}
    if settings["num_beams"] == 1:  # transformers refuses a length penalty that greedy decoding would ignore
        settings.pop("length_penalty", None)
        model.generation_config.length_penalty = None
    model.generation_config.update(**settings)
    if "max_new_tokens" in settings:
        model.generation_config.max_length = None  # else every generate() warns that both limits are set
    return settings


def _stage(args: PushArguments, folder: Path, repo_id: str | None = None, model_name: str | None = None) -> list[Path]:
    """Write into `folder` everything the repository will hold; return the files. The card names the checkpoint
    `repo_id` and `model_name` (default: --repo_id, else the folder; the title from `_model_name`)."""
    model_dir = Path(args.model_dir)
    recipe = find_recipe(load_recipes(RECIPES_FILE), args.recipe, RECIPES_FILE) if args.recipe else None
    # read first: a bad file stops before any work
    results = [load_results(path) for path in _results_files(args, recipe)]
    recorded_data, recorded_procedure = training_from_record(model_dir)
    model = _load_model(model_dir)
    decoding = _decode_as_scored(model, results)
    if decoding:
        print("generation_config.json: " + ", ".join(f"{k}={v}" for k, v in decoding.items())
              + " (the decoding of the results file)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if folder.exists() and args.overwrite_output_dir:
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    card = render_model_card(
        model.config,
        num_parameters=model.num_parameters(),
        repo_id=repo_id or args.repo_id or folder.as_posix(),
        model_name=model_name or _model_name(args),
        results=results,
        license_id=args.license,
        languages=args.language,
        datasets=args.datasets,
        tags=args.tags,
        training_data=args.training_data or (recipe and _training_data_of(recipe)) or recorded_data,
        training_procedure=args.training_procedure or (recipe and _provenance(recipe)) or recorded_procedure,
        template=args.template,
    )
    (folder / "README.md").write_text(card, encoding="utf-8")
    required = [*REQUIRED_FILES, *CODE_FILES, *(["generation_config.json"] if model.can_generate() else [])]
    missing = [name for name in required if not (folder / name).is_file()]
    if not list(folder.glob("*.safetensors")):
        missing.append("model.safetensors")
    if missing:
        raise RuntimeError(f"The staged folder {folder} lacks {missing}; it would not load from the Hub.")
    return sorted(path for path in folder.rglob("*") if path.is_file())


def _model_name(args: PushArguments) -> str:
    """The card's title: the Hub repository's name, or for a folder only (--dry-run without --repo_id) one made from
    the recipe's name ("Multi30k en->de" -> "vaswani-multi30k-en-de") or the folder's."""
    if args.repo_id:
        return args.repo_id.split("/")[-1]
    if args.recipe:
        return "vaswani-" + "-".join(re.findall(r"[a-z0-9]+", args.recipe.lower()))
    return Path(args.output_dir).resolve().name


def _upload(args: PushArguments, folder: Path):
    """One commit of `folder` to the repository (created if needed: a model's, or with --space a Gradio Space's);
    what the repository holds beyond the folder is deleted in the same commit (`.gitattributes` excepted, which the
    Hub needs)."""
    api = HfApi(token=args.token)
    repo_type = "space" if args.space else None  # None: a model repository
    try:
        api.create_repo(args.repo_id, private=args.private, exist_ok=True, repo_type=repo_type,
                        space_sdk="gradio" if args.space else None)
        return api.upload_folder(
            repo_id=args.repo_id,
            repo_type=repo_type,
            folder_path=folder,
            revision=args.revision,
            commit_message=args.commit_message,
            delete_patterns="*",
        )
    except httpx2.TransportError as error:  # no answer at all (huggingface_hub's HTTP client is httpx2)
        raise HubUnreachable(
            f"the Hub ({constants.ENDPOINT}) cannot be reached: {error or type(error).__name__}. Nothing was uploaded; "
            "check the network (or HF_ENDPOINT, a proxy), or keep the folder with --dry-run --output_dir DIR."
        ) from None


class HubUnreachable(ConnectionError):
    """The upload got no answer from the Hub (no network, a wrong endpoint): the user's to fix, in one line."""


def _stage_space(args: PushArguments, folder: Path) -> list[Path]:
    """Write into `folder` everything the Space will hold (see `vaswani.hub.space`); return the files."""
    task = read_task(Path(args.model_dir), "--model_dir")
    title = args.repo_id.split("/")[-1] if args.repo_id else _model_name(args)
    _stage(args, folder / space.MODEL_FOLDER, repo_id=args.model_repo_id or space.MODEL_FOLDER,
           model_name=(args.model_repo_id or title).split("/")[-1])
    commit = _git("rev-parse", "HEAD")
    if commit and _git("diff", "--name-only", "HEAD", "--", "modeling", "pipelines"):
        commit += " with uncommitted changes"
    space.write_space_files(folder, title, task, args.license, args.model_repo_id, commit)
    required = (*space.SPACE_FILES, f"{space.PACKAGE_FOLDER}/__init__.py")
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"The staged Space {folder} lacks {missing}; it would not start.")
    return sorted(path for path in folder.rglob("*") if path.is_file())


def _push_space(args: PushArguments) -> Path | str:
    """--space: the Space's folder staged beside its place and renamed into it once complete (--output_dir, else a
    temporary folder), then uploaded as one commit, or with --dry-run kept there."""
    with tempfile.TemporaryDirectory(prefix="vaswani-space-") as temporary:
        destination = Path(args.output_dir) if args.output_dir else Path(temporary) / "space"
        staged = staging_folder(destination)
        try:
            files = [path.relative_to(staged) for path in _stage_space(args, staged)]
            folder = publish_folder(staged, destination)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        listing = "\n".join(f"  {path}  ({(folder / path).stat().st_size:,} bytes)" for path in files)
        if args.dry_run:
            where = f"that would be uploaded to the Space {args.repo_id} " if args.repo_id else ""
            print(f"Dry run: {len(files)} files {where}are in {folder}:\n{listing}\n"
                  f"Try it: cd {folder} && python app.py")
            return folder
        commit = _upload(args, folder)
        print(f"Uploaded {len(files)} files to the Space {args.repo_id}:\n{listing}\n{commit.commit_url}")
        return commit.commit_url


def push(args: PushArguments) -> Path | str:
    """Check the options, stage the folder the repository will hold (the checkpoint saved again, its code files,
    the card; with --space, the Space serving it), then upload it as one commit, or with --dry-run stop there.
    Returns the folder written (with --dry-run) or the URL of the commit."""
    _check_arguments(args)
    if args.space:
        return _push_space(args)
    with tempfile.TemporaryDirectory(prefix="vaswani-push-") as temporary:
        folder = Path(args.output_dir) if args.output_dir else Path(temporary) / "repo"
        files = _stage(args, folder)
        listing = "\n".join(f"  {path.relative_to(folder)}  ({path.stat().st_size:,} bytes)" for path in files)
        if args.dry_run:
            where = f"that would be uploaded to {args.repo_id} " if args.repo_id else ""
            print(f"Dry run: {len(files)} files {where}are in {folder}:\n{listing}")
            return folder
        commit = _upload(args, folder)
        print(f"Uploaded {len(files)} files to {args.repo_id}:\n{listing}\n{commit.commit_url}")
        return commit.commit_url


__all__ = ["HubUnreachable", "PushArguments", "push"]
