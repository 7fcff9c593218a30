"""Failures that say so, at the command line: ``memories cleanup``, ``eval reflection``,
``memories import``, ``db copy`` and a piped ``selfmind chat`` exit 1 with one line when
what they were asked to do failed; ``usage`` counts a stopped answer and prices it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.memory.service import MemoryService
from core.runtime import open_store
from tests.bots.test_eval_cli import env_for, selfmind
from tests.eval_helpers import write_synthetic
from tests.fakes.anthropic_server import FakeAnthropic, Reply, overloaded, running_fake_anthropic
from tests.loop_helpers import dm, harness

runner = CliRunner()
KEY = "sk-ant-exit-codes"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import os

    for name in list(os.environ):
        if name.startswith(("SELFMIND_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SELFMIND_DB", str(tmp_path / "memory.db"))
    monkeypatch.setenv("SELFMIND_ANTHROPIC_MAX_RETRIES", "0")
    return tmp_path


def cli(*args: str, stdin: str = "") -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def use(fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)


async def test_cleanup_with_every_batch_failed(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(f"sqlite:///{here / 'memory.db'}")
    service = MemoryService(store)
    for text in ("The user likes tea.", "The user likes green tea.", "The user lives in Oslo."):
        await service.remember(user_key="cli:al", text=text)
    await store.close()
    async with running_fake_anthropic() as fake:
        use(fake, monkeypatch)
        fake.enqueue(overloaded(), kind="extract", times=20)
        code, out, err = await asyncio.to_thread(cli, "memories", "cleanup", "--user", "al")
    assert code == 1 and "nothing to clean up" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [err.splitlines()[-1]]  # one line, last (after the calls' warnings)
    assert errors[0].startswith("error: memories cleanup: 1 of 1 batches failed (Claude is over")


def failing_reflections(body: dict[str, Any]) -> Reply | str:
    return overloaded() if body.get("output_config") else "ok"


async def test_eval_with_failed_reflections(tmp_path: Path) -> None:
    data = write_synthetic(tmp_path / "data").parent
    async with running_fake_anthropic(responder=failing_reflections) as fake:
        env = env_for(
            fake, SELFMIND_ANTHROPIC_MAX_RETRIES="0", SELFMIND_REFLECTION_MAX_ATTEMPTS="1"
        )
        code, _, err = await selfmind(
            "eval", "reflection", "--data", str(data), "--model", "claude-haiku-4-5",
            "--offline-match", "--yes", env=env, cwd=tmp_path,
        )  # fmt: skip
    assert code == 1, err
    assert err.splitlines()[-1].startswith("error: eval reflection: ")
    assert "reflections with claude-haiku-4-5 failed" in err


def test_import_of_nothing_and_copy_of_no_store(here: Path) -> None:
    (here / "empty.jsonl").write_text("\n")
    code, _, err = cli("memories", "import", str(here / "empty.jsonl"), "--user", "al")
    assert (
        code == 1
        and err
        == f"error: memories import: {here / 'empty.jsonl'} holds no memories (nothing imported)\n"
    )
    assert not (here / "memory.db").exists()
    code, _, err = cli(
        "db", "copy", "--from", str(here / "none.db"), "--to", "postgresql://x@127.0.0.1:9/x"
    )
    assert code == 1 and err.startswith("error: no memory database at ") and err.count("\n") == 1
    assert not (here / "none.db").exists()  # it was created (and copied, empty) before


async def test_piped_chat(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = await asyncio.to_thread(cli, "chat", "--user", "al", stdin="hello\n")
    assert code == 1 and err.startswith("error: 1 of 1 messages got no answer (last: ")
    assert err.count("\n") == 1
    async with running_fake_anthropic() as fake:
        use(fake, monkeypatch)
        fake.enqueue("Hi!", kind="chat")
        fake.enqueue(overloaded(), kind="chat")
        code, out, err = await asyncio.to_thread(
            cli, "chat", "--user", "al", stdin="hello\nagain\n"
        )
        assert code == 1, err
        assert "Hi!" in out
        assert err.splitlines()[-1] == (
            "error: 1 of 2 messages got no answer (last: Claude is overloaded, try again in a"
            " minute.)"
        )
        fake.enqueue("Fine.", kind="chat")
        code, out, err = await asyncio.to_thread(cli, "chat", "--user", "al", stdin="hi\n/stats\n")
        assert (code, err) == (0, ""), err


async def test_usage_counts_a_stopped_answer_and_prices_it(here: Path) -> None:
    db = here / "memory.db"
    async with running_fake_anthropic() as fake, harness(fake, db) as h:
        fake.enqueue(Reply(text="word " * 200, chunk_size=4, chunk_delay_s=0.01), kind="chat")
        answer = h.loop.answer(dm("cli:al", "tell me a long story"))
        assert await anext(answer)
        await answer.aclose()  # stopped, as Ctrl-C does
    code, out, err = await asyncio.to_thread(cli, "usage")
    assert code == 0, err
    lines = out.splitlines()
    chat = next(line for line in lines if line.startswith("chat "))
    assert chat.split()[1] == "1"  # one call, counted although stopped
    model = next(line for line in lines if line.startswith(h.settings.chat_model))
    assert model.rstrip().endswith("*")  # claude-opus-4-8: its price is assumed
    assert "* price assumed" in lines[-1] and "list prices as of" in lines[-1]
    code, out, _ = await asyncio.to_thread(cli, "usage", "--by", "model", "--json")
    import json

    report = json.loads(out)
    assert report["rows"][0]["model"] == h.settings.chat_model
    assert report["cost_by_model"][0]["price_assumed"] is True
    assert report["cost_by_model"][0]["estimated_usd"] > 0
