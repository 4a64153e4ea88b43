"""scripts/tools/results_table.py: the recipe-results table is built from the results files and nothing else, replaces only
the block between its markers, `--check` finds a stale block, bad files are named with the field, a recipe trained in
stages shows the sum of its stages' times, and each recipe links to its notes file."""

import json
import re

import pytest
import yaml

from helpers import REPO, command_in_process, load_script
from vaswani_tools.recipes import load_recipes
from vaswani_tools.results_table import END, START, TABLE_END, TABLE_START, anchor

results_table = load_script("tools/results_table")


TRANSLATION_RESULTS = {
    "model": "outputs/en_de/averaged",
    "task": "translation",
    "dataset": {"name": "bentrevett/multi30k", "config": None, "split": "test_2016_flickr",
                "columns": {"source": "en", "target": "de"}, "num_examples": 1000},
    "decoding": {"num_beams": 5, "length_penalty": 1.0, "max_new_tokens": 80},
    "metrics": [
        {"type": "sacrebleu", "name": "sacreBLEU", "value": 35.21, "signature": "nrefs:1|case:mixed|tok:13a|v:2.6.0"},
        {"type": "tokenized_bleu", "name": "BLEU (tokenized, lowercased)", "value": 38.17, "signature": "moses-de|lc|tok"},
        {"type": "chrf", "name": "chrF", "value": 61.5},
    ],
    "conventions": "Beam 5, length penalty 1.0; Moses tokenization for BLEU.",
    "time_seconds": 12.3,
    "created": "2026-11-22T10:00:00Z",
}
CLASSIFICATION_RESULTS = {
    "model": "outputs/sst2",
    "task": "text-classification",
    "dataset": {"name": "stanfordnlp/sst2", "config": None, "split": "validation", "num_examples": 872},
    "decoding": {},
    "metrics": [
        {"type": "accuracy", "name": "Accuracy", "value": 0.7654},
        {"type": "f1", "name": "F1 (binary)", "value": 0.7781},
    ],
    "conventions": "Accuracy and F1 in 0-1.",
    "created": "2026-11-22T11:00:00Z",
}
RECIPES = {
    "recipes": [
        {
            "name": "Multi30k en->de",
            "task": "translation",
            "data": "Multi30k, test_2016_flickr",
            "command": "python scripts/train.py --config en_de.yaml\npython scripts/evaluate_model.py --model x\n",
            "results": "outputs/en_de/evaluation_results.json",
            "training_summary": "outputs/en_de/summary.json",
            "metrics": ["tokenized_bleu", "sacrebleu"],
            "hardware": "a test CPU",
            "reference": "about 41 BLEU",
            "target": "BLEU of at least 35",
            "goal": {"metric": "tokenized_bleu", "at_least": 35},
            "notes_file": "results/en_de/notes.md",
            "picture": "outputs/en_de/attention.png",
        },
        {
            "name": "SST-2",
            "task": "text-classification",
            "data": "SST-2, validation",
            "command": "python scripts/finetune_classification.py --output_dir outputs/sst2",
            "results": "outputs/sst2/evaluation_results.json",
            "training_summary": "outputs/sst2/all_results.json",
            "hardware": "a test CPU | one thread",
            "reference": "about 83%",
            "target": "accuracy of at least 0.80",
            "goal": {"metric": "accuracy", "at_least": 0.8},
        },
        {
            "name": "AESLC",
            "task": "summarization",
            "data": "AESLC, validation",
            "command": "python scripts/train.py --config aeslc.yaml",
            "results": "outputs/aeslc/evaluation_results.json",
            "training_summary": "outputs/aeslc/summary.json",
            "hardware": "a test CPU",
            "reference": "15.04 / 7.39 / 14.93",
            "target": "ROUGE-L of at least 10",
            "goal": {"metric": "rougeL", "at_least": 10},
        },
    ]
}
BEFORE = "# A project\n\nSome text before the table.\n\n"
AFTER = "\n\n## Later section\n\nText after the table, untouched.\n"


def write_json(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2), encoding="utf-8")


