"""The layout's floors (docs/architecture.md): each folder imports only what stands below
it, and no import circle joins two files or two folders. Every import counts, lazy and
type-only ones included."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

# Lower floors first; a folder may import its own floor's modules and any floor below.
FLOORS = {
    "core": 0,  # core/__init__.py: a docstring
    "core.types": 0,
    "core.errors": 0,
    "core.data": 0,
    "core.settings": 1,
    "core.rules": 1,
    "core.streaming": 1,
    "core.metrics": 1,
    "core.logs": 1,
    "core.model": 2,
    "core.store": 2,
    "core.health": 2,
    "core.memory": 3,
    "core.files": 3,
    "core.chat": 4,
    "core.runtime": 5,
    "core.evaluation": 5,
    "bots": 6,
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
