"""Memories survive separate processes and SIGKILL mid-write."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.memory.service import MemoryService
from core.store.sqlite.store import SQLiteStore
from tests.conftest import REPO_ROOT

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from core.memory.service import MemoryService
    from core.store.sqlite.store import SQLiteStore

    async def main(path, n):
        store = await SQLiteStore.open(path)
        service = MemoryService(store)
        for i in range(n):
            r = await service.remember(user_key="cli:writer", text=f"The user owns item {i}.")
            print(r.id, flush=True)
        await store.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


def run_writer(path: Path, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(n)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


async def test_persistence_across_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    proc = run_writer(path, 5)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    ids = [int(x) for x in out.split()]
    reader = subprocess.run(
        [
            sys.executable,
            "-m",
            "bots.cli",
            "--db",
            str(path),
            "memories",
            "search",
            "--user",
            "writer",
            "item 3",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=True,
    )
    assert '"The user owns item 3."' in reader.stdout
    store = await SQLiteStore.open(str(path))
    try:
        listed = await MemoryService(store).list_memories(user_key="cli:writer", limit=10)
    finally:
        await store.close()
    assert sorted(m.id for m in listed) == sorted(ids)


@pytest.mark.slow
async def test_sigkill_mid_writes_keeps_every_confirmed_write(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    proc = run_writer(path, 1000)
    assert proc.stdout is not None
    confirmed = []
    for line in proc.stdout:
        confirmed.append(int(line))
        if len(confirmed) == 300:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {row[0] for row in conn.execute("SELECT id FROM memories")}
        assert conn.execute(
            "SELECT count(*) FROM memories_fts_1 WHERE memories_fts_1 MATCH 'u1_item'"
        ).fetchone()[0] == len(stored)
    assert set(confirmed) <= stored
    assert len(stored) < 1000
    # The store opens and keeps working after the crash.
    store = await SQLiteStore.open(str(path))
    try:
        service = MemoryService(store)
        assert len(await service.search(user_key="cli:writer", query="item 42", k=6)) == 6
        added = await service.remember(user_key="cli:writer", text="The user survived a crash.")
        assert added.status == "added"
    finally:
        await store.close()