@pytest.fixture
def project(tmp_path):
    """A folder laid out like the repository: a recipes file, two recipes' output files, a README with markers."""
    (tmp_path / "recipes.yaml").write_text(yaml.safe_dump(RECIPES, sort_keys=False), encoding="utf-8")
    write_json(tmp_path / "outputs/en_de/evaluation_results.json", TRANSLATION_RESULTS)
    write_json(tmp_path / "outputs/en_de/summary.json", {"steps": 3500, "wall_seconds": 3723.4, "train_seconds": 3500})
    write_json(tmp_path / "outputs/sst2/evaluation_results.json", CLASSIFICATION_RESULTS)
    write_json(tmp_path / "outputs/sst2/all_results.json", {"epoch": 1.0, "train_runtime": 671.2, "eval_loss": 0.4})
    (tmp_path / "results/en_de").mkdir(parents=True)
    (tmp_path / "results/en_de/notes.md").write_text("# en->de\n\nAverage of the last 5 checkpoints.\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(f"{BEFORE}{START}\nOLD TABLE 99.9\n{END}{AFTER}", encoding="utf-8")
    return tmp_path


def run(project, *extra, files=("README.md",)) -> int:
    return results_table.main(["--root", str(project), "--recipes", "recipes.yaml", "--files", *files, *extra])


def block_of(path) -> str:
    text = path.read_text(encoding="utf-8")
    return text[text.index(START) + len(START): text.index(END)]


def table_rows(block: str) -> dict[str, str]:
    """The table's lines by their first cell (the recipe's name)."""
    lines = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line]
    return {line.split(" | ")[0][2:]: line for line in lines}


def test_the_table_holds_exactly_the_numbers_of_the_results_files(project):
    assert run(project) == 0
    rows = table_rows(block_of(project / "README.md"))
    assert rows["Multi30k en->de"] == (
        "| Multi30k en->de | bentrevett/multi30k, test_2016_flickr, 1,000 examples "
        "| BLEU (tokenized, lowercased) 38.17; sacreBLEU 35.21 | — | about 41 BLEU | BLEU of at least 35 "
        "| yes (tokenized_bleu 38.17 ≥ 35) | 1h02m03s (wall) | a test CPU |"
    )
    assert rows["SST-2"] == (
        "| SST-2 | stanfordnlp/sst2, validation, 872 examples | Accuracy 0.7654; F1 (binary) 0.7781 | — | about 83% "
        "| accuracy of at least 0.80 | no (accuracy 0.7654 < 0.8) | 11m11s (wall) | a test CPU \\| one thread |"
    )


def test_the_details_give_commands_and_the_conventions_of_the_results(project):
    run(project)
    block = block_of(project / "README.md")
    details = block[block.index("### Multi30k en->de"): block.index("### SST-2")]
    command = "python scripts/train.py --config en_de.yaml\npython scripts/evaluate_model.py --model x"
    assert f"```bash\n{command}\n```" in details
    assert "`num_beams=5`, `length_penalty=1.0`, `max_new_tokens=80`" in details
    assert TRANSLATION_RESULTS["conventions"] in details
    for metric in TRANSLATION_RESULTS["metrics"][:2]:
        assert f"- {metric['name']} signature: `{metric['signature']}`" in details
    assert "1h02m03s wall" in details
    # the notes are the notes file's, linked, not copied
    assert "Average of the last 5 checkpoints." not in details
    assert "What the recipe is and what was tried: [results/en_de/notes.md](results/en_de/notes.md)." in details
    # every number in the block comes from a file: nothing else that looks like a score
    numbers = set(re.findall(r"\d+\.\d+", block))
    assert numbers <= {"38.17", "35.21", "0.7654", "0.7781", "1.0", "0.80", "0.8", "7.39", "15.04", "14.93", "2.6"}


