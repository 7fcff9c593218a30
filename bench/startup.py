"""Start-up time of the ``selfmind`` command against the floor of its own libraries.

    python bench/startup.py [--runs 9] [--json]

Each command runs ``--runs`` times as a fresh process (interleaved, so drift hits every
row alike) and the median wall time counts. Two comparisons, each in the same run:

- ``selfmind --help`` against a one-command typer app printing its own ``--help`` (the CLI
  library's floor: Python start-up plus typer and click);
- ``selfmind memories stats`` on a small store against a script that imports typer,
  pydantic-settings and aiosqlite and opens the same database (the floor of a command that
  reads settings and the store).

Target: each ratio within 1.5x. The processes run with ``HOME`` and the working directory in
a temporary folder (no ``.env``), on the interpreter running this script. The last line is
JSON: ``{"rows": [{"command", "median_s", "floor_s", "ratio"}], "within_target": bool}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.5

TYPER_FLOOR = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def hello(name: str = "x") -> None:
    '''Say hello.'''
app()
"""

STATS_FLOOR = """
import asyncio, sys
import typer, pydantic_settings, aiosqlite
async def main() -> None:
    async with aiosqlite.connect(sys.argv[1]) as db:
        async with db.execute("SELECT COUNT(*) FROM memories") as cursor:
            print(await cursor.fetchone())
asyncio.run(main())
"""


def selfmind_script() -> list[str]:
    """The installed console script next to this interpreter (``python -m bots.cli`` else)."""
    script = Path(sys.executable).with_name("selfmind")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bots.cli"]


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="runs per command (median)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_"))
        }
        env["HOME"] = str(home)
        db = home / "memory.db"
        selfmind = selfmind_script()
        for text in ("The user likes tea.", "The user lives in Oslo.", "The user uses vim."):
            subprocess.run(
                [*selfmind, "--db", str(db), "memories", "remember", "--user", "b", text],
                env=env, cwd=home, check=True, capture_output=True,
            )  # fmt: skip
        pairs = {
            "selfmind --help": (
                [*selfmind, "--help"],
                [sys.executable, "-c", TYPER_FLOOR, "--help"],
                "typer app --help",
            ),
            "selfmind memories stats": (
                [*selfmind, "--db", str(db), "memories", "stats"],
                [sys.executable, "-c", STATS_FLOOR, str(db)],
                "typer+pydantic-settings+aiosqlite, open db",
            ),
        }
        times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
        for argv, floor, _ in pairs.values():  # warm the OS file cache once
            timed(argv, env, home)
            timed(floor, env, home)
        for _ in range(args.runs):
            for name, (argv, floor, _) in pairs.items():
                times[name][0].append(timed(argv, env, home))
                times[name][1].append(timed(floor, env, home))

    rows = []
    for name, (own, floor) in times.items():
        median, base = statistics.median(own), statistics.median(floor)
        rows.append(
            {
                "command": name,
                "floor": pairs[name][2],
                "median_s": round(median, 4),
                "floor_s": round(base, 4),
                "ratio": round(median / base, 2),
            }
        )
    within = all(r["ratio"] <= TARGET_RATIO for r in rows)
    if not args.json:
        print(f"{'command':<26}{'median s':>10}  {'floor':<44}{'floor s':>9}{'ratio':>7}")
        for r in rows:
            print(
                f"{r['command']:<26}{r['median_s']:>10.3f}  {r['floor']:<44}"
                f"{r['floor_s']:>9.3f}{r['ratio']:>6.2f}x"
            )
        print(f"target: within {TARGET_RATIO}x of the floor ({args.runs} runs each, median)")
    print(json.dumps({"rows": rows, "within_target": within}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
