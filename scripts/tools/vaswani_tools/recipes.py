"""The project's recipes (scripts/configs/recipes.yaml): what each one trains and evaluates, with which commands,
and what it aims at. Read by scripts/tools/results_table.py (the results tables) and scripts/push_to_hub.py's
`--recipe` (the card of a shipped model, `recipe_cards`); an error names the file, the recipe and the field."""

from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import yaml

from vaswani.evaluation.metrics.names import RENAME_COMMAND, retired_metric
from vaswani.tasks import TASKS


@dataclass
class Goal:
    """The target as a check: the results' metric `metric` (its `type`) is at least `at_least`."""

    metric: str
    at_least: float


@dataclass
class Recipe:
    name: str
    task: str
    data: str
    command: str
    results: str
    hardware: str
    reference: str
    target: str
    # the training summary (summary.json of train.py, all_results.json of the fine-tuning scripts), or one a stage
    training_summary: str | list[str] | None = None
    metrics: list[str] | None = None
    goal: Goal | None = None
    picture: str | None = None
    model: str | None = None  # the folder of the trained model the project ships (results/<recipe>/model)
    notes_file: str | None = None  # what the recipe is and what was tried (results/<recipe>/notes.md)

    @property
    def training_summaries(self) -> list[str]:
        """The training summary files, one a stage (none, one, or several)."""
        if self.training_summary is None:
            return []
        return [self.training_summary] if isinstance(self.training_summary, str) else list(self.training_summary)


def load_recipes(path: Path) -> list[Recipe]:
    """The recipes of a YAML file `{recipes: [...]}`; an error names the file, the recipe and the field."""
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"Recipes file {path} does not exist.") from None
    except yaml.YAMLError as error:
        raise ValueError(f"Recipes file {path} is not valid YAML: {error}") from None
    if not isinstance(content, dict) or not isinstance(content.get("recipes"), list) or not content["recipes"]:
        raise ValueError(f"Recipes file {path}: expected `recipes:` with a list of recipes.")
    recipes = []
    for number, entry in enumerate(content["recipes"], start=1):
        if not isinstance(entry, dict):
            raise ValueError(f"Recipes file {path}: recipe {number} is not a mapping of fields.")
        where = f"Recipes file {path}, recipe {number} ({entry.get('name', 'no name')})"
        if moved := sorted({"notes", "experiments"} & set(entry)):
            raise ValueError(
                f"{where}: {', '.join(f'`{name}`' for name in moved)} no longer go in the recipes file: write them in "
                "the recipe's notes file (results/<recipe>/notes.md) and name it with `notes_file`."
            )
        _check_fields(entry, Recipe, where, optional_text=("picture", "model", "notes_file"))
        if entry["task"] not in TASKS:
            raise ValueError(f"{where}: `task` is {entry['task']!r}; expected one of {list(TASKS)}.")
        metrics = entry.get("metrics")
        types_listed = isinstance(metrics, list) and metrics and all(isinstance(kind, str) for kind in metrics)
        if metrics is not None and not types_listed:
            raise ValueError(f"{where}: `metrics` must be a list of metric types (e.g. [tokenized_bleu, sacrebleu]).")
        summaries = entry.get("training_summary")
        one_file = isinstance(summaries, str) and summaries.strip()
        files_listed = isinstance(summaries, list) and summaries and all(
            isinstance(file, str) and file.strip() for file in summaries
        )
        if summaries is not None and not (one_file or files_listed):
            raise ValueError(
                f"{where}: `training_summary` must be a file, or a list of files (one a stage), as text."
            )
        goal = None if entry.get("goal") is None else _parse_goal(entry["goal"], where)
        for name in [*(metrics or []), *([goal.metric] if goal else [])]:
            if (retired := retired_metric(name, entry["task"])) is not None:
                raise ValueError(f"{where}: {retired}; {RENAME_COMMAND} rewrites the file.")
        recipes.append(Recipe(**{**entry, "command": entry["command"].strip(), "goal": goal}))
    return recipes


def _check_fields(entry: dict, kind: type, where: str, optional_text: tuple[str, ...]) -> None:
    """`entry` has only the fields of the dataclass `kind`, its required ones as text, and `optional_text` as text
    where given; the error says where, which field and what is allowed."""
    known = [f.name for f in fields(kind)]
    if unknown := sorted(set(entry) - set(known)):
        raise ValueError(f"{where}: unknown field(s) {unknown}; the fields are {known}.")
    for f in fields(kind):
        value = entry.get(f.name)
        if f.default is MISSING and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{where}: `{f.name}` is missing or not text.")
        if f.name in optional_text and value is not None and not isinstance(value, str):
            raise ValueError(f"{where}: `{f.name}` must be text.")


def _parse_goal(goal, where: str) -> Goal:
    if (
        not isinstance(goal, dict)
        or set(goal) != {"metric", "at_least"}
        or not isinstance(goal["metric"], str)
        or isinstance(goal["at_least"], bool)
        or not isinstance(goal["at_least"], (int, float))
    ):
        raise ValueError(f"{where}: `goal` must be {{metric: TYPE, at_least: NUMBER}}, got {goal!r}.")
    return Goal(goal["metric"], goal["at_least"])


def find_recipe(recipes: list[Recipe], name: str, path: Path) -> Recipe:
    """The recipe called `name`; an error lists the names there are."""
    for recipe in recipes:
        if recipe.name == name:
            return recipe
    raise ValueError(f"--recipe {name!r} is not a recipe of {path}; the recipes are {[r.name for r in recipes]}.")


__all__ = ["Goal", "Recipe", "find_recipe", "load_recipes"]
