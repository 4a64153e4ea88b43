"""Publishing a model on the Hugging Face Hub (scripts/push_to_hub.py): the options, the folder the repository
will hold (the model loaded and saved again, the code files of this version of the project, the card rendered from
model_card.md with its results and the training sections given to it (scripts/push_to_hub.py's --recipe fills them
for a shipped model from the checkout's recipes), the generation config set to the decoding the card reports) and
its upload as one commit that leaves the repository holding exactly that folder.
With --space, the folder of a Gradio Space serving the model in the web demo (`vaswani.hub.space`), written and
published whole as every command's folder (`vaswani.output_paths.OutputFolder`).
"""

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser

from .. import (
    VaswaniConfig,
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)
from ..cli import run_command
from ..code_references import keep_own_code_references, keep_own_tokenizer_code_references
from ..remote_code.configuration_vaswani import check_regular_files
from ..output_paths import MANIFEST_FILE, OutputFolder
from ..runs.records import RESULTS_FILE
from ..safe_loading import check_model_folder
from ..tasks import read_task
from . import space
from .model_card import TEMPLATE, load_results, render_model_card, training_from_record


REPO = Path(__file__).resolve().parents[2]  # the checkout: modeling/hub/ is two folders down
CODE_FILES = (
    "configuration_vaswani.py", "modeling_vaswani.py", "tokenization_vaswani.py", "pipeline_vaswani.py", "vocabulary.py",
)
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
    model: str = field(metadata={"help": "The model: a folder saved by save_pretrained, with its tokenizer."})
    repo_id: str | None = field(
        default=None,
        metadata={"help": "The Hub repository to upload to, as namespace/name (with --dry-run, optional: the card then names the folder)."},
    )
    results: list[str] = field(
        default_factory=list,
        metadata={"help": f"Evaluation results file(s) for the card's model-index (default: {RESULTS_FILE} in --model, if there)."},
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
    commit_message: str = field(default="Upload Vaswani Transformer model", metadata={"help": "The commit message."})
    token: str | None = field(default=None, metadata={"help": "Hub token (default: HF_TOKEN, or the one saved by `hf auth login`)."})
    license: str = field(default="apache-2.0", metadata={"help": "License id for the card's metadata."})
    language: list[str] | None = field(default=None, metadata={"help": "Language codes (default: the config's source_lang and target_lang)."})
    datasets: list[str] | None = field(default=None, metadata={"help": "Hub dataset ids (default: those named in the results files)."})
    tags: list[str] = field(default_factory=list, metadata={"help": "Extra tags for the card's metadata."})
    training_data: str | None = field(default=None, metadata={"help": "The card's 'Training data' section (text)."})
    training_procedure: str | None = field(default=None, metadata={"help": "The card's 'Training procedure' section (text)."})
    model_name: str | None = field(
        default=None, metadata={"help": "The card's title where no --repo_id names it (default: the --output_dir folder's name)."}
    )
    template: str | None = field(
        default=None,
        metadata={"help": "The model card template (Jinja2 markdown); default: the package's own, the repository's "
                  f"{TEMPLATE}."},
    )
    space: bool = field(
        default=False,
        metadata={"help": "Stage a Gradio Space instead of a model repository: the web demo serving the model "
                  "(app.py, requirements.txt, the Space's README, the model in model/, the package's sources in "
                  "vaswani/); --repo_id then names the Space."},
    )
    model_repo_id: str | None = field(
        default=None,
        metadata={"help": "With --space: the model repository of the model on the Hub (namespace/name), listed in the "
                  "Space's card (models:) and named by the model's card."},
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
    model_dir = Path(args.model)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"--model {model_dir}: no such folder; give a model folder.")
    check_regular_files(model_dir)  # a FIFO named config.json is not "no config.json", and is never opened
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"--model {model_dir} is not a model folder: it has no config.json.")
    if not (model_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"--model {model_dir} has no tokenizer (tokenizer.json): save it beside the model with "
            "tokenizer.save_pretrained(model_dir)."
        )
    if args.space:
        read_task(model_dir, "--model")  # a model of a task the web demo serves, before any work
    if args.dry_run and args.output_dir is None:
        raise ValueError("--dry-run writes the folder that would be uploaded: give it a place with --output_dir.")
    if args.output_dir is not None and Path(args.output_dir).resolve() == REPO.resolve():
        raise ValueError(f"--output_dir {args.output_dir} would replace the project.")


