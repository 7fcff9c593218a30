"""bench/profile_parts.py: each py-spy sample goes to one part of a turn, imports left out."""

from __future__ import annotations

from pathlib import Path

from bench.profile_parts import shares


def test_each_sample_counts_once_in_the_first_part_its_stack_names(tmp_path: Path) -> None:
    raw = tmp_path / "this-sqlite-200-0.txt"
    raw.write_text(
        "run (bots/cli.py:1);Reflector._work (core/memory/reflection.py:9);"
        "SQLiteStore.add (core/store/sqlite/store.py:5) 7\n"  # the store's, inside reflection
        "run (bots/cli.py:1);ClaudeChatModel.extract (core/model/claude.py:3) 5\n"
        "run (bots/cli.py:1);StatusIndicator.show (bots/slack_bot/sink.py:150) 3\n"
        "run (bots/cli.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 100\n"  # start-up
        "run (bots/cli.py:1);Runner.run (asyncio/runners.py:118) 2\n"
        "not a sample line\n"
    )
    parts, total = shares(raw)
    assert total == 17
    assert parts == {
        "store (SQL, its thread hand-off)": 7,
        "reflection call (Anthropic SDK)": 5,
        "status indicator (setStatus)": 3,
        "event loop and I/O callbacks": 2,
    }
