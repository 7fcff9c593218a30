"""Bulk work: forget-all across batches, import validated first and written in short
transactions while another process writes to the same SQLite file."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import pytest

from core.errors import ImportFormatError
from core.memory.service import IMPORT_BATCH, MemoryService
from core.rules.cleanup_ops import SupersedeOp
from core.store.seams import Store
from core.store.sqlite.store import FORGET_BATCH
from core.types import NewMemory, Place
from tests.conftest import REPO_ROOT

USER = "cli:bulk"
OTHER = "slack:T9:U9"


def _lines(n: int, word: str = "pebble") -> list[str]:
    return [json.dumps({"text": f"The user keeps {word} number {i} in box {i}."}) for i in range(n)]


async def test_forget_all_crosses_batches_and_spares_others(store: Store) -> None:
    n = FORGET_BATCH + 7
    await store.add_many(
        user_key=USER,
        memories=[NewMemory(text=f"The user owns lamp {i}.") for i in range(n)],
        dedupe=None,
    )
    await store.add_many(
        user_key=OTHER, memories=[NewMemory(text="The user owns a lamp.")], dedupe=None
    )
    first, second = (m.id for m in await store.list_memories(user_key=USER, limit=2))
    ops = [SupersedeOp(old_id=second, new_id=first)]
    assert (await store.apply_change(user_key=USER, change_id="c1", ops=ops)).superseded
    assert await store.forget_all(user_key=USER) == n - 1  # active ones
    assert await store.list_memories(user_key=USER, include_superseded=True) == []
    assert await store.count(user_key=USER) == 0
    forgotten = [e for e in await store.history(user_key=USER, limit=20_000)]
    assert sum(e.event == "forgotten" for e in forgotten) == n
    assert all(e.related_id is None for e in forgotten)
    assert [m.text for m in await store.export(user_key=OTHER)] == ["The user owns a lamp."]
    assert await store.search(user_key=USER, query="lamp", k=5) == []
    assert len(await store.search(user_key=OTHER, query="lamp", k=5)) == 1
    assert await store.forget_all(user_key=USER) == 0


async def test_import_malformed_last_line_writes_nothing(service: MemoryService) -> None:
    lines = [*_lines(IMPORT_BATCH * 3), '{"text": "The user is fine."', ""]
    with pytest.raises(ImportFormatError, match=f"line {IMPORT_BATCH * 3 + 1}"):
        await service.import_lines(user_key=USER, lines=lines)
    assert await service.count(user_key=USER) == 0


async def test_import_batches_report_progress_and_dedupe(service: MemoryService) -> None:
    await service.remember(user_key=USER, text="The user keeps pebble number 3 in box 3.")
    lines = _lines(IMPORT_BATCH * 2 + 5)
    # Two more specific twins of earlier lines (a qualifier, a date word added: each
    # supersedes its line) and an exact repeat.
    lines += [
        json.dumps({"text": "The user keeps pebble number 5 in box 5 at home."}),
        lines[7],
        json.dumps({"text": "The user keeps pebble number 6 in box 6 today."}),
    ]
    seen: list[tuple[int, int]] = []
    result = await service.import_lines(
        user_key=USER, lines=lines, progress=lambda done, total: seen.append((done, total))
    )
    # Every line but the stored twin (#3) and the repeat is new; the two specific twins,
    # written last, supersede their general lines.
    assert (result.added, result.duplicates, result.superseded) == (IMPORT_BATCH * 2 + 6, 2, 2)
    assert await service.count(user_key=USER) == 1 + result.added - 2
    assert seen == [
        (IMPORT_BATCH, result.added),
        (IMPORT_BATCH * 2, result.added),
        (result.added - 2, result.added),
        (result.added, result.added),
    ]
    # Importing the same file again adds nothing.
    again = await service.import_lines(user_key=USER, lines=lines)
    assert again.added == 0


_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    sys.path.insert(0, sys.argv[2])
    from core.memory.service import MemoryService
    from core.store.sqlite.store import SQLiteStore

    async def main() -> None:
        store = await SQLiteStore.open(sys.argv[1])
        service = MemoryService(store)
        print("ready", flush=True)
        worst, errors = 0.0, []
        for i in range(int(sys.argv[3])):
            t = time.perf_counter()
            try:
                await service.remember(user_key="discord:7", text=f"The user waters fern {i}.")
                await service.search(user_key="discord:7", query="fern", k=3)
            except Exception as exc:
                errors.append(repr(exc))
            worst = max(worst, time.perf_counter() - t)
            await asyncio.sleep(0.01)
        await store.close()
        print(json.dumps({"worst_s": worst, "errors": errors}), flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.sqlite_only
async def test_import_while_another_process_writes(db_path: Path) -> None:
    from core.store.sqlite.store import SQLiteStore

    store = await SQLiteStore.open(str(db_path))
    service = MemoryService(store)
    await service.remember(user_key=USER, text="The user starts here.")
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        str(db_path),
        str(REPO_ROOT),
        "60",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert writer.stdout is not None
        assert (await writer.stdout.readline()).strip() == b"ready"
        result = await service.import_lines(user_key=USER, lines=_lines(4000, "marble"))
        out = (await asyncio.wait_for(writer.communicate(), timeout=120))[0].decode()
    finally:
        if writer.returncode is None:
            writer.kill()
            await writer.wait()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["errors"] == []
    assert result.added == 4000
    assert await service.count(user_key=USER) == 4001
    assert await service.count(user_key="discord:7") == 60
    await store.close()


def test_dedupe_index_finds_what_comparing_all_pairs_finds() -> None:
    import random

    from core.rules.dedupe import Deduper
    from core.rules.dedupe_index import DedupeIndex, Known

    rnd = random.Random(4)
    pool = "tea coffee vim emacs rust go berlin munich dark light mode editor code".split()
    texts = [
        "The user " + " ".join(rnd.choice(pool) for _ in range(rnd.randint(1, 6)))
        for _ in range(300)
    ] + ["!!!", "?"]
    deduper = Deduper(0.7)
    index = DedupeIndex(deduper, texts)
    known: list[Known] = []
    differ = 0
    for text in texts:
        fast = index.match(text)
        slow = deduper.match(text, known)
        assert (fast is None) == (slow is None), text
        differ += fast is None
        if fast is None:
            item = Known(None, text)
            index.add(item)
            known.append(item)
    assert 0 < differ < len(texts)


async def test_an_export_with_copies_of_a_sentence_imports_both(service: MemoryService) -> None:
    # Said in a group DM, then word for word in a public channel: a copy each. Exported and
    # imported into a new key, both come back, each with its place.
    tabs = "The user prefers tabs over spaces."
    places = [Place("slack", "group_dm", "T9", "G1"), Place("slack", "public_channel", "T9", "C1")]
    for place in places:
        await service.store.add(
            user_key=OTHER, memory=NewMemory(tabs, place=place), dedupe=service.deduper
        )
    lines = [json.dumps(r) for r in await service.export(user_key=OTHER)]
    assert len(lines) == 2
    result = await service.import_lines(user_key="slack:T9:U8", lines=lines)
    assert (result.added, result.duplicates) == (2, 0)
    back = await service.store.export(user_key="slack:T9:U8")
    assert {(m.text, m.place) for m in back} == {(tabs, p) for p in places}
    # Imported again: both are duplicates of what is stored.
    again = await service.import_lines(user_key="slack:T9:U8", lines=lines)
    assert (again.added, again.duplicates) == (0, 2)
