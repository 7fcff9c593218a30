"""``selfmind eval reflection`` as a user runs it: a child process against the fake Anthropic
server (in this process) with scripted models; its refusals in this process (typer's runner:
the same command, without a second of start-up each)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.evaluation.locomo import load_all
from tests.conftest import REPO_ROOT
from tests.eval_helpers import ScriptedModels, write_synthetic
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic, slow

KEY = "sk-ant-eval-cli"
PREFIXES = ("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_")


def env_for(fake: FakeAnthropic | None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_"))
    }
    env["PYTHONPATH"] = str(REPO_ROOT)
    if fake is not None:
        env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=fake.base_url)
    env.update(extra)
    return env


async def selfmind(
    *args: str, env: dict[str, str], cwd: Path, timeout_s: float = 120
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def in_process(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``selfmind ARGS`` run by typer's runner in a thread (the command runs its own event
    loop), with ``env``'s settings and no other SelfMind variable; the test's cwd."""
    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith(PREFIXES)}
    overrides.update({k: v for k, v in env.items() if k.startswith(PREFIXES)})
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env=overrides)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_synthetic(tmp_path / "data").parent


async def test_table_and_one_json_line_comparing_two_models(data: Path, tmp_path: Path) -> None:
    models = ScriptedModels(load_all(data), "oracle")
    async with running_fake_anthropic(responder=models) as fake:
        code, out, err = await selfmind(
            "eval", "reflection", "--data", str(data), "--model", "claude-haiku-4-5",
            "--model", "claude-sonnet-4-5", "--judge-model", "claude-opus-4-8", "--yes",
            "--json", env=env_for(fake), cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, err
    lines = out.strip().splitlines()
    report = json.loads(lines[-1])
    assert [m["model"] for m in report["models"]] == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    for m in report["models"]:
        assert m["total"]["coverage"] == 1.0 and m["total"]["support"] == 1.0
        assert m["negative_suite"]["false_store_rate"] == 0.0
        assert m["correction_suite"]["supersede_rate"] == 1.0
        assert m["per_100_turns"]["reflection_cost_usd"] > 0
    assert report["prices_as_of"] and report["estimate"]["claude-haiku-4-5"]["judge_calls"] == 4
    assert sum(1 for line in lines if line.startswith("conversation")) == 2
    assert "estimate (input tokens counted by the API" in err
    assert not list(tmp_path.glob("*.db"))  # the throwaway store is gone
    reflected = {r.body["model"] for r in fake.requests_of("extract")}
    assert reflected == {"claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-8"}


async def test_interrupt_then_resume_gives_the_totals_of_one_run(
    data: Path, tmp_path: Path
) -> None:
    convs = load_all(data)
    models = ScriptedModels(convs, "oracle")

    def respond(body: dict[str, Any]) -> Any:
        return slow(models(body), 0.05)

    args = ["eval", "reflection", "--data", str(data), "--offline-match", "--yes", "--json"]
    async with running_fake_anthropic(responder=models) as fake:
        code, one, err = await selfmind(*args, env=env_for(fake), cwd=tmp_path)
    assert code == 0, err
    out = tmp_path / "run.jsonl"
    async with running_fake_anthropic(responder=respond) as fake:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bots.cli", *args, "--out", str(out),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env_for(fake), cwd=tmp_path,
        )  # fmt: skip
        for _ in range(600):
            await asyncio.sleep(0.05)
            if out.exists() and len(out.read_text().splitlines()) > 5:
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 130, stderr.decode()
        assert "resume" in stderr.decode()
        partial = json.loads(stdout.decode().strip().splitlines()[-1])
        assert partial["complete"] is False
        done = len(out.read_text().splitlines())
        code, resumed, err = await selfmind(
            *args, "--out", str(out), env=env_for(fake), cwd=tmp_path
        )
    assert code == 0, err
    first, second = json.loads(one.splitlines()[-1]), json.loads(resumed.splitlines()[-1])
    assert second["complete"] is True and 5 < done < len(out.read_text().splitlines())
    assert second["models"] == first["models"]
    # Another run's file is refused, not mixed in (in this process: a refusal).
    code, _, err = await in_process(
        "eval", "reflection", "--data", str(data), "--yes", "--out", str(out),
        env=env_for(fake),
    )  # fmt: skip
    assert code == 1 and "other options" in err


async def test_refusals(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with running_fake_anthropic(responder=ScriptedModels()) as fake:
        base = ["eval", "reflection", "--offline-match"]
        code, _, err = await in_process(*base, "--data", str(data), env=env_for(None))
        assert code == 1 and "ANTHROPIC_API_KEY is not set" in err
        code, _, err = await in_process(*base, env=env_for(fake))
        assert code == 2 and "--data" in err
        empty = tmp_path / "empty"
        empty.mkdir()
        code, _, err = await in_process(*base, "--data", str(empty), env=env_for(fake))
        assert code == 1 and "no LoCoMo conversations" in err
        code, _, err = await in_process(
            *base, "--data", str(data), "--conversations", "conv-99", "--yes",
            env=env_for(fake),
        )  # fmt: skip
        assert code == 1 and "no LoCoMo conversations" in err
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "conv-1.json").write_text('{"speaker_a": "A"', encoding="utf-8")
        code, _, err = await in_process(*base, "--data", str(broken), env=env_for(fake))
        assert code == 1 and "cannot load" in err
        code, _, err = await in_process(
            *base, "--data", str(data), "--conversations", "conv-90,conv-91", "--yes",
            env=env_for(fake),
        )  # fmt: skip
        assert code == 2 and "not in" in err and "conv-91" in err
        code, _, err = await in_process(
            *base, "--data", str(data), "--yes", "--out", str(tmp_path / "no" / "such" / "f"),
            env=env_for(fake),
        )  # fmt: skip
        assert code == 1 and "--out" in err
        # Not a terminal and no --yes: estimate shown, nothing run.
        code, _, err = await in_process(*base, "--data", str(data), env=env_for(fake))
        assert code == 1 and "pass --yes" in err and "estimate" in err
        assert fake.totals.requests == 0 and fake.count_requests
    # A refused key fails in one line, before anything is reflected.
    async with running_fake_anthropic(api_key=KEY) as fake:
        code, _, err = await in_process(
            *base, "--data", str(data), "--yes",
            env=env_for(fake, ANTHROPIC_API_KEY="sk-wrong"),
        )  # fmt: skip
        assert code == 1 and "AuthenticationError" in err and "sk-wrong" not in err
        assert fake.totals.requests == 0
