"""The card of a model this project ships, from the recipe that made it: scripts/push_to_hub.py's `--recipe NAME`
(a recipe of scripts/configs/recipes.yaml) fills the card's training data, its training procedure (the recipe, the
commit of the checkout, the recipe's commands), its results file (without `--results`) and its title (without
`--repo_id`). Publishing itself (`vaswani.hub.push`) knows nothing of recipes: they exist in the checkout only."""

import re
from dataclasses import dataclass, field
from pathlib import Path

from vaswani.hub.push import PushArguments, checkout_git

from .recipes import Recipe, find_recipe, load_recipes


REPO = Path(__file__).resolve().parents[3]  # the checkout: scripts/tools/vaswani_tools/ is three folders down
RECIPES_FILE = REPO / "scripts" / "configs" / "recipes.yaml"


@dataclass
class RecipeArguments:
    recipe: str | None = field(
        default=None,
        metadata={"help": f"The recipe of {RECIPES_FILE.relative_to(REPO)} that made the model (its name): the "
                  "card's training data, commands, commit and, without --results, its results file."},
    )


def apply_recipe(args: PushArguments, name: str) -> dict[str, Path]:
    """Fill what `args` leaves open from the recipe called `name`: the card's training data and procedure, its
    results file, its title. Returns the files read, by the option that named them, for the output's checks (an
    output folder must keep apart from them)."""
    recipe = find_recipe(load_recipes(RECIPES_FILE), name, RECIPES_FILE)
    args.training_data = args.training_data or training_data_of(recipe)
    args.training_procedure = args.training_procedure or provenance(recipe)
    args.results = args.results or [str(REPO / recipe.results)]
    args.model_name = args.model_name or "vaswani-" + "-".join(re.findall(r"[a-z0-9]+", recipe.name.lower()))
    return {"--recipe (the recipes file)": RECIPES_FILE}


def training_data_of(recipe: Recipe) -> str:
    return (
        f"The files the recipe's commands name (under Training procedure); it is evaluated on {recipe.data}, "
        "so its training data are that dataset's training split."
    )


def provenance(recipe: Recipe) -> str:
    """The card's training procedure for a recipe's model: the recipe, the commit that trained it, its commands.
    (The code the folder carries is named by its own line, which scripts/tools/refresh_shipped_code.py writes.)"""
    commit = checkout_git("rev-parse", "HEAD")
    changed = checkout_git("diff", "--name-only", "HEAD", "--", "modeling", "pipelines", "scripts")
    if commit is None:
        code = "Not a git checkout, so no commit is recorded."
    else:
        code = f"Trained by commit `{commit}` of the project (HEAD when this folder was written)"
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