def _output_folder(args: PushArguments, read_from: dict | None = None) -> OutputFolder:
    """--output_dir, checked, locked and published whole as every command's output (vaswani.output_paths): apart
    from every file the folder is made from (and those of `read_from`, by the option that named them), not an
    existing folder unless --overwrite_output_dir (and then holding only what this project wrote: its manifest)."""
    return OutputFolder(args.output_dir, {
        "--model": args.model,
        "--results": args.results,
        "--template": args.template,
        **(read_from or {}),
        "--space (the package's sources)": space.package_folders() if args.space else None,
    }, overwrite=args.overwrite_output_dir)


def checkout_git(*arguments: str) -> str | None:
    """What `git ARGUMENTS` prints in the checkout this code runs from (a Space's or a recipe card's commit), or None
    where that is not a git checkout or git fails."""
    try:
        result = subprocess.run(["git", *arguments], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _results_files(args: PushArguments) -> list[Path]:
    if args.results:
        return [Path(path) for path in args.results]
    default = Path(args.model) / RESULTS_FILE
    return [default] if default.is_file() else []


def _load_model(model_dir: Path):
    check_model_folder(model_dir)  # before any of its files is parsed
    config = AutoConfig.from_pretrained(model_dir)
    if config.model_type != VaswaniConfig.model_type:
        raise ValueError(f"--model {model_dir} holds a {config.model_type!r} model, not a Vaswani one.")
    architecture = (config.architectures or [None])[0]
    if architecture not in MODEL_CLASSES:
        raise ValueError(
            f"--model {model_dir}: config.json names the model class {architecture!r}; expected one of "
            f"{sorted(MODEL_CLASSES)}."
        )
    model = MODEL_CLASSES[architecture].from_pretrained(model_dir, dtype="auto")
    keep_own_code_references(model.config, str(model_dir))
    return model


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


@dataclass
class Staged:
    """What the repository's folder is made of, read and rendered before anything is written."""

    model: object
    tokenizer: object
    card: str


def _prepare(args: PushArguments, repo_id: str | None = None, model_name: str | None = None) -> Staged:
    """Read and check everything the folder is made of: the results, the run's record, the model and
    its tokenizer; render the card, which names the model `repo_id` and `model_name` (default: --repo_id, else
    the folder; the title from `_model_name`)."""
    model_dir = Path(args.model)
    # read first: a bad file stops before any work
    results = [load_results(path) for path in _results_files(args)]
    recorded_data, recorded_procedure = training_from_record(model_dir)
    model = _load_model(model_dir)
    decoding = _decode_as_scored(model, results)
    if decoding:
        print("generation_config.json: " + ", ".join(f"{k}={v}" for k, v in decoding.items())
              + " (the decoding of the results file)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    keep_own_tokenizer_code_references(tokenizer, str(model_dir))
    card = render_model_card(
        model.config,
        num_parameters=model.num_parameters(),
        repo_id=repo_id or args.repo_id or Path(args.output_dir).as_posix(),
        model_name=model_name or _model_name(args),
        results=results,
        license_id=args.license,
        languages=args.language,
        datasets=args.datasets,
        tags=args.tags,
        training_data=args.training_data or recorded_data,
        training_procedure=args.training_procedure or recorded_procedure,
        template=args.template,
    )
    return Staged(model, tokenizer, card)


def _stage(staged: Staged, folder: Path) -> list[Path]:
    """Write into `folder` everything the repository will hold; return the files."""
    folder.mkdir(parents=True, exist_ok=True)
    staged.model.save_pretrained(folder)
    staged.tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text(staged.card, encoding="utf-8")
    required = [*REQUIRED_FILES, *CODE_FILES, *(["generation_config.json"] if staged.model.can_generate() else [])]
    missing = [name for name in required if not (folder / name).is_file()]
    if not list(folder.glob("*.safetensors")):
        missing.append("model.safetensors")
    if missing:
        raise RuntimeError(f"The staged folder {folder} lacks {missing}; it would not load from the Hub.")
    return sorted(path for path in folder.rglob("*") if path.is_file())


def _model_name(args: PushArguments) -> str:
    """The card's title: the Hub repository's name, or for a folder only (--dry-run without --repo_id) --model_name
    or the folder's name."""
    if args.repo_id:
        return args.repo_id.split("/")[-1]
    return args.model_name or Path(args.output_dir).resolve().name


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
            ignore_patterns=[MANIFEST_FILE, f"*/{MANIFEST_FILE}"],  # the local record of what a command wrote
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


def _prepare_space(args: PushArguments) -> Staged:
    """`_prepare` for the model a Space serves: its card names the model repository (--model_repo_id) or the
    Space's own folder for it."""
    title = _space_title(args)
    return _prepare(args, repo_id=args.model_repo_id or space.MODEL_FOLDER,
                    model_name=(args.model_repo_id or title).split("/")[-1])


def _space_title(args: PushArguments) -> str:
    return args.repo_id.split("/")[-1] if args.repo_id else _model_name(args)


def _stage_space(staged: Staged, args: PushArguments, folder: Path) -> list[Path]:
    """Write into `folder` everything the Space will hold (see `vaswani.hub.space`); return the files."""
    task = read_task(Path(args.model), "--model")
    _stage(staged, folder / space.MODEL_FOLDER)
    commit = checkout_git("rev-parse", "HEAD")
    if commit and checkout_git("diff", "--name-only", "HEAD", "--", "modeling", "pipelines"):
        commit += " with uncommitted changes"
    space.write_space_files(folder, _space_title(args), task, args.license, args.model_repo_id, commit)
    required = (*space.SPACE_FILES, f"{space.PACKAGE_FOLDER}/__init__.py")
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"The staged Space {folder} lacks {missing}; it would not start.")
    return sorted(path for path in folder.rglob("*") if path.is_file())


def push(args: PushArguments, read_from: dict | None = None) -> Path | str:
    """Check the options, stage the folder the repository will hold (the model saved again, its code files,
    the card; with --space, the Space serving it), then upload it as one commit, or with --dry-run stop there.
    `read_from`: other files the card was made from, by the option that named them (--output_dir keeps apart from
    them). Returns the folder written (with --dry-run) or the URL of the commit."""
    _check_arguments(args)
    prepare = _prepare_space if args.space else _prepare

    def stage(staged: Staged, folder: Path) -> list[Path]:
        return _stage_space(staged, args, folder) if args.space else _stage(staged, folder)

    if args.output_dir is not None:
        with _output_folder(args, read_from) as output:
            staged = prepare(args)
            with output.publish() as staging:  # (its manifest, the record of what was written there, stays local)
                files = [output.path / path.relative_to(staging) for path in stage(staged, staging)
                         if path.name != MANIFEST_FILE]
            return _publish_staged(args, output.path, files)
    with tempfile.TemporaryDirectory(prefix="vaswani-push-") as temporary:
        folder = Path(temporary) / "repo"
        return _publish_staged(args, folder, stage(prepare(args), folder))


def _publish_staged(args: PushArguments, folder: Path, files: list[Path]) -> Path | str:
    """Say what `folder` holds and stop (--dry-run), or upload it."""
    listing = "\n".join(f"  {path.relative_to(folder)}  ({path.stat().st_size:,} bytes)" for path in files)
    what = "the Space " if args.space else ""
    if args.dry_run:
        where = f"that would be uploaded to {what}{args.repo_id} " if args.repo_id else ""
        try_it = f"\nTry it: cd {folder} && python app.py" if args.space else ""
        print(f"Dry run: {len(files)} files {where}are in {folder}:\n{listing}{try_it}")
        return folder
    commit = _upload(args, folder)
    print(f"Uploaded {len(files)} files to {what}{args.repo_id}:\n{listing}\n{commit.commit_url}")
    return commit.commit_url


def main(argv: list[str] | None = None, more_arguments: tuple = (), fill=None):
    """scripts/push_to_hub.py, the `vaswani-push` command: the folder written (with --dry-run) or the URL of the
    commit. The checkout's script adds its `--recipe` (`more_arguments`, a dataclass, and `fill(args, parsed)`, which
    completes the arguments and returns the files it read)."""
    args, *more = HfArgumentParser((PushArguments, *more_arguments)).parse_args_into_dataclasses(args=argv)
    return push(args, fill(args, *more) if fill is not None else None)


def console_main() -> None:
    """The `vaswani-push` command."""
    run_command(main, HfHubHTTPError)


__all__ = ["HubUnreachable", "PushArguments", "console_main", "main", "push"]
