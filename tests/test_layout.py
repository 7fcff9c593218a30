"""The layout's floors (docs/architecture.md): each folder imports only what stands below
it, and no import circle joins two files or two folders. Every import counts, lazy and
type-only ones included. And the core names no chat platform in its code but in the places
listed here: each platform's rules come from its adapter's description (core.platforms)."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO_ROOT

# Lower floors first; a folder may import its own floor's modules and any floor below.
FLOORS = {
    "core": 0,  # core/__init__.py: a docstring
    "core.types": 0,
    "core.errors": 0,
    "core.data": 0,
    "core.platforms": 1,
    "core.settings": 2,
    "core.rules": 2,
    "core.streaming": 2,
    "core.metrics": 2,
    "core.logs": 2,
    "core.model": 3,
    "core.store": 3,
    "core.health": 3,
    "core.memory": 4,
    "core.files": 4,
    "core.chat": 5,
    "core.runtime": 6,
    "core.evaluation": 6,
    "bots": 7,
}
SIBLINGS = {("core.model", "core.store")}  # usage recording writes through the usage seam


def _folder(module: str) -> str:
    parts = module.split(".")
    return "bots" if parts[0] == "bots" else ".".join(parts[:2])


def _imports() -> dict[str, set[str]]:
    files = [p for top in ("core", "bots") for p in (REPO_ROOT / top).rglob("*.py")]
    names = {
        ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in files
    }
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in names and t != module)
        graph[module] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.add(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_folder_has_a_floor_and_imports_only_below_it() -> None:
    graph = _imports()
    unranked = sorted({_folder(m) for m in graph} - set(FLOORS))
    assert unranked == [], f"give these folders a floor in FLOORS: {unranked}"
    breaks = [
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if _folder(module) != _folder(dep)
        and FLOORS[_folder(dep)] >= FLOORS[_folder(module)]
        and (_folder(module), _folder(dep)) not in SIBLINGS
    ]
    assert breaks == []


def test_no_import_circle_between_files_or_folders() -> None:
    graph = _imports()
    assert _circles(graph) == []
    folders: dict[str, set[str]] = {}
    for module, deps in graph.items():
        for dep in deps:
            if _folder(module) != _folder(dep):
                folders.setdefault(_folder(module), set()).add(_folder(dep))
    assert _circles({f: folders.get(f, set()) for f in FLOORS}) == []


def test_the_checker_sees_a_circle_and_a_break() -> None:
    assert _circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [{"a", "b"}]
    assert FLOORS["core.store"] < FLOORS["core.memory"]  # the store never imports memory
    graph = _imports()
    assert "core.store.seams" in graph and "core.chat.loop" in graph  # modules were read
    assert any(_folder(d) == "core.store" for d in graph["core.chat.loop"])


def test_no_module_of_bots_imports_a_store_backend_but_the_database_admin() -> None:
    graph = _imports()
    backends = [
        f"{m} -> {d}"
        for m, deps in graph.items()
        if m.startswith("bots.")
        for d in deps
        if d.startswith(("core.store.sqlite", "core.store.postgres"))
    ]
    admin = ("bots.cli -> core.store.postgres.admin", "bots.doctor -> core.store.postgres.admin")
    assert all(b.startswith(admin) for b in backends), backends


# Where core/ may name a chat platform in code (string constants and identifiers; docstrings,
# comments and SQL comments aside), and why. Everything else a platform decides comes from
# its adapter's core.platforms.Platform (docs/architecture.md, "What an adapter provides").
NAMES_A_PLATFORM = {
    "core/platforms.py": "LOCAL: the platform word of a bare name (cli:alice)",
    "core/settings.py": "each platform's settings: tokens, URLs, limits, allow-lists",
    "core/chat/prompt.py": "the persona tells Claude where it lives (Slack, Discord, terminal)",
    "core/rules/secrets.py": "Slack and Discord tokens are secrets a user may paste anywhere",
    "core/streaming/chunking.py": "slack_markdown: tables as code (a StreamConfig.render)",
}
_PLATFORM_TEXT = re.compile(r"\b(slack|discord)\b|^cli(:|$)", re.IGNORECASE)
_PLATFORM_NAME = re.compile(r"(^|_)(slack|discord)(_|$)", re.IGNORECASE)
_SQL_COMMENT = re.compile(r"--[^\n]*")


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string nodes that are docstrings (of modules, classes, functions, and the
    attribute docstrings after an assignment)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for before, stmt in zip([None, *body], body, strict=False):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue
            first = before is None and isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            )
            if first or isinstance(before, ast.Assign | ast.AnnAssign):
                found.add(id(stmt.value))
    return found


def _names_a_platform(source: str) -> list[str]:
    """What in ``source`` names a platform: string constants outside docstrings (SQL
    comments cut) and identifiers."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = _SQL_COMMENT.sub("", node.value)
            if id(node) not in docs and _PLATFORM_TEXT.search(text):
                hits.append(repr(node.value[:60]))
        name = getattr(node, "id", None) or getattr(node, "attr", None)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        if isinstance(name, str) and _PLATFORM_NAME.search(name):
            hits.append(name)
    return hits


def test_core_names_no_platform_in_code_outside_the_listed_places() -> None:
    named = {
        path.relative_to(REPO_ROOT).as_posix(): hits
        for path in sorted((REPO_ROOT / "core").rglob("*.py"))
        if (hits := _names_a_platform(path.read_text(encoding="utf-8")))
    }
    unlisted = {path: hits for path, hits in named.items() if path not in NAMES_A_PLATFORM}
    assert unlisted == {}, "ask core.platforms instead (or list the file, with why)"
    assert sorted(NAMES_A_PLATFORM) == sorted(named), "a listed file no longer names one"


def test_the_platform_check_sees_names_and_ignores_prose() -> None:
    assert _names_a_platform('if place.platform == "slack":\n    pass\n') == ["'slack'"]
    assert _names_a_platform('KEY = f"cli:{name}"\n') == ["'cli:'"]
    assert _names_a_platform("def for_discord() -> None: ...\n") == ["for_discord"]
    assert _names_a_platform("x = settings.allowed_slack_teams\n") == ["allowed_slack_teams"]
    prose = '"""Slack and Discord."""\nX = 1\n"""The Slack limit."""\nSQL = "-- Slack"\n'
    assert _names_a_platform(prose) == []
    assert _names_a_platform('NAME = "client"\nCLIMB = "cli"\n') == ["'cli'"]
