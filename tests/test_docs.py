"""The project's Markdown guides hold together: every relative link (and its #anchor) leads somewhere, and the README's
set-up commands are the ones CI runs."""

import re
from pathlib import Path

import pytest

from conftest import REPO


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
