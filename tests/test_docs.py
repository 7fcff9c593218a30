"""The README is a front page that points into docs/ (built by ``mkdocs build --strict`` in
scripts/check, which checks the links between pages); these check what MkDocs does not see:
the README's own length, links and first-screen commands."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
TRY_IT = (
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ."
    " && .venv/bin/selfmind chat"
)
TEST_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate"
    " && pip install -c constraints.txt -e '.[dev]' && scripts/check"
)


def slug(heading: str) -> str:
    """Python-Markdown's toc slug: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text)


def test_readme_is_a_front_page() -> None:
    assert README.count("\n") <= 300


def test_readme_first_screen_commands_and_ci_use_the_same_test_command() -> None:
    first_screen = "\n".join(README.splitlines()[:40])
    assert TRY_IT in first_screen
    assert TEST_COMMAND in first_screen
    assert TEST_COMMAND in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in (REPO_ROOT / "scripts" / "check").read_text()


def test_the_constraints_pin_every_dependency_exactly() -> None:
    """constraints.txt (the lock the README's commands and CI install with) names every
    package pyproject.toml depends on, each at one exact version (torch aside: its CPU build
    is installed first, by hand or by .ci/run)."""
    import tomllib

    pins: dict[str, str] = {}
    for line in (REPO_ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version and " " not in version, line
            pins[re.sub(r"[-_.]+", "-", name.lower())] = version
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        wanted += extra
    for requirement in wanted:
        name = re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0]
        key = re.sub(r"[-_.]+", "-", name.lower())
        assert key == "torch" or key in pins, f"{name} is not in constraints.txt"
    assert "torch" not in pins
    assert "constraints.txt" in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_links_reach_files_and_headings() -> None:
    links = re.findall(r"\]\(([^)]+)\)", README)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = REPO_ROOT / path
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(h) for h in headings}, link


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (REPO_ROOT / "docs").glob("*.md"):
        assert f" {page.name}\n" in nav, page.name


def test_the_configuration_reference_is_the_settings_class() -> None:
    """docs/configuration.md's table is what scripts/settings_reference.py makes from
    core/settings.py and .env.example: a setting added, renamed or given a new default
    without rerunning the script fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "settings_reference", REPO_ROOT / "scripts" / "settings_reference.py"
    )
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    page = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == reference.page_with_table(page), (
        "docs/configuration.md is out of date: run python scripts/settings_reference.py"
    )
    from core.settings import Settings, env_name

    for field in Settings.model_fields:
        assert f"| `{env_name(field)}` |" in page


def test_the_privacy_table_is_the_place_rule() -> None:
    """docs/privacy.md's "where learned x where asked" table says exactly what
    core.rules.places.usable decides (the one rule)."""
    from core.rules.places import usable
    from core.types import Place

    learned = {
        "your DM with the bot (or the terminal)": Place("slack", "dm", "T1", "D1"),
        "a group DM": Place("slack", "group_dm", "T1", "G1"),
        "a private channel": Place("slack", "private_channel", "T1", "C2"),
        "a public channel of workspace W": Place("slack", "public_channel", "T1", "C1"),
    }
    asked = [
        Place("slack", "dm", "T1", "D1"),
        Place("slack", "group_dm", "T1", "G1"),
        Place("slack", "group_dm", "T1", "G9"),
        Place("slack", "private_channel", "T1", "C2"),
        Place("slack", "private_channel", "T1", "C8"),
        Place("slack", "public_channel", "T1", "C3"),
        Place("slack", "public_channel", "T2", "C4"),
    ]
    page = (REPO_ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")
    section = page.split("## Where a memory is used", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(learned)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        where = learned[cells[0]]
        assert cells[1:] == ["used" if usable(where, a) else "not used" for a in asked], row