def test_a_recipe_without_results_says_not_run_yet(project):
    run(project)
    block = block_of(project / "README.md")
    assert table_rows(block)["AESLC"] == (
        "| AESLC | AESLC, validation | not run yet | — | 15.04 / 7.39 / 14.93 | ROUGE-L of at least 10 | not run yet "
        "| not run yet | a test CPU |"
    )
    assert "- Results: not run yet (`outputs/aeslc/evaluation_results.json` does not exist)." in block
    # once the run writes its file, the row shows it
    write_json(project / "outputs/aeslc/evaluation_results.json", {
        **TRANSLATION_RESULTS, "task": "summarization", "decoding": {"num_beams": 4},
        "metrics": [{"type": "rouge1", "name": "ROUGE-1", "value": 20.25, "signature": "rouge-score|stem"},
                    {"type": "rougeL", "name": "ROUGE-L", "value": 12.5, "signature": "rouge-score|stem"}],
    })
    run(project)
    block = block_of(project / "README.md")
    assert "| ROUGE-1 20.25; ROUGE-L 12.5 | — | 15.04 / 7.39 / 14.93 |" in table_rows(block)["AESLC"]
    assert "yes (rougeL 12.5 ≥ 10)" in table_rows(block)["AESLC"]
    assert "- ROUGE-1, ROUGE-L signature: `rouge-score|stem`" in block  # one signature, listed once


def test_a_picture_is_shown_once_the_run_made_it(project):
    run(project)
    assert "attention.png" not in block_of(project / "README.md")  # no broken image before the run
    (project / "outputs/en_de/attention.png").write_bytes(b"\x89PNG")
    run(project)
    details = block_of(project / "README.md").split("### SST-2")[0]
    assert details.endswith("![Multi30k en->de: the picture its run made](outputs/en_de/attention.png)\n\n")


def test_a_shipped_model_is_linked_in_its_row_and_listed_in_the_shipped_block(project):
    recipes = json.loads(json.dumps(RECIPES))
    recipes["recipes"][0]["model"] = "results/en_de/model"
    (project / "recipes.yaml").write_text(yaml.safe_dump(recipes, sort_keys=False), encoding="utf-8")
    with pytest.raises(ValueError, match=r"`model` names results/en_de/model, which is not a model folder"):
        run(project)
    write_json(project / "results/en_de/model/config.json", {"model_type": "vaswani"})
    readme = project / "README.md"
    shipped = "<!-- shipped-models:start -->\nold\n<!-- shipped-models:end -->\n\n"
    readme.write_text(shipped + readme.read_text(encoding="utf-8"), encoding="utf-8")
    assert run(project) == 0
    link = "[results/en_de/model](results/en_de/model)"
    assert f"| BLEU (tokenized, lowercased) 38.17; sacreBLEU 35.21 | {link} | about 41 BLEU |" in (
        table_rows(block_of(readme))["Multi30k en->de"]
    )
    text = readme.read_text(encoding="utf-8")
    block = text[text.index("<!-- shipped-models:start -->"): text.index("<!-- shipped-models:end -->")]
    assert table_rows(block) == {
        "folder": "| folder | task | data, split | result | made by the recipe |",
        link: f"| {link} | translation | bentrevett/multi30k, test_2016_flickr "
        "| BLEU (tokenized, lowercased) 38.17; sacreBLEU 35.21 | Multi30k en->de |",
    }
    assert run(project, "--check") == 0


def with_stages(project, *stages):
    """The en->de recipe trained in stages: each stage's summary file (its name, its content; None: not run yet)."""
    recipes = json.loads(json.dumps(RECIPES))
    recipes["recipes"][0]["training_summary"] = [name for name, _ in stages]
    (project / "recipes.yaml").write_text(yaml.safe_dump(recipes, sort_keys=False), encoding="utf-8")
    for name, content in stages:
        if content is not None:
            write_json(project / name, content)


