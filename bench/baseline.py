"""The baseline a benchmark compares against in the same run: a commit checked out beside
the working tree (``--baseline [REF]`` in bench/load.py, bench/startup.py and bench/use.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def merge_base() -> str:
    """``git merge-base HEAD main``: the commit this branch started from."""
    return subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@contextlib.contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """``ref`` checked out (detached) in a temporary ``git worktree``, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="selfmind-base-"))
    path = folder / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


SCHEMA_CHILD = """
import asyncio, sys
from bench.retrieval import SQLiteStore

async def main() -> None:
    store = await SQLiteStore.open(sys.argv[1])
    await store.close()

asyncio.run(main())
"""


def sqlite_schema(tree: Path) -> int:
    """The number of the last migration the code in ``tree`` applies to a new SQLite store
    (the schema it writes), read from a store it makes in a temporary folder, in a process
    of its own (any commit whose ``bench/retrieval.py`` opens a ``SQLiteStore``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "schema.db"
        subprocess.run(
            [sys.executable, "-c", SCHEMA_CHILD, str(path)],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            check=True,
            capture_output=True,
        )
        with contextlib.closing(sqlite3.connect(path)) as conn:
            row = conn.execute("SELECT max(number) FROM schema_migrations").fetchone()
    return int(row[0])
