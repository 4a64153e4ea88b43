"""The project's Markdown guides hold together: every relative link (and its #anchor) leads somewhere, and the README's
set-up commands are the ones CI runs."""

import re
import subprocess
from pathlib import Path

import pytest

from helpers import REPO


GUIDES = sorted(
    {
        REPO / "README.md",
        REPO / "model_card.md",
        *(REPO / folder / "README.md" for folder in ("modeling", "scripts", "results", "results/benchmark")),
        *(REPO / "results").glob("*/notes.md"),
    }
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The Markdown without code blocks, inline code and comments, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


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


@pytest.mark.parametrize("guide", GUIDES, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(guide):
    broken = []
    for target in LINK.findall(prose(guide.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (guide.parent / path) if path else guide
        if not resolved.exists():
            broken.append(f"{target} (no {resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading with that anchor)")
    assert not broken, f"{guide.relative_to(REPO)}: broken links: {broken}"


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
    """The English sentences vaswani/training/synthetic.py writes, as one pattern."""
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