def test_a_recipe_trained_in_stages_shows_the_sum_of_their_times(project):
    """A pretraining run of train.py (summary.json, wall_seconds), then a fine-tuning run (all_results.json,
    train_runtime): the table adds them up and says how many stages; the recipe's section gives each stage."""
    with_stages(project, ("outputs/en_de/summary.json", None),  # written by the fixture: 3723.4 s
                ("outputs/en_de_ft/all_results.json", {"epoch": 8.0, "train_runtime": 1200.0}))
    assert run(project) == 0
    block = block_of(project / "README.md")
    assert table_rows(block)["Multi30k en->de"].endswith("| yes (tokenized_bleu 38.17 ≥ 35) | 1h22m03s (wall, 2 stages) | a test CPU |")
    details = block[block.index("### Multi30k en->de"): block.index("### SST-2")]
    assert (
        "- Training time: 1h22m03s wall in 2 stages (stage 1, 1h02m03s (`outputs/en_de/summary.json`); stage 2, "
        "20m00s (`outputs/en_de_ft/all_results.json`)), on a test CPU." in details
    )
    # a single file, and a list of one, read as before
    assert "| 11m11s (wall) | a test CPU \\| one thread |" in table_rows(block)["SST-2"]
    with_stages(project, ("outputs/en_de/summary.json", None))
    run(project)
    block = block_of(project / "README.md")
    assert "| 1h02m03s (wall) |" in table_rows(block)["Multi30k en->de"]
    assert "- Training time: 1h02m03s wall (`outputs/en_de/summary.json`), on a test CPU." in block


def test_a_stage_not_run_yet_leaves_the_total_not_run_and_is_named(project):
    with_stages(project, ("outputs/en_de/summary.json", None), ("outputs/en_de_ft/all_results.json", None))
    assert run(project) == 0
    block = block_of(project / "README.md")
    assert "| yes (tokenized_bleu 38.17 ≥ 35) | not run yet | a test CPU |" in table_rows(block)["Multi30k en->de"]
    assert (
        "- Training time: not run yet in 2 stages (stage 1, 1h02m03s (`outputs/en_de/summary.json`); stage 2, not run "
        "yet (`outputs/en_de_ft/all_results.json` does not exist)), on a test CPU." in block
    )
    # once the stage has run, the total appears
    write_json(project / "outputs/en_de_ft/all_results.json", {"train_runtime": 59.6})
    assert run(project, "--check") == 1
    run(project)
    assert "| 1h03m03s (wall, 2 stages) |" in table_rows(block_of(project / "README.md"))["Multi30k en->de"]


def test_a_stage_without_a_duration_is_named(project):
    with_stages(project, ("outputs/en_de/summary.json", None), ("outputs/en_de_ft/all_results.json", {"epoch": 8.0}))
    with pytest.raises(ValueError, match=r"Training summary .*outputs/en_de_ft/all_results.json: no `wall_seconds`"):
        run(project)


def test_only_the_block_between_the_markers_is_replaced(project):
    run(project)
    text = (project / "README.md").read_text(encoding="utf-8")
    assert text.startswith(BEFORE + START + "\n") and text.endswith("\n" + END + AFTER)
    assert "OLD TABLE" not in text
    run(project)  # a second run changes nothing
    assert (project / "README.md").read_text(encoding="utf-8") == text


def test_check_finds_a_stale_block_and_writes_nothing(project):
    assert run(project, "--check") == 1  # the old block
    assert "OLD TABLE" in (project / "README.md").read_text(encoding="utf-8")
    run(project)
    assert run(project, "--check") == 0
    written = (project / "README.md").read_text(encoding="utf-8")
    write_json(project / "outputs/en_de/evaluation_results.json", {
        **TRANSLATION_RESULTS, "metrics": [{**m, "value": m["value"] + 1} for m in TRANSLATION_RESULTS["metrics"]]
    })
    assert run(project, "--check") == 1
    assert (project / "README.md").read_text(encoding="utf-8") == written


def test_check_fails_the_command_line(project):
    result = command_in_process(REPO / "scripts/tools/results_table.py",
                                ["--root", project, "--recipes", "recipes.yaml", "--files", "README.md", "--check"])
    assert result.returncode == 1 and "Out of date: README.md" in result.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r["metrics"][0].update(value="35.21"), r"`metrics\[0\]\.value` is missing or not a int or float"),
        (lambda r: r["dataset"].pop("split"), r"`dataset\.split` is missing"),
        (lambda r: r.update(task="translate"), r"`task` is 'translate'"),
        (lambda r: r.update(task="summarization"), r"`task` is 'summarization', but recipe 'Multi30k en->de' is"),
        (lambda r: r["metrics"].pop(1), r"recipe 'Multi30k en->de' needs the metric of type `tokenized_bleu`"),
    ],
)
def test_a_malformed_results_file_is_named_with_its_field(project, change, message):
    results = json.loads(json.dumps(TRANSLATION_RESULTS))
    change(results)
    write_json(project / "outputs/en_de/evaluation_results.json", results)
    path = re.escape(str(project / "outputs/en_de/evaluation_results.json"))
    with pytest.raises(ValueError, match=rf"Results file {path}: {message}"):
        run(project)


