"""The documentation site as readers see it: built once per test session with ``mkdocs build
--strict`` (as scripts/check does), then the setup pages' HTML is read. Python-Markdown
keeps a numbered list together only when what a step holds (a code block, a second
paragraph) is indented four spaces; with three, the list breaks into pieces that each
restart at 1 (the Slack page once read 1, 1, 2, 3, 4, 5, 1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SETUP_PAGES = ("slack", "discord")
VOID = {"br", "img", "hr", "input", "meta", "link", "wbr", "source", "col", "area", "base"}


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the session (about 2 s)."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    return out


@dataclass
class TopList:
    """A numbered list of the page's article that is not inside another list."""

    section: str
    start: str | None
    items: list[str] = field(default_factory=list)


class Lists(HTMLParser):
    """The article's top-level ``<ol>``\\ s, each with its section (the last ``<h2>``'s id)
    and the text of each of its items (code blocks included)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.section = ""
        self.lists: list[TopList] = []
        self.in_article = False
        self._list_depth: int | None = None  # stack depth of the open top-level <ol>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        if tag == "article":
            self.in_article = True
        if self.in_article and tag == "h2":
            self.section = dict(attrs).get("id") or ""
        if self.in_article and tag == "ol" and "ol" not in self.stack and "ul" not in self.stack:
            self.lists.append(TopList(self.section, dict(attrs).get("start")))
            self._list_depth = len(self.stack) + 1
        self.stack.append(tag)
        if tag == "li" and self._list_depth is not None and len(self.stack) == self._list_depth + 1:
            self.lists[-1].items.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or tag not in self.stack:
            return
        while self.stack:
            top = self.stack.pop()
            if self._list_depth is not None and len(self.stack) < self._list_depth:
                self._list_depth = None
            if top == tag:
                break
        if tag == "article":
            self.in_article = False

    def handle_data(self, data: str) -> None:
        if self._list_depth is not None and self.lists and self.lists[-1].items:
            self.lists[-1].items[-1] += data


def top_lists(site: Path, page: str) -> list[TopList]:
    parser = Lists()
    parser.feed((site / page / "index.html").read_text(encoding="utf-8"))
    return parser.lists


def numbered_steps(page: str) -> dict[str, list[int]]:
    """The numbers of each section's top-level steps in the Markdown (``1. ...`` at the
    start of a line), by the section's heading made an id as the site makes it."""
    steps: dict[str, list[int]] = {}
    section = ""
    fenced = False
    for line in (REPO_ROOT / "docs" / f"{page}.md").read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        if line.startswith("## "):
            section = re.sub(r"[^\w\- ]", "", line[3:].lower()).strip().replace(" ", "-")
        elif found := re.match(r"(\d+)\. ", line):
            steps.setdefault(section, []).append(int(found[1]))
    return steps


@pytest.mark.parametrize("page", SETUP_PAGES)
def test_each_setup_list_renders_as_one_list_numbered_1_to_n(site: Path, page: str) -> None:
    steps = numbered_steps(page)
    assert steps, f"docs/{page}.md has no numbered steps"
    rendered = top_lists(site, page)
    for section, numbers in steps.items():
        assert numbers == list(range(1, len(numbers) + 1)), (page, section, numbers)
        lists = [ol for ol in rendered if ol.section == section]
        shape = [(ol.start, len(ol.items)) for ol in lists]
        assert shape == [(None, len(numbers))], f"{page}#{section} renders as {shape}"


def test_the_slack_setup_names_what_to_clone_the_yaml_tab_and_starts_in_a_step(
    site: Path,
) -> None:
    (setup,) = [
        ol for ol in top_lists(site, "slack") if ol.section == "from-nothing-to-a-running-bot"
    ]
    assert "git clone" in setup.items[0] and "<this repository>" not in setup.items[0]
    assert "SelfMind repository" in setup.items[0]
    manifest = next(item for item in setup.items if "From a manifest" in item)
    assert "YAML tab" in " ".join(manifest.split())
    start = [item for item in setup.items if item.lstrip().startswith("Start the bot")]
    assert len(start) == 1 and "selfmind slack\n" in start[0]
    assert "revoke" not in start[0]  # the start command is not buried under revocation


def test_the_discord_setup_starts_the_bot_in_its_own_step(site: Path) -> None:
    (setup,) = [
        ol for ol in top_lists(site, "discord") if ol.section == "from-nothing-to-a-running-bot"
    ]
    assert "git clone" in setup.items[0]
    start = [item for item in setup.items if item.lstrip().startswith("Start the bot")]
    assert len(start) == 1 and "selfmind discord\n" in start[0]


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_how_to_build_the_site_says_to_install_the_dev_extra_first(page: str) -> None:
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    install = text.index("pip install -c constraints.txt -e '.[dev]'\nmkdocs serve")
    assert install >= 0
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dev = pyproject[pyproject.index("dev = [") :]
    assert '"mkdocs' in dev[: dev.index("]")]  # what serve needs is in the dev extra
