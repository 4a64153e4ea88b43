"""The project's results tables (scripts/tools/results_table.py), filled from the files its runs wrote: for each
recipe of scripts/configs/recipes.yaml, its evaluation results (scripts/evaluate_model.py) and training summaries.
`update_tables` rewrites the text between markers in README.md and results/README.md (the markers, the
tables and the details under them are described in the command's docstring); no number in a table is typed by hand.
`rename_metrics` rewrites the metric names an older version wrote (vaswani.evaluation.metrics.names) in the files the
tables and cards are made from.
"""

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from vaswani.evaluation.metrics.names import RETIRED_NAMES, RETIRED_TASK_NAMES, renamed_metric
from vaswani.hub.model_card import load_results
from vaswani.output_paths import write_text_atomically
from vaswani.training.reporting import format_duration

from .recipes import Recipe, load_recipes


REPO = Path(__file__).resolve().parents[3]  # the checkout: scripts/tools/vaswani_tools/ is three folders down
START = "<!-- recipe-results:start -->"
END = "<!-- recipe-results:end -->"
# a short table, without each recipe's commands, conventions and notes (the README: they are in results/README.md)
TABLE_START = "<!-- recipe-table:start -->"
TABLE_END = "<!-- recipe-table:end -->"
# optional, in any of the files: the table of the models the project ships (the recipes with a `model`)
SHIPPED_START = "<!-- shipped-models:start -->"
SHIPPED_END = "<!-- shipped-models:end -->"
NOT_RUN = "not run yet"
# the file that holds every recipe's details (the short table links to its sections)
DETAILS_FILE = "results/README.md"
# training-time fields of the summaries: scripts/train.py's summary.json, the Trainer's all_results.json
DURATION_FIELDS = ("wall_seconds", "train_runtime")


@dataclass
class TableArguments:
    recipes: str = field(
        default="scripts/configs/recipes.yaml", metadata={"help": "The recipes file (YAML), one entry per row."}
    )
    files: list[str] = field(
        default_factory=lambda: ["README.md", "results/README.md"],
        metadata={"help": "The files whose block between the recipe-results markers is rewritten."},
    )
    root: str = field(
        default=str(REPO), metadata={"help": "Relative paths (--recipes, --files, the recipes' files) start here."}
    )
    check: bool = field(
        default=False,
        metadata={"help": "Write nothing; exit 1 if a file's block is out of date (with --rename_metrics: if a file "
                  "holds a retired metric name)."},
    )
    rename_metrics: bool = field(
        default=False,
        metadata={"help": "First rewrite the retired metric names (`bleu`; token classification's `f1`, "
                  "`precision`, `recall`) to the names they meant there: in the "
                  "recipes file, and in the results files, training summaries, GPU-suite reports and model cards "
                  "under --rename_paths; then the tables."},
    )
    rename_paths: list[str] = field(
        default_factory=lambda: ["results"],
        metadata={"help": "With --rename_metrics: the folders (searched whole) and files whose names are rewritten."},
    )