def test_a_results_file_that_is_not_json_is_named(project):
    (project / "outputs/sst2/evaluation_results.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"outputs/sst2/evaluation_results.json is not valid JSON"):
        run(project)


def test_a_training_summary_without_a_duration_is_named(project):
    write_json(project / "outputs/sst2/all_results.json", {"epoch": 1.0, "train_runtime": "11 min"})
    with pytest.raises(ValueError, match=r"Training summary .*outputs/sst2/all_results.json: no `wall_seconds`"):
        run(project)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("hardware"), r"recipe 1 \(Multi30k en->de\): `hardware` is missing or not text"),
        (lambda r: r.update(hardwear="x"), r"recipe 1 \(Multi30k en->de\): unknown field\(s\) \['hardwear'\]"),
        (lambda r: r.update(task="mt"), r"`task` is 'mt'; expected one of"),
        (lambda r: r.update(goal={"metric": "tokenized_bleu"}), r"`goal` must be \{metric: TYPE, at_least: NUMBER\}"),
        (lambda r: r.update(metrics="tokenized_bleu"), r"`metrics` must be a list of metric types"),
        # a name of an older version, which meant two things, is not guessed at: the error names the rewrite
        (lambda r: r.update(goal={"metric": "bleu", "at_least": 35}), r"\(Multi30k en->de\): `bleu` is a retired "
         r"metric name \(it meant sacrebleu in training and tokenized_bleu in results files and recipes\): use "
         r"sacrebleu or tokenized_bleu; python scripts/tools/results_table.py --rename_metrics rewrites the file\.$"),
        (lambda r: r.update(metrics=["sacrebleu", "bleu"]), r"`bleu` is a retired metric name"),
        # `f1` is text classification's: token classification's entity F1 is `entity_f1`
        (lambda r: r.update(task="token-classification", metrics=["entity_f1", "recall"]),
         r"\(Multi30k en->de\): `recall` is a retired metric name of token-classification \(it meant entity_recall\): "
         r"use entity_recall; python scripts/tools/results_table.py --rename_metrics rewrites the file\.$"),
        (lambda r: r.update(task="token-classification", goal={"metric": "f1", "at_least": 0.8}),
         r"`f1` is a retired metric name of token-classification \(it meant entity_f1\): use entity_f1"),
        # the prose and the other runs live in the notes file
        (lambda r: r.update(notes="Average of the last 5."), r"\(Multi30k en->de\): `notes` no longer go in the recipes "
         r"file: write them in the recipe's notes file \(results/<recipe>/notes.md\) and name it with `notes_file`"),
        (lambda r: r.update(experiments=[{"change": "seed"}]), r"`experiments` no longer go in the recipes file"),
        (lambda r: r.update(notes_file=["a.md"]), r"`notes_file` must be text"),
        (lambda r: r.update(notes_file="results/en_de/NOTES.md"),
         r"Recipe 'Multi30k en->de': `notes_file` names results/en_de/NOTES.md, which does not exist"),
        (lambda r: r.update(training_summary=["outputs/en_de/summary.json", 3]),
         r"`training_summary` must be a file, or a list of files \(one a stage\), as text"),
        (lambda r: r.update(training_summary=[]), r"`training_summary` must be a file, or a list of files"),
    ],
)
def test_a_bad_recipe_is_named_with_its_field(project, change, message):
    recipes = json.loads(json.dumps(RECIPES))
    change(recipes["recipes"][0])
    (project / "recipes.yaml").write_text(yaml.safe_dump(recipes), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        run(project)


def test_a_file_without_the_markers_is_refused(project):
    (project / "README.md").write_text("# No markers here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"README.md needs the markers {START} and {END}"):
        run(project)
    assert (project / "README.md").read_text(encoding="utf-8") == "# No markers here\n"


def test_the_repository_recipes_name_files_that_exist():
    recipes = load_recipes(REPO / "scripts/configs/recipes.yaml")
    assert [recipe.name for recipe in recipes] == [
        "Multi30k en->de", "Multi30k en->de, one GPU", "Multi30k de->en", "AESLC", "AESLC, first sentence (no model)",
        "SST-2", "CoNLL-2003", "SAMSum", "SAMSum, first 3 utterances (no model)",
        "SAMSum, longest 3 utterances (no model)",
    ]
    for recipe in recipes:
        for script in re.findall(r"scripts/\S+\.py", recipe.command):
            assert (REPO / script).is_file(), f"{recipe.name}: {script} does not exist"
        for config in re.findall(r"--config (\S+)", recipe.command):
            assert (REPO / config).is_file(), f"{recipe.name}: {config} does not exist"
        # the numbers are kept in the repository (results/), the weights are not (outputs/ is git-ignored)
        assert recipe.results.endswith("evaluation_results.json") and recipe.results.startswith("results/")
        assert recipe.results in recipe.command
        for summary in recipe.training_summaries:
            assert summary in recipe.command, f"{recipe.name}: {summary} is not written by its command"
        if recipe.notes_file:
            assert (REPO / recipe.notes_file).is_file(), f"{recipe.name}: {recipe.notes_file} does not exist"
    # the repository's tables are up to date with the recipes and their files
    tables = ["README.md", "results/README.md"]
    assert results_table.main(["--root", str(REPO), "--check", "--files", *tables]) == 0


def test_the_readme_gets_a_short_table_and_a_file_in_a_subfolder_links_through_the_root(project):
    """README.md holds a short table (recipe-table markers): recipe, data, result, target met, and links to the
    recipe's section of results/README.md and to its notes; results/README.md the table with every column and every
    recipe's section, its links reaching the repository root through ../."""
    recipes = json.loads(json.dumps(RECIPES))
    recipes["recipes"][0]["model"] = "results/en_de/model"
    (project / "recipes.yaml").write_text(yaml.safe_dump(recipes, sort_keys=False), encoding="utf-8")
    write_json(project / "results/en_de/model/config.json", {"model_type": "vaswani"})
    (project / "README.md").write_text(f"{BEFORE}{TABLE_START}\nOLD\n{TABLE_END}{AFTER}", encoding="utf-8")
    (project / "results" / "README.md").write_text(f"# results\n\n{START}\n{END}\n", encoding="utf-8")
    assert run(project, files=("README.md", "results/README.md")) == 0
    readme = (project / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index(TABLE_START): readme.index(TABLE_END)]
    full = block_of(project / "results" / "README.md")
    assert table_rows(table) and table_rows(table).keys() == table_rows(full).keys()
    assert "```bash" not in table and "```bash" in full  # the commands are in the details only
    assert table_rows(table) == {
        "recipe": "| recipe | data, split | result | target met? | details |",
        "Multi30k en->de": "| Multi30k en->de | bentrevett/multi30k, test_2016_flickr "
        "| BLEU (tokenized, lowercased) 38.17; sacreBLEU 35.21 | yes (tokenized_bleu 38.17 ≥ 35) "
        "| [commands](results/README.md#multi30k-en-de), [notes](results/en_de/notes.md) |",
        "SST-2": "| SST-2 | stanfordnlp/sst2, validation | Accuracy 0.7654; F1 (binary) 0.7781 | no (accuracy 0.7654 < 0.8) "
        "| [commands](results/README.md#sst-2) |",
        "AESLC": "| AESLC | AESLC, validation | not run yet | not run yet | [commands](results/README.md#aeslc) |",
    }
    # each anchor is the one GitHub gives the recipe's heading in results/README.md
    headings = re.findall(r"^### (.+)$", full, flags=re.MULTILINE)
    assert headings == ["Multi30k en->de", "SST-2", "AESLC"]
    assert [anchor(heading) for heading in headings] == ["multi30k-en-de", "sst-2", "aeslc"]
    assert "[results/en_de/model](../results/en_de/model)" in full
    assert "[results/en_de/notes.md](../results/en_de/notes.md)" in full
    assert run(project, "--check", files=("README.md", "results/README.md")) == 0


def test_a_file_without_either_marker_pair_is_named(project):
    (project / "NOTES.md").write_text("no markers here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"NOTES.md needs the markers .*recipe-results:start.* or .*recipe-table:start"):
        run(project, files=("NOTES.md",))


# --rename_metrics: files of the repository's own layout as an older version wrote them (`bleu` for two meanings;
# `f1`, `precision`, `recall` for token classification's entity scores), made from the committed files by undoing the
# renames, with what each held instead
OLDER_VERSIONS = {
    # metrics and goals: the results files' BLEU, the entity scores (SST-2's `f1` stays)
    "scripts/configs/recipes.yaml": [("tokenized_bleu", "bleu"), ("entity_", "")],
    "results/multi30k_en_de/evaluation_results.json": [('"tokenized_bleu"', '"bleu"')],
    "results/multi30k_en_de/training_summary.json": [('"best_metric": "sacrebleu"', '"best_metric": "bleu"')],
    "results/multi30k_en_de/model/README.md": [("tokenized_bleu", "bleu")],  # the card's metadata
    "results/benchmark/gpu_suite.json": [('"tokenized_bleu"', '"bleu"')],  # the recipe's scores, from a results file
    "results/conll2003/evaluation_results.json": [('"entity_', '"')],
    "results/conll2003/model/README.md": [("- entity_", "- "), ("type: entity_", "type: ")],
}
# files the command leaves as they are: no retired name, or a file no tool reads (a sweep's numbers, here as an older
# version wrote them: named as left)
UNTOUCHED = ["results/sst2/evaluation_results.json", "results/samsum/training_summary.json",
             "results/multi30k_en_de_gpu/sweep_h200.json"]
LEFT_AS_WRITTEN = {"results/multi30k_en_de_gpu/sweep_h200.json": [('"tokenized_bleu"', '"bleu"')]}


def older_copy(root):
    """A copy of the repository's recipes and some of their files under `root`, the renamed ones as an older version
    wrote them, with the notes and model folders the recipes name; returns the committed texts."""
    committed = {}
    for path in [*OLDER_VERSIONS, *UNTOUCHED]:
        committed[path] = (REPO / path).read_text(encoding="utf-8")
        older = committed[path]
        if path in OLDER_VERSIONS or path in LEFT_AS_WRITTEN:
            for new, old in {**OLDER_VERSIONS, **LEFT_AS_WRITTEN}[path]:
                assert new in older, f"{path} holds no {new}"
                older = older.replace(new, old)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(older, encoding="utf-8")
    for recipe in yaml.safe_load(committed["scripts/configs/recipes.yaml"])["recipes"]:
        for needed in filter(None, (recipe.get("notes_file"), recipe.get("model") and f"{recipe['model']}/config.json")):
            (root / needed).parent.mkdir(parents=True, exist_ok=True)
            (root / needed).write_text("{}" if needed.endswith(".json") else "notes\n", encoding="utf-8")
    (root / "README.md").write_text(f"{TABLE_START}\n{TABLE_END}\n", encoding="utf-8")
    return committed


def rename_command(root, *extra):
    return command_in_process(REPO / "scripts/tools/results_table.py",
                              ["--root", root, "--files", "README.md", "--rename_metrics", *extra])


def test_rename_metrics_rewrites_an_older_versions_files_to_the_committed_ones(tmp_path):
    """Each retired name becomes what it meant where it stands (tokenized BLEU in results files, recipes, cards and
    the GPU suite's recipe scores; sacreBLEU in a training summary; the entity scores where token classification's
    `f1`, `precision`, `recall` stand, text classification's `f1` kept), every other byte as it was: from the files
    an older version wrote, the command makes exactly the repository's. --check names them and writes nothing."""
    committed = older_copy(tmp_path)
    older = {path: (tmp_path / path).read_text(encoding="utf-8") for path in committed}
    checked = rename_command(tmp_path, "--check")
    assert checked.returncode == 1
    named = ["scripts/configs/recipes.yaml", *sorted(path for path in OLDER_VERSIONS if path.startswith("results/"))]
    assert checked.stderr == (f"Retired metric names in: {', '.join(named)}. Run: python "
                              "scripts/tools/results_table.py --rename_metrics\n")
    assert "Left as written (not a file the results tables, the cards or the tools read): " \
           "results/multi30k_en_de_gpu/sweep_h200.json" in checked.stdout
    assert {path: (tmp_path / path).read_text(encoding="utf-8") for path in committed} == older

    renamed = rename_command(tmp_path)
    assert renamed.returncode == 0, renamed.stderr
    assert {path: (tmp_path / path).read_text(encoding="utf-8") for path in committed} == {
        path: older[path] if path in LEFT_AS_WRITTEN else text for path, text in committed.items()}
    assert "results/multi30k_en_de/training_summary.json (training summary)" in renamed.stdout
    # then the tables, from the renamed files
    rows = table_rows((tmp_path / "README.md").read_text())
    assert "| yes (tokenized_bleu 41.43 ≥ 41) |" in rows["Multi30k en->de"]
    assert "| yes (entity_f1 0.8172 ≥ 0.8) |" in rows["CoNLL-2003"]
    assert rename_command(tmp_path, "--check").returncode == 0


def test_without_rename_metrics_an_older_recipes_file_is_refused_naming_the_command(tmp_path):
    older_copy(tmp_path)
    result = command_in_process(REPO / "scripts/tools/results_table.py", ["--root", tmp_path, "--files", "README.md"])
    assert result.returncode == 2
    assert result.stderr.endswith("`bleu` is a retired metric name (it meant sacrebleu in training and tokenized_bleu "
                                  "in results files and recipes): use sacrebleu or tokenized_bleu; python "
                                  "scripts/tools/results_table.py --rename_metrics rewrites the file.\n")


def test_a_retired_name_the_command_cannot_rewrite_in_place_is_named_and_nothing_is_written(project):
    """A recipes file laid out otherwise (a list one item a line) would need its YAML written anew, comments lost:
    the command says to rename by hand instead of guessing."""
    recipes = json.loads(json.dumps(RECIPES))
    recipes["recipes"][0]["metrics"] = ["bleu", "sacrebleu"]
    text = yaml.safe_dump(recipes, sort_keys=False)
    (project / "recipes.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"recipes\.yaml: its retired metric names \(bleu, f1, precision, recall\) stand where this command "
                                         r"does not rewrite them; rename them by hand"):
        run(project, "--rename_metrics")
    assert (project / "recipes.yaml").read_text(encoding="utf-8") == text


def test_no_results_file_of_the_repository_holds_the_retired_name():
    """`bleu` meant two numbers; every JSON file under results/ names each by its own name (the GPU sweeps' logged
    training lines included)."""
    holding = [str(path.relative_to(REPO)) for path in sorted((REPO / "results").rglob("*.json"))
               if '"bleu"' in path.read_text(encoding="utf-8").replace('\\"', '"')]
    assert holding == []


def test_the_repository_names_token_classifications_entity_scores_as_such():
    """`f1` is text classification's; token classification's results files, recipes, cards and training summaries
    name its entity scores `entity_f1`, `entity_precision`, `entity_recall` (the Trainer's `eval_entity_f1`, ...)."""
    assert rename_command(REPO, "--check").returncode == 0
    conll = REPO / "results/conll2003"
    assert [m["type"] for m in json.loads((conll / "evaluation_results.json").read_text())["metrics"]] == [
        "entity_f1", "entity_precision", "entity_recall", "accuracy"]
    summary = json.loads((conll / "training_summary.json").read_text())
    assert {"eval_entity_f1", "eval_entity_precision", "eval_entity_recall"} <= set(summary)
    assert not {"eval_f1", "eval_precision", "eval_recall"} & set(summary)
    assert [m["type"] for m in json.loads((REPO / "results/sst2/evaluation_results.json").read_text())["metrics"]] == [
        "accuracy", "f1"]
