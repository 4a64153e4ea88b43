"""The project's Markdown holds together: every relative link (and its #anchor) and every repository path or
`vaswani.` module it cites in code leads somewhere, and the README's set-up commands are the ones CI runs."""

import ast
import itertools
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers import REPO


# every Markdown file of the repository: the guides, the card template, each recipe's notes, the benchmark's runs and
# the cards rendered into the shipped model folders (they cite the recipe's commands)
MARKDOWN = sorted(
    {REPO / "README.md", REPO / "model_card.md"}
    | {path for folder in ("modeling", "pipelines", "scripts", "tests", "results")
       for path in (REPO / folder).rglob("*.md")
       if not any(part.startswith(".") for part in path.relative_to(REPO).parts)}
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", flags=re.DOTALL)
# a path in code: characters of file names, globs and brace lists, with at least one slash
PATH = re.compile(r"(?<![\w./$~-])[\w.*{},-]+/[\w./*{},-]*")
# a placeholder in a path: scripts/NAME.py, results/<recipe>/..., scripts/finetune_....py, ${path}
PLACEHOLDER = re.compile(r"\.\.\.|[<>$]|(?:^|/)[A-Z][A-Z_]*[A-Z](?=\.py$|/|$)")
MODULE = re.compile(r"(?<![\w.])vaswani(?:\.[A-Za-z_]\w*)+(?![\w(])")
# the repository's top-level folders a path may start from (results/... in a command means the repository's)
TOP_LEVEL = ("modeling", "pipelines", "scripts", "tests", "results", ".ci")


def blanked(text: str, pattern: re.Pattern) -> str:
    """The text with each match of `pattern` replaced by spaces, its line breaks kept (so line numbers stay)."""
    return pattern.sub(lambda match: re.sub(r"[^\n]", " ", match.group()), text)


def prose(text: str) -> str:
    """The Markdown without code blocks, inline code and comments, where brackets are not links; lines kept."""
    return blanked(blanked(blanked(text, CODE_BLOCK), COMMENT), INLINE_CODE)


def code(text: str) -> str:
    """The Markdown's code alone (code blocks and inline code, not inside comments); lines kept."""
    text = blanked(text, COMMENT)
    kept = [False] * len(text)
    for match in itertools.chain(CODE_BLOCK.finditer(text), INLINE_CODE.finditer(blanked(text, CODE_BLOCK))):
        kept[match.start():match.end()] = [True] * (match.end() - match.start())
    return "".join(character if keep or character == "\n" else " " for character, keep in zip(text, kept))


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (lowercased, punctuation dropped but hyphens and
    underscores, spaces made hyphens; a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", prose(path.read_text(encoding="utf-8")), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
    return found


def expanded(path: str) -> list[str]:
    """A path with `{a,b}` brace lists, as the shell expands it."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [expanded_path for choice in match.group(1).split(",")
            for expanded_path in expanded(path[:match.start()] + choice + path[match.end():])]


def missing_path(cited: str, folder: Path) -> str | None:
    """Why a path cited in the code of a file in `folder` leads nowhere, or None where it exists or is not a path of
    this repository (a folder a command creates, another machine's, ../shared, a placeholder)."""
    cited = cited.rstrip(".,:;")
    if PLACEHOLDER.search(cited):
        return None
    first = cited.split("/", 1)[0]
    if first == "vaswani":  # the import package's name, not a folder of the checkout
        rest = cited.split("/", 1)[1]
        return f"no folder vaswani/ in the repository: the package's sources are in modeling/{rest}" if rest else None
    if first in TOP_LEVEL:
        base = REPO
    elif first not in (".", "..") and (folder / first).is_dir():  # scripts/README.md's tools/..., configs/...
        base = folder
    else:
        return None
    for path in expanded(cited):
        if "*" in path:
            if not any(base.glob(path)):
                return f"nothing matches {(base / path).relative_to(REPO)}"
        elif not (base / path).exists():
            return f"no {(base / path).relative_to(REPO)}"
    return None


def missing_module(dotted: str) -> str | None:
    """Why a `vaswani.` name (a module, or a name defined in one) leads nowhere, or None."""
    parts = dotted.split(".")[1:]
    folder = REPO / "modeling"
    if parts[0] == "pipelines":
        folder, parts = REPO / "pipelines", parts[1:]
    module, rest = folder / "__init__.py", []
    for index, part in enumerate(parts):
        if (folder / part).is_dir():
            folder, module = folder / part, folder / part / "__init__.py"
        elif (folder / f"{part}.py").is_file():
            module, rest = folder / f"{part}.py", parts[index + 1:]
            break
        else:
            rest = parts[index:]
            break
    if not module.is_file():
        return f"no module {module.relative_to(REPO)}"
    if rest and not re.search(rf"\b{re.escape(rest[0])}\b", module.read_text(encoding="utf-8")):
        if module.name == "__init__.py":
            return f"no module {(folder / rest[0]).relative_to(REPO)}.py, nor {rest[0]} in {module.relative_to(REPO)}"
        return f"{module.relative_to(REPO)} defines no {rest[0]}"
    return None


def where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(REPO)}:{line_of(text, offset)}"


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for match in LINK.finditer(prose(text)):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path) if path else page
        if not resolved.exists():
            shown = resolved.resolve().relative_to(REPO) if resolved.resolve().is_relative_to(REPO) else resolved
            broken.append(f"{where(page, text, match.start())}: {target} (no {shown})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where(page, text, match.start())}: {target} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_path_and_module_the_markdown_cites_in_code_exists():
    """A path of the repository in a Markdown file's code (`scripts/tools/benchmark.py`, a command's
    `--config scripts/configs/quickstart.yaml`, `tools/...` relative to the file's folder, globs and {a,b} lists) and
    each `vaswani.` module or name it cites exist, so that moving a file shows every page that still names the old
    place. Folders a command creates (outputs/, runs/ of the user's), ../shared and placeholders are not checked."""
    missing = []
    for page in MARKDOWN:
        text = page.read_text(encoding="utf-8")
        cited = code(text)
        for match in PATH.finditer(cited):
            why = missing_path(match.group(), page.parent)
            if why:
                missing.append(f"{where(page, text, match.start())}: `{match.group()}` ({why})")
        for match in MODULE.finditer(cited):
            why = missing_module(match.group())
            if why:
                missing.append(f"{where(page, text, match.start())}: `{match.group()}` ({why})")
    assert not missing, f"{len(missing)} paths the Markdown cites do not exist:\n" + "\n".join(missing)


def test_every_path_and_module_a_test_file_says_it_covers_exists():
    """Each test file's docstring opens with what it covers (the README's Tests section): the paths and `vaswani.`
    modules of that first paragraph exist, so that a moved module shows the tests that still name its old place."""
    missing = []
    for test_file in sorted((REPO / "tests").rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(test_file.read_text(encoding="utf-8")), clean=False) or ""
        first = docstring.split("\n\n", 1)[0]
        for match in itertools.chain(PATH.finditer(first), MODULE.finditer(first)):
            check = missing_module if match.re is MODULE else (lambda cited: missing_path(cited, test_file.parent))
            why = check(match.group())
            if why:
                line = 1 + first.count("\n", 0, match.start())  # the docstring opens each test file
                missing.append(f"{test_file.relative_to(REPO)}:{line}: {match.group()} ({why})")
    assert not missing, f"{len(missing)} paths the test files' first lines cite do not exist:\n" + "\n".join(missing)


def test_ci_runs_the_readme_test_command():
    """.ci/run runs, on a clean checkout, exactly the README's second set-up command."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    set_up = readme[readme.index("## Set up"):].split("\n## ", 1)[0]
    commands = re.findall(r"^```bash\n(.*?)\n```", set_up, flags=re.MULTILINE | re.DOTALL)
    assert len(commands) == 2 and commands[1].endswith("-m pytest -q"), commands
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[1] in ci


def test_the_library_asks_for_ranges_and_only_the_install_commands_pin_torch():
    """Installing the package into an existing environment keeps the user's torch (CUDA build included): the
    library's dependencies are ranges, and the exact torch of these machines comes from constraints.txt, which the
    README's set-up commands and CI pass to pip."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    pinned = [requirement for requirement in dependencies if "==" in requirement]
    assert not pinned, f"pyproject.toml pins {pinned}: give a range, and pin in constraints.txt"
    assert any(re.fullmatch(r"torch>=[\d.]+", requirement) for requirement in dependencies), dependencies
    constraints = (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
    assert "torch==2.13.0" in constraints
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    set_up = readme[readme.index("## Set up"):].split("\n## ", 1)[0]
    commands = re.findall(r"^```bash\n(.*?)\n```", set_up, flags=re.MULTILINE | re.DOTALL)
    assert commands and all("pip install -c constraints.txt " in command for command in commands), commands


def toy_grammar() -> re.Pattern:
    """The English sentences modeling/training/synthetic.py writes, as one pattern."""
    from vaswani.training import synthetic

    def one_of(words) -> str:
        return "(?:" + "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True)) + ")"

    def noun_phrase(nouns) -> str:
        return rf"(?:the|an?)(?: {one_of(synthetic.ADJECTIVES)})? {one_of(nouns)}"

    predicate = (rf"(?:{one_of(synthetic.TRANSITIVE_VERBS)} {noun_phrase(synthetic.OBJECTS)}"
                 rf"|{one_of(synthetic.INTRANSITIVE_VERBS)})")
    return re.compile(rf"(?:{one_of(synthetic.ADVERBS)} )?{noun_phrase(synthetic.NOUNS)} {predicate}"
                      rf"(?: {one_of(synthetic.PLACES)})?\.")


def test_the_quickstart_translates_sentences_of_the_toy_grammar():
    """The quick start's model knows only the toy task: a sentence outside its grammar comes out wrong. The quick start
    is in README.md (scripts/README.md links to it)."""
    # the quick start's call is the one with single-quoted sentences (other examples use double quotes)
    [call] = re.findall(r"translator\(\[('.*?)\]\)", (REPO / "README.md").read_text(encoding="utf-8"))
    sentences = re.findall(r"'([^']*)'", call)
    assert sentences
    grammar = toy_grammar()
    for sentence in sentences:
        assert grammar.fullmatch(sentence[0].lower() + sentence[1:]), f"{sentence!r} is not a sentence of the toy task"



def test_the_quickstart_says_what_its_command_gives_on_a_fresh_clone():
    """The quick start's statement gives the sacreBLEU of every validation its config runs (each `eval_steps` updates
    up to `max_steps`), `best` at the highest, and a translation for each sentence its call translates: it promised
    100.0, where a fresh clone gives 99.60 at its best and prints "Eine Mann mag eine Frau am See."."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [statement] = re.findall(r"^On a fresh clone .*?\n\n", readme, flags=re.MULTILINE | re.DOTALL)
    statement = " ".join(statement.split())
    config = yaml.safe_load((REPO / "scripts/configs/quickstart.yaml").read_text(encoding="utf-8"))
    scores = {int(update): float(score) for score, update in re.findall(r"(\d+\.\d+) at update (\d+)", statement)}
    assert sorted(scores) == list(range(config["eval_steps"], config["max_steps"] + 1, config["eval_steps"]))
    best = max(scores, key=scores.get)
    assert f"{scores[best]:.2f} at update {best} (`best`" in statement
    [call] = re.findall(r"translator\(\[('.*?)\]\)", readme)
    printed = re.findall(r"`([A-ZÄÖÜ][^`]*[.!?])`", statement.split(" it prints ", 1)[-1])
    assert len(printed) == len(re.findall(r"'([^']*)'", call)), statement

def test_the_readme_trains_evaluates_and_serves_near_the_top_and_its_evaluation_says_what_its_command_gives():
    """The section after the set-up shows a train, an evaluate and a serve command. The evaluate command is the
    shipped en->de model's slice evaluation (its data, sample count and decoding are those of the slice results file,
    which tests/test_shipped_models.py reproduces from the folder), and the scores the README gives are that file's."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sections = readme.split("\n## ")
    assert sections[1].startswith("Set up") and sections[2].startswith("Train, evaluate, serve"), sections[2][:40]
    commands = re.findall(r"^```bash\n(.*?)\n```", sections[2], flags=re.MULTILINE | re.DOTALL)
    [train] = [command for command in commands if "scripts/train.py" in command]
    [evaluate] = [command for command in commands if "scripts/evaluate_model.py" in command]
    [serve] = [command for command in commands if "scripts/app.py" in command]
    assert "--config scripts/configs/quickstart.yaml" in train and serve.startswith(".venv/bin/python scripts/app.py")
    words = shlex.split(evaluate.replace("\\\n", " "))
    options = dict(zip(words[2::2], words[3::2]))
    assert options["--model"] == "results/multi30k_en_de/model" and options["--output_file"].startswith("outputs/")
    results = json.loads((REPO / "results/multi30k_en_de/evaluation_results_first100.json").read_text(encoding="utf-8"))
    assert results["dataset"]["num_examples"] == int(options["--max_eval_samples"])
    assert Path(options["--test_file"]).stem == results["dataset"]["split"]
    assert {key: float(options[f"--{key}"]) for key in results["decoding"]} == results["decoding"]
    stated = re.findall(r"sacreBLEU (\d+\.\d+) and tokenized BLEU (\d+\.\d+)", sections[2])
    assert stated and {float(value) for value in stated[0]} <= {metric["value"] for metric in results["metrics"]}, (
        f"README.md gives {stated}; the results file: {results['metrics']}")


def test_the_demos_outputs_are_named_in_the_readme_and_ignored_by_git():
    """The first command of the README writes attention.png and attention.json into the clone: both are named where
    the README shows what it prints, and git leaves them out of `git status`."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "attention.png" in text and "attention.json" in text
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "attention.png", "attention.json"],
                             capture_output=True, text=True, timeout=60)
    assert ignored.stdout.split() == ["attention.png", "attention.json"]


@pytest.mark.parametrize("name", ["README.md", "model_card.md"])
def test_the_readme_and_the_card_template_stay_short(name):
    """What the project is and what a card says, each under 15 KB: the details live in the guides they link to."""
    size = len((REPO / name).read_bytes())
    assert size < 15_000, f"{name} is {size:,} bytes; say it once, in the guide whose job it is, and link to it"


GUIDES = ["scripts/README.md", "scripts/training.md", "scripts/evaluation.md", "scripts/serving.md",
          "scripts/tools/README.md", "results/benchmark/README.md", "modeling/README.md"]


@pytest.mark.parametrize("name", GUIDES)
def test_each_guide_stays_under_25_kb(name):
    """A guide says how to use and what is, with the current tables; the history of runs lives in
    results/benchmark/runs/ and the recipes' notes."""
    size = len((REPO / name).read_bytes())
    assert size < 25_000, f"{name} is {size:,} bytes: split it by topic, or move history to a run's file"


def test_scripts_and_test_files_stay_short():
    """A script is a thin entry point (at most 150 lines: its logic in the package); a test file one subject (at most
    700 lines)."""
    scripts = [*(REPO / "scripts").glob("*.py"), *(REPO / "scripts" / "tools").glob("*.py")]  # (not their modules)
    long_scripts = {str(path.relative_to(REPO)): n for path in sorted(scripts)
                    if (n := len(path.read_text(encoding="utf-8").splitlines())) > 150}
    long_tests = {str(path.relative_to(REPO)): n for path in sorted((REPO / "tests").rglob("*.py"))
                  if (n := len(path.read_text(encoding="utf-8").splitlines())) > 700}
    assert long_scripts == {} and long_tests == {}