def _training_seconds(path: Path) -> float | None:
    """The training time a summary file reports, or None if the file does not exist yet."""
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Training summary {path} is not valid JSON: {error}") from None
    for key in DURATION_FIELDS:
        value = summary.get(key) if isinstance(summary, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    raise ValueError(
        f"Training summary {path}: no `{DURATION_FIELDS[0]}` (summary.json of scripts/train.py) or "
        f"`{DURATION_FIELDS[1]}` (all_results.json of the fine-tuning scripts) with a number of seconds."
    )


@dataclass
class Row:
    """A recipe with what its runs wrote: the results (None: not run yet) and the training time of each stage."""

    recipe: Recipe
    results: dict | None
    metrics: list[dict]  # the results' metrics to show, in the recipe's order
    stages: list[tuple[str, float | None]]  # each training summary file and its seconds (None: not run yet)

    @property
    def seconds(self) -> float | None:
        """The training time, all stages together; None while a stage has not run."""
        if not self.stages or any(seconds is None for _, seconds in self.stages):
            return None
        return sum(seconds for _, seconds in self.stages)


def _read_row(recipe: Recipe, root: Path) -> Row:
    if recipe.model and not (root / recipe.model / "config.json").is_file():
        raise ValueError(
            f"Recipe {recipe.name!r}: `model` names {recipe.model}, which is not a model folder (no config.json)."
        )
    if recipe.notes_file and not (root / recipe.notes_file).is_file():
        raise ValueError(f"Recipe {recipe.name!r}: `notes_file` names {recipe.notes_file}, which does not exist.")
    results_path = root / recipe.results
    results = load_results(results_path) if results_path.is_file() else None
    metrics = []
    if results is not None:
        if results["task"] != recipe.task:
            raise ValueError(
                f"Results file {results_path}: `task` is {results['task']!r}, but recipe {recipe.name!r} is "
                f"{recipe.task!r}: the recipe points at another run's results."
            )
        by_type = {metric["type"]: metric for metric in results["metrics"]}
        wanted = list(recipe.metrics or by_type)
        if recipe.goal is not None and recipe.goal.metric not in wanted:
            wanted.append(recipe.goal.metric)
        for kind in wanted:
            if kind not in by_type:
                raise ValueError(
                    f"Results file {results_path}: recipe {recipe.name!r} needs the metric of type `{kind}`, but "
                    f"`metrics` has only {list(by_type)}."
                )
        metrics = [by_type[kind] for kind in recipe.metrics or by_type]
    stages = [(file, _training_seconds(root / file)) for file in recipe.training_summaries]
    return Row(recipe, results, metrics, stages)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table_row(texts: list[str]) -> str:
    """A line of a Markdown table, one cell a text."""
    return "| " + " | ".join(_cell(text) for text in texts) + " |"


def _number(value: float) -> str:
    """A value exactly as the results file has it."""
    return repr(value)


def _metric_values(row: Row) -> str:
    """The row's metrics as the table shows them: `name value; name value`."""
    return "; ".join(f"{metric['name']} {_number(metric['value'])}" for metric in row.metrics)


def _model_link(recipe: Recipe, prefix: str = "") -> str:
    """A link to the shipped folder; `prefix` leads from the file the link is written in to the repository root."""
    return f"[{recipe.model}]({prefix}{recipe.model})"


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercased, punctuation dropped but hyphens, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _duration_cell(row: Row) -> str:
    """The training time for the table: the stages' sum, saying how many stages there were."""
    if not row.stages:
        return "—"
    if row.seconds is None:
        return NOT_RUN
    stages = f", {len(row.stages)} stages" if len(row.stages) > 1 else ""
    return f"{format_duration(row.seconds)} (wall{stages})"


def _goal_cell(row: Row) -> str:
    goal = row.recipe.goal
    if row.results is None:
        return NOT_RUN
    if goal is None:
        return "—"
    value = next(m["value"] for m in row.results["metrics"] if m["type"] == goal.metric)
    verdict, sign = ("yes", "≥") if value >= goal.at_least else ("no", "<")
    return f"{verdict} ({goal.metric} {_number(value)} {sign} {_number(goal.at_least)})"


def _table_line(row: Row, prefix: str = "") -> str:
    recipe, results = row.recipe, row.results
    if results is None:
        data, values = recipe.data, NOT_RUN
    else:
        dataset = results["dataset"]
        size = f", {dataset['num_examples']:,} examples" if dataset["num_examples"] is not None else ""
        data = f"{dataset['name']}, {dataset['split']}{size}"
        values = _metric_values(row)
    shipped = _model_link(recipe, prefix) if recipe.model else "—"
    cells = [recipe.name, data, values, shipped, recipe.reference, recipe.target, _goal_cell(row), _duration_cell(row),
             recipe.hardware]
    return _table_row(cells)


def _short_table_line(row: Row, prefix: str = "") -> str:
    """A row of the short table: recipe, data, result, target met, and links to its details and notes."""
    recipe, results = row.recipe, row.results
    if results is None:
        data, values = recipe.data, NOT_RUN
    else:
        data, values = f"{results['dataset']['name']}, {results['dataset']['split']}", _metric_values(row)
    links = [f"[commands]({prefix}{DETAILS_FILE}#{anchor(recipe.name)})"]
    if recipe.notes_file:
        links.append(f"[notes]({prefix}{recipe.notes_file})")
    return _table_row([recipe.name, data, values, _goal_cell(row), ", ".join(links)])


def _details(row: Row, root: Path, prefix: str = "") -> str:
    """The commands of a recipe and the conventions of its numbers."""
    recipe, results = row.recipe, row.results
    lines = [f"### {recipe.name}", ""]
    if recipe.notes_file:
        notes = f"[{recipe.notes_file}]({prefix}{recipe.notes_file})"
        lines += [f"{_task_name(recipe.task)}. What the recipe is and what was tried: {notes}.", ""]
    else:
        lines += [f"{_task_name(recipe.task)}.", ""]
    lines += ["```bash", recipe.command, "```", ""]
    if results is None:
        lines.append(f"- Results: {NOT_RUN} (`{recipe.results}` does not exist).")
    else:
        dataset = results["dataset"]
        decoding = ", ".join(f"`{key}={value}`" for key, value in results["decoding"].items())
        lines.append(
            f"- Evaluated on {dataset['name']}, split {dataset['split']}"
            + (f", {dataset['num_examples']:,} examples" if dataset["num_examples"] is not None else "")
            + (f"; {decoding}" if decoding else "")
            + f" (`{recipe.results}`"
            + (f", {results['created']}" if results.get("created") else "")
            + ")."
        )
        if results["conventions"]:
            lines.append(f"- Conventions: {' '.join(results['conventions'].split())}")
        # metrics that share a signature (ROUGE-1/2/L) are listed once, together
        names_of_signature: dict[str, list[str]] = {}
        for metric in results["metrics"]:
            if metric["signature"]:
                names_of_signature.setdefault(metric["signature"], []).append(metric["name"])
        for signature, names in names_of_signature.items():
            lines.append(f"- {', '.join(names)} signature: `{signature}`")
    if len(row.stages) == 1:
        file, seconds = row.stages[0]
        if seconds is None:
            lines.append(f"- Training time: {NOT_RUN} (`{file}` does not exist).")
        else:
            lines.append(f"- Training time: {format_duration(seconds)} wall (`{file}`), on {recipe.hardware}.")
    elif row.stages:
        stages = "; ".join(
            f"stage {number}, " + (f"{format_duration(seconds)} (`{file}`)" if seconds is not None
                                   else f"{NOT_RUN} (`{file}` does not exist)")
            for number, (file, seconds) in enumerate(row.stages, start=1)
        )
        total = NOT_RUN if row.seconds is None else f"{format_duration(row.seconds)} wall"
        lines.append(f"- Training time: {total} in {len(row.stages)} stages ({stages}), on {recipe.hardware}.")
    if recipe.picture and (root / recipe.picture).is_file():
        lines += ["", f"![{recipe.name}: the picture its run made]({prefix}{recipe.picture})"]
    return "\n".join(lines)


def _task_name(task: str) -> str:
    """`text-classification` -> `Text classification`."""
    return task.replace("-", " ").capitalize()


def _table_header(recipes_file: str, columns: list[str]) -> list[str]:
    """The generated block's warning, then a markdown table's header row and rule."""
    return [
        f"<!-- Written by scripts/tools/results_table.py from {recipes_file} and the files its recipes name: edit those "
        "and run the script, not this block. -->",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]


def _render_short_table(rows: list[Row], recipes_file: str, prefix: str = "") -> str:
    """The table the README shows: what each recipe scored and whether it met its target, with links to the rest."""
    header = _table_header(recipes_file, ["recipe", "data, split", "result", "target met?", "details"])
    return "\n".join(header + [_short_table_line(row, prefix) for row in rows])


def _render_table(rows: list[Row], recipes_file: str, prefix: str = "") -> str:
    columns = ["recipe", "data, split", "result", "model", "reference", "target", "met?", "training time", "hardware"]
    return "\n".join(_table_header(recipes_file, columns) + [_table_line(row, prefix) for row in rows])


def _render_block(rows: list[Row], recipes_file: str, root: Path, prefix: str = "") -> str:
    """The table, then each recipe's section: commands, conventions, training time, picture, link to its notes."""
    return _render_table(rows, recipes_file, prefix) + "\n\n" + "\n\n".join(_details(row, root, prefix) for row in rows)


def _render_shipped_block(rows: list[Row], recipes_file: str, prefix: str = "") -> str:
    """A table of the shipped models: folder, task, what they score (from their results files), recipe."""
    lines = [
        f"<!-- Written by scripts/tools/results_table.py from {recipes_file}: the recipes with a `model`. -->",
        "",
        "| folder | task | data, split | result | made by the recipe |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if not row.recipe.model:
            continue
        if row.results is None:
            data, values = row.recipe.data, NOT_RUN
        else:
            data, values = f"{row.results['dataset']['name']}, {row.results['dataset']['split']}", _metric_values(row)
        lines.append(_table_row([_model_link(row.recipe, prefix), row.recipe.task, data, values, row.recipe.name]))
    return "\n".join(lines)


def _replace_block(text: str, block: str, where: str, start: str = START, end: str = END) -> str:
    """`text` with everything between the markers replaced by `block`; the text outside stays as it is."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(
            f"{where} needs the markers {start} and {end}, once each and in that order, around the place of the "
            "table."
        )
    before, rest = text.split(start)
    _, after = rest.split(end)
    return f"{before}{start}\n{block}\n{end}{after}"


# --rename_metrics: each retired name becomes what it meant in the file it is in (and, for a name retired for one task,
# the task it scores there). train.py's training summaries (`best_metric`) named its validation score; results files,
# recipes, model cards and the GPU suite's recipe scores (copied from a results file) named the results file's.
RETIRED_ANYWHERE = "|".join(re.escape(name) for name in RETIRED_NAMES)
RETIRED = "|".join(re.escape(name) for name in dict.fromkeys(
    [*RETIRED_NAMES, *(name for names in RETIRED_TASK_NAMES.values() for name in names)]))


def _renamed(name, where: str, task=None):
    if not isinstance(name, str) or not isinstance(task, (str, type(None))):
        return name
    return renamed_metric(name, where, task) or name


def _with_renamed(entry, key: str, where: str, task=None):
    """`entry` (a mapping) with its `key` renamed; anything else as it is."""
    if not isinstance(entry, dict) or key not in entry:
        return entry
    return {**entry, key: _renamed(entry[key], where, task)}


def _renamed_results(content: dict) -> dict:
    return {**content, "metrics": [_with_renamed(metric, "type", "results", content["task"])
                                   for metric in content["metrics"]]}


def _renamed_summary(content: dict) -> dict:
    return _with_renamed(content, "best_metric", "training")


def _renamed_gpu_report(content: dict) -> dict:
    return {**content, "recipe": {_renamed(key, "results"): value for key, value in content["recipe"].items()}}


def _renamed_recipes(content):
    if not isinstance(content, dict) or not isinstance(content.get("recipes"), list):
        return content
    recipes = []
    for recipe in content["recipes"]:
        if isinstance(recipe, dict):
            recipe = dict(recipe)
            task = recipe.get("task")
            if isinstance(recipe.get("metrics"), list):
                recipe["metrics"] = [_renamed(name, "results", task) for name in recipe["metrics"]]
            if "goal" in recipe:
                recipe["goal"] = _with_renamed(recipe["goal"], "metric", "results", task)
        recipes.append(recipe)
    return {**content, "recipes": recipes}


def _renamed_card_header(header):
    """A card's metadata: its `metrics` (of its `pipeline_tag`'s task), and the metric types of each result of its
    `model-index`."""
    if not isinstance(header, dict):
        return header
    header = dict(header)
    if isinstance(header.get("metrics"), list):
        header["metrics"] = [_renamed(name, "results", header.get("pipeline_tag")) for name in header["metrics"]]
    if isinstance(header.get("model-index"), list):
        header["model-index"] = [
            {**model, "results": [_renamed_card_result(result) for result in model["results"]]}
            if isinstance(model, dict) and isinstance(model.get("results"), list) else model
            for model in header["model-index"]
        ]
    return header


def _renamed_card_result(result):
    if not isinstance(result, dict) or not isinstance(result.get("metrics"), list):
        return result
    task = result["task"].get("type") if isinstance(result.get("task"), dict) else None
    return {**result, "metrics": [_with_renamed(metric, "type", "results", task) for metric in result["metrics"]]}


# Each kind of JSON file: whether an object is one, the rename of its content, and where the names stand in its text
# (the group `name`; the rewritten text must read as the renamed content, or nothing is written).
JSON_KINDS = {
    "results file": (lambda c: isinstance(c.get("metrics"), list) and "task" in c, _renamed_results,
                     [rf'"type":\s*"(?P<name>{RETIRED})"']),
    "training summary": (lambda c: "best_metric" in c, _renamed_summary, [rf'"best_metric":\s*"(?P<name>{RETIRED})"']),
    "GPU-suite report": (lambda c: isinstance(c.get("recipe"), dict) and "engines" in c, _renamed_gpu_report,
                         [rf'"(?P<name>{RETIRED})"\s*:']),
}
RECIPE_PATTERNS = [rf"^\s*metrics:\s*\[[^\]\n]*\b(?P<name>{RETIRED})\b",
                   rf"^\s*goal:.*\bmetric:\s*(?P<name>{RETIRED})\b"]
CARD_PATTERNS = [rf"^\s*(?:- )?(?:type: )?(?P<name>{RETIRED})\s*$"]


def _substituted(text: str, patterns: list[str], where: str, task_at: Callable[[str, int], str | None]) -> str:
    """`text` with each name the patterns find (their group `name`) renamed, until none is left; `task_at(text,
    position)` is the task whose score a name at `position` is."""
    def rename(match: re.Match) -> str:
        start, end = match.start("name") - match.start(), match.end("name") - match.start()
        return match[0][:start] + _renamed(match["name"], where, task_at(match.string, match.start())) + match[0][end:]

    for pattern in patterns:
        while (renamed := re.sub(pattern, rename, text, flags=re.MULTILINE)) != text:
            text = renamed
    return text


def _rewritten(path: Path, text: str, parse: Callable, rename: Callable, patterns: list[str], where: str,
               task_at: Callable[[str, int], str | None]) -> str | None:
    """The text of `path` with its retired names rewritten where they stand (formatting and comments kept); None
    where it holds none. Refused where the rewritten text does not read as the renamed content."""
    before = parse(text)
    expected = rename(before)
    if expected == before:
        return None
    rewritten = _substituted(text, patterns, where, task_at)
    if parse(rewritten) != expected:
        raise ValueError(f"{path}: its retired metric names ({RETIRED.replace('|', ', ')}) stand where this command "
                         "does not rewrite them; rename them by hand (see vaswani.evaluation.metrics.names).")
    return rewritten


def _recipe_task_at(text: str, position: int) -> str | None:
    """The task of the recipe a recipes file's text is at, at `position`: its last `task:` before it."""
    tasks = re.findall(r"^\s*-?\s*task:\s*(\S+)", text[:position], flags=re.MULTILINE)
    return tasks[-1] if tasks else None


def _card_parts(text: str) -> tuple[str, str] | None:
    """(the YAML header, the rest) of a model card; None for a file without one."""
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        return None
    header, rest = text[4:].split("\n---\n", 1)
    return header, rest


def _renamed_file(path: Path, recipes_file: Path) -> tuple[str | None, str | None]:
    """(the rewritten text of `path`, or None; the kind of file, or None for one this command leaves alone)."""
    text = path.read_text(encoding="utf-8")
    if path.resolve() == recipes_file.resolve():
        return _rewritten(path, text, yaml.safe_load, _renamed_recipes, RECIPE_PATTERNS, "results",
                          _recipe_task_at), "recipes file"
    if path.suffix == ".md":
        if (parts := _card_parts(text)) is None or "model-index" not in parts[0]:
            return None, None
        header = _rewritten(path, parts[0], yaml.safe_load, _renamed_card_header, CARD_PATTERNS, "results",
                            lambda text, position: (yaml.safe_load(text) or {}).get("pipeline_tag"))
        return (None if header is None else f"---\n{header}\n---\n{parts[1]}"), "model card"
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    for kind, (recognized, rename, patterns) in JSON_KINDS.items():
        if isinstance(content, dict) and recognized(content):
            where = "training" if kind == "training summary" else "results"
            return _rewritten(path, text, json.loads, rename, patterns, where,
                              lambda text, position: content.get("task")), kind
    return None, None


def rename_metrics(args: TableArguments) -> int:
    """Rewrite the retired metric names in the recipes file and in the JSON files and model cards (README.md with a
    `model-index`) of --rename_paths (with --check, only name the files that hold them). 0 when none is left; 1 when
    --check finds one."""
    root = Path(args.root)
    recipes_file = root / args.recipes
    if not recipes_file.is_file():
        raise FileNotFoundError(f"Recipes file {recipes_file} does not exist.")
    paths = [recipes_file]
    for name in args.rename_paths:
        path = root / name
        if path.is_dir():
            paths += sorted(file for file in path.rglob("*")
                            if file.is_file() and (file.suffix == ".json" or file.name == "README.md"))
        elif path.is_file():
            paths.append(path)
        else:
            raise FileNotFoundError(f"--rename_paths: {path} does not exist.")
    changed, left = {}, []
    for path in dict.fromkeys(paths):
        text, kind = _renamed_file(path, recipes_file)
        if text is not None:
            changed[path] = (text, kind)
        elif kind is None and re.search(rf'\\?"(?:{RETIRED_ANYWHERE})\\?"', path.read_text(encoding="utf-8")):
            left.append(path)
    shown = {path: os.path.relpath(path, root) for path in [*changed, *left]}
    if left:
        print("Left as written (not a file the results tables, the cards or the tools read): "
              + ", ".join(shown[path] for path in left))
    if args.check:
        if changed:
            print(f"Retired metric names in: {', '.join(shown[path] for path in changed)}. Run: python "
                  "scripts/tools/results_table.py --rename_metrics", file=sys.stderr)
        return 1 if changed else 0
    for path, (text, kind) in changed.items():
        write_text_atomically(path, text, str(path))
        print(f"Renamed the retired metric names in {shown[path]} ({kind}).")
    return 0


def update_tables(args: TableArguments) -> int:
    """Rewrite the blocks between the markers of each of --files (with --check, only compare them). 0 when the files
    are written (or, with --check, up to date); 1 when --check finds a block out of date."""
    root = Path(args.root)
    recipes = load_recipes(root / args.recipes)
    rows = [_read_row(recipe, root) for recipe in recipes]
    stale = []
    for name in args.files:
        path = root / name
        if not path.is_file():
            raise FileNotFoundError(f"--files: {path} does not exist.")
        # links are written relative to the file (results/README.md reaches the repository root through ../)
        prefix = "" if path.parent.resolve() == root.resolve() else os.path.relpath(root, path.parent) + "/"
        blocks = {
            (START, END): _render_block(rows, args.recipes, root, prefix),
            (TABLE_START, TABLE_END): _render_short_table(rows, args.recipes, prefix),
            (SHIPPED_START, SHIPPED_END): _render_shipped_block(rows, args.recipes, prefix),
        }
        text = updated = path.read_text(encoding="utf-8")
        if not any(start in text or end in text for start, end in list(blocks)[:2]):
            raise ValueError(
                f"{path} needs the markers {START} and {END} (the table and each recipe's details) or {TABLE_START} "
                f"and {TABLE_END} (a short table), around the place of the table."
            )
        for (start, end), block in blocks.items():
            if start in updated or end in updated:
                updated = _replace_block(updated, block, str(path), start, end)
        if updated != text:
            stale.append(name)
            if not args.check:  # whole or not at all (vaswani.output_paths): a reader finds the old text or the new
                write_text_atomically(path, updated, str(path))
    if args.check and stale:
        print(f"Out of date: {', '.join(stale)}. Run: python scripts/tools/results_table.py", file=sys.stderr)
        return 1
    print(("Up to date: " if not stale else "Rewrote the results table in: ") + ", ".join(stale or args.files))
    return 0


__all__ = ["END", "START", "TABLE_END", "TABLE_START", "TableArguments", "anchor", "rename_metrics", "update_tables"]
