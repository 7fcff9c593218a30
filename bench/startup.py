"""Start-up time of the ``selfmind`` commands people type, against ``selfmind --version``.

    python bench/startup.py [--runs 7] [--baseline [REF]] [--json]

Each read-only command (``users``, ``memories list/stats/search/export``, ``db migrate``,
``usage``, ``doctor``) and ``selfmind --version`` run ``--runs`` times as fresh processes
(``python -m bots.cli``, interleaved so drift hits every row alike) on a small store; the
median wall time counts, and each command's ratio to ``--version`` of the same tree in the
same run (what the command costs beyond Python, typer and our CLI module). ``--baseline REF``
runs the same table on ``REF`` (default: ``git merge-base HEAD main``) checked out with
``git worktree`` in a temporary folder, each tree's runs interleaved with the other's: a
before/after in one run on one machine.

Target: a read-only command within :data:`TARGET_RATIO` of ``--version`` (commands that
never call Claude never import its SDK, over a second of imports; tests/bots/
test_cli_imports.py checks the imports themselves); ``doctor`` is shown but not held to it
(it loads the Slack adapter to check the Slack settings). Processes run with ``HOME`` and the
working directory in a temporary folder (no ``.env``, no ``SELFMIND_``/``ANTHROPIC_``
variables), on the interpreter running this script. The last line is JSON: ``{"rows":
[{"tree", "command", "median_s", "ratio"}], "within_target": bool}`` (``within_target``
of this tree's rows but doctor).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.baseline import baseline_tree, merge_base

TARGET_RATIO = 2.0
"""A read-only command may take at most twice ``selfmind --version`` (main before issue 38:
6-15x, the Anthropic SDK's import alone over a second)."""

COMMANDS = {
    "--version": ["--version"],
    "users": ["--db", "{db}", "users"],
    "memories list": ["--db", "{db}", "memories", "list", "--user", "b"],
    "memories stats": ["--db", "{db}", "memories", "stats"],
    "memories search": ["--db", "{db}", "memories", "search", "--user", "b", "tea"],
    "memories export": ["--db", "{db}", "memories", "export", "--user", "b"],
    "db migrate": ["--db", "{db}", "db", "migrate"],
    "usage": ["--db", "{db}", "usage"],
    "doctor": ["--db", "{db}", "doctor"],
}
"""Row name -> arguments of ``selfmind`` (``{db}``: the tree's small store)."""


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one process (it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def tree_env(tree: Path, home: Path) -> dict[str, str]:
    """The environment of a command from ``tree``: its sources first on the path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_"))
    }
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), PYTHONPATH=str(tree))
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median)")
    parser.add_argument(
        "--baseline",
        nargs="?",
        const="",
        default=None,
        metavar="REF",
        help="also run REF (default: merge-base with main) from a git worktree",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        trees = {"this": REPO}
        if args.baseline is not None:
            ref = args.baseline or merge_base()
            if not args.json:
                print(f"baseline: {ref} (git worktree)")
            trees = {"base": stack.enter_context(baseline_tree(ref)), **trees}
        home = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        argvs: dict[tuple[str, str], tuple[list[str], dict[str, str]]] = {}
        for label, tree in trees.items():
            env = tree_env(tree, home)
            db = str(home / f"{label}.db")
            selfmind = [sys.executable, "-m", "bots.cli"]
            for text in ("The user likes tea.", "The user lives in Oslo.", "The user uses vim."):
                subprocess.run(
                    [*selfmind, "--db", db, "memories", "remember", "--user", "b", text],
                    env=env, cwd=home, check=True, capture_output=True,
                )  # fmt: skip
            for name, cmd in COMMANDS.items():
                argvs[label, name] = ([*selfmind, *(a.replace("{db}", db) for a in cmd)], env)
        times: dict[tuple[str, str], list[float]] = {key: [] for key in argvs}
        for argv, env in argvs.values():  # warm the OS file cache once
            timed(argv, env, home)
        for _ in range(args.runs):
            for key, (argv, env) in argvs.items():
                times[key].append(timed(argv, env, home))

    rows = []
    for (label, name), runs in times.items():
        median = statistics.median(runs)
        version = statistics.median(times[label, "--version"])
        rows.append(
            {
                "tree": label,
                "command": f"selfmind {name}",
                "median_s": round(median, 3),
                "ratio": round(median / version, 2),
            }
        )
    held = [r for r in rows if r["tree"] == "this" and r["command"] != "selfmind doctor"]
    within = all(r["ratio"] <= TARGET_RATIO for r in held)
    if not args.json:
        print(f"{'tree':<6}{'command':<28}{'median s':>10}{'x --version':>13}")
        for r in rows:
            print(f"{r['tree']:<6}{r['command']:<28}{r['median_s']:>10.3f}{r['ratio']:>12.2f}x")
        print(
            f"target: a read-only command within {TARGET_RATIO}x of --version "
            f"({args.runs} runs each, median, interleaved)"
        )
    print(json.dumps({"rows": rows, "within_target": within}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
