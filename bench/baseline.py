"""The baseline a benchmark compares against in the same run: a commit checked out beside
the working tree (``--baseline [REF]`` in bench/load.py and bench/startup.py)."""

from __future__ import annotations

import contextlib
import subprocess
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
    path = Path(tempfile.mkdtemp(prefix="selfmind-base-")) / "tree"
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
