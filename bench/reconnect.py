"""The fault table: how fast each bot reconnects after each connection fault, and whether every
event sent around it is answered exactly once; and how each stops on a revoked bot token.

    python bench/reconnect.py [--rounds 5] [--soak] [--sdk-baseline] [--json]

Slack: the real ``selfmind slack`` process (Socket Mode) against the fake Slack, with
``redeliver_unacked`` on (Slack redelivers what was not acknowledged) and reconnect backoff
50 ms first, 0.5 s at most; each round applies the fault, waits for the next accepted
websocket (the reconnect time) and sends one DM; "abrupt close mid-event" sends the DM on the
connection it then resets. Discord: the real ``selfmind discord`` process against the fake
gateway, with the same backoff settings; each round sends one message while the gateway is
down (replayed on RESUME; none for an invalid session, which Discord does not replay) and one
once it is back; reconnect time runs from the fault to the RESUME (or IDENTIFY). The baseline
row of each platform, "no fault", sends the same events on a steady connection: every fault
row should match its answered / twice / lost counts.

Revoked bot token (once each, whatever ``--rounds``): the token is revoked in the fake and
one message sent around the fault (Slack Socket Mode: after the event, if any, so it may
reach a closing link and be redelivered; Slack HTTP: before the event, stored and answered
200; Discord 4004: just before the close; Discord 401: after the revocation, so its answer
hits the 401); the "reconnect" columns then hold the time from the fault to the process's
exit (code in "exit", which must be 1 with one line naming the fix), and "answered" counts
the message's answers after a restart with the new token. ``--soak``: 30 forced
disconnects (every fault kind Discord replays across / every Slack fault, shuffled) over two
minutes with an event every 0.5 s ("flowing"), reconnect times over the 30 faults.

Baseline for the Slack link itself (``--sdk-baseline``, platform ``slack-sdk``): the same
faults, one round each on a fresh connection, against slack_bolt's own
``AsyncSocketModeHandler`` (slack_sdk's aiohttp client, what the bot used before) over a Bolt
app whose listener only acknowledges; "answered" there means acknowledged, and a fault it does
not recover from within 15 s counts as lost with its reconnect time shown as "stuck".

Columns: reconnect p50 / max (seconds), events sent, answered (at least once), answered
twice (or more), lost (never answered within 30 s), exit (revoked rows). The last line is
JSON: ``{"rows": [{platform, fault, reconnect_p50_s, reconnect_max_s, sent, answered,
answered_twice, lost, exit?}], "exactly_once": bool}``; ``exactly_once`` also requires every
revoked row to have exited 1 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.discord_helpers import World, eventually, world
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.reconnect_helpers import (
    DISCORD,
    DISCORD_FAULTS,
    HTTP_MODE,
    SLACK_FAULTS,
    SOAK_FAULTS,
    SOCKET_MODE,
    BotProcess,
    DiscordFaultRun,
    SlackFaultRun,
    discord_env,
    soak,
    socket_mode_env,
)
from tests.slack_helpers import bot_posts, slack_process_env

Row = dict[str, object]


async def slack_rows(rounds: int, tmp: Path) -> list[Row]:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp / "slack.db", socket_mode_env(slack, claude), REPO)
        try:
            run = SlackFaultRun(slack)
            for _ in range(rounds):
                await run.send_event("no fault")
            for _ in range(rounds):
                for fault in SLACK_FAULTS:
                    await run.apply(fault)
                    await run.send_event(fault)
                await run.mid_event()
            await run.wait_answered()
            rows = run.rows()
        finally:
            await bot.stop()
    return [{"platform": "slack"} | row for row in rows]


async def discord_rows(rounds: int, tmp: Path) -> list[Row]:
    async with world(tmp) as w:
        bot = await BotProcess.start(w.db, discord_env(w), tmp, DISCORD)
        try:
            run = DiscordFaultRun(w.discord, w.alice)
            for _ in range(2 * rounds):
                await run.send("no fault")
            for _ in range(rounds):
                for fault in DISCORD_FAULTS:
                    await run.apply(fault, timeout_s=600)
            await run.wait_answered()
            rows = run.rows()
        finally:
            await bot.stop()
    return [{"platform": "discord"} | row for row in rows]


# ---- soak ------------------------------------------------------------------------------------

SOAK_FAULT_COUNT, SOAK_S, SOAK_EVERY_S = 30, 120.0, 0.5


def soak_row(platform: str, rows: list[dict[str, object]], reconnect_s: list[float]) -> Row:
    """One row over a whole soak run: every event, the reconnect time of every fault."""

    def total(key: str) -> int:
        return sum(int(str(r[key])) for r in rows)

    return {
        "platform": platform,
        "fault": f"{SOAK_FAULT_COUNT} faults in {SOAK_S:.0f} s, events flowing",
        "reconnect_p50_s": round(statistics.median(reconnect_s), 3),
        "reconnect_max_s": round(max(reconnect_s), 3),
        "sent": total("sent"),
        "answered": total("answered"),
        "answered_twice": total("answered_twice"),
        "lost": total("lost"),
    }


async def slack_soak(tmp: Path) -> Row:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp / "soak.db", socket_mode_env(slack, claude), REPO)
        try:
            run = SlackFaultRun(slack)
            await soak(
                run.apply,
                lambda: run.send_event("flowing"),
                list(SLACK_FAULTS),
                faults=SOAK_FAULT_COUNT,
                over_s=SOAK_S,
                every_s=SOAK_EVERY_S,
            )
            await run.wait_answered()
        finally:
            await bot.stop()
    times = [t for s in run.stats.values() for t in s.reconnect_s]
    return soak_row("slack", run.rows(), times)


async def discord_soak(tmp: Path) -> Row:
    tmp.mkdir(exist_ok=True)
    async with world(tmp) as w:
        bot = await BotProcess.start(w.db, discord_env(w), tmp, DISCORD)
        try:
            run = DiscordFaultRun(w.discord, w.alice)

            async def apply(fault: str) -> None:
                await run.apply(fault, timeout_s=600)

            await soak(
                apply,
                lambda: run.send("flowing"),
                SOAK_FAULTS,
                faults=SOAK_FAULT_COUNT,
                over_s=SOAK_S,
                every_s=SOAK_EVERY_S,
            )
            await run.wait_answered()
        finally:
            await bot.stop()
    times = [t for s in run.stats.values() for t in s.reconnect_s]
    return soak_row("discord", run.rows(), times)


# ---- revoked bot token -------------------------------------------------------------------------

RESTART_ANSWER_S = 30.0


def revoked_row(
    platform: str, fault: str, stop_s: float, bot: BotProcess, answers: int, fix: str
) -> Row:
    lines = [line for line in bot.lines if fix in line]
    code = bot.proc.returncode
    return {
        "platform": platform,
        "fault": fault,
        "reconnect_p50_s": round(stop_s, 3),
        "reconnect_max_s": round(stop_s, 3),
        "sent": 1,
        "answered": int(answers >= 1),
        "answered_twice": int(answers >= 2),
        "lost": int(answers == 0),
        "exit": code if len(lines) == 1 else f"{code} ({len(lines)} lines)",
    }


SLACK_REVOKED: dict[str, tuple[tuple[str, ...], str, str | None]] = {
    "revoked: tokens_revoked event": (SOCKET_MODE, "token_revoked", "tokens_revoked"),
    "revoked: app_uninstalled event": (SOCKET_MODE, "invalid_auth", "app_uninstalled"),
    "revoked: invalid_auth on the Web API": (SOCKET_MODE, "invalid_auth", None),
    "revoked: account_inactive on the Web API": (SOCKET_MODE, "account_inactive", None),
    "revoked (http): tokens_revoked event": (HTTP_MODE, "token_revoked", "tokens_revoked"),
    "revoked (http): token_revoked on the Web API": (HTTP_MODE, "token_revoked", None),
    "revoked (http): not_authed on the Web API": (HTTP_MODE, "not_authed", None),
}
"""fault: (mode, the Web API error of the old token, the event sent first or None)."""


async def slack_revoked_row(fault: str, tmp: Path) -> Row:
    mode, error, event_type = SLACK_REVOKED[fault]
    db = tmp / f"revoked-{abs(hash(fault))}.db"
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True

        def env() -> dict[str, str]:
            if mode == SOCKET_MODE:
                return socket_mode_env(slack, claude)
            return slack_process_env(slack, claude.base_url)

        bot = await BotProcess.start(db, env(), REPO, mode)
        try:
            started = time.monotonic()
            slack.revoke_bot_token(error)
            event = getattr(slack.events, event_type)() if event_type else None
            dm = slack.events.message("stored before the stop", user="U7")
            if mode == SOCKET_MODE:
                if event is not None:  # the event first: it is the cause
                    await slack.push_event(event)
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await slack.push_event(dm)  # unacked if the link is closing: redelivered
            else:  # over HTTP the message first (stored, 200), then the event
                await slack.send_event(bot.events_url, dm)
                if event is not None:
                    with contextlib.suppress(OSError):
                        await slack.send_event(bot.events_url, event)
            await bot.wait()
            stop_s = time.monotonic() - started
        finally:
            bot.kill()
        answers = await slack_answers_after_restart(slack, db, env(), mode)
    return revoked_row("slack", fault, stop_s, bot, answers, "SLACK_BOT_TOKEN")


async def slack_answers_after_restart(
    slack: FakeSlack, db: Path, env: dict[str, str], mode: tuple[str, ...]
) -> int:
    again = await BotProcess.start(db, env, REPO, mode)
    try:
        with contextlib.suppress(TimeoutError):
            await slack.wait_until(lambda: bool(bot_posts(slack, "D7")), timeout_s=RESTART_ANSWER_S)
        await asyncio.sleep(1.0)  # a second answer would show by now
    finally:
        await again.stop()
    return len(bot_posts(slack, "D7"))


DISCORD_REVOKED: dict[str, bool] = {
    "revoked: gateway close 4004": True,
    "revoked: HTTP 401 on REST": False,
}
"""fault: whether the gateway is closed with 4004 (else only REST answers 401)."""


async def discord_revoked_row(fault: str, tmp: Path) -> Row:
    path = tmp / f"revoked-{abs(hash(fault))}"
    path.mkdir()
    async with world(path) as w:
        fake = w.discord
        bot = await BotProcess.start(w.db, discord_env(w), path, DISCORD)
        try:
            started = time.monotonic()
            text = f"{fake.bot_user.mention} say storedfirst"
            if DISCORD_REVOKED[fault]:
                await fake.dispatch_message(fake.channel_id, w.alice, text)
                await fake.revoke_token(close_gateway=True)
            else:
                await fake.revoke_token(close_gateway=False)
                await fake.dispatch_message(fake.channel_id, w.alice, text)
            await bot.wait()
            stop_s = time.monotonic() - started
        finally:
            bot.kill()
        answers = await discord_answers_after_restart(w, path)
    return revoked_row("discord", fault, stop_s, bot, answers, "DISCORD_BOT_TOKEN")


async def discord_answers_after_restart(w: World, cwd: Path) -> int:
    def answers() -> int:
        return sum("storedfirst" in t for t in w.bot_texts(w.discord.channel_id))

    again = await BotProcess.start(w.db, discord_env(w), cwd, DISCORD)
    try:
        with contextlib.suppress(TimeoutError):
            await eventually(lambda: answers() >= 1, timeout_s=RESTART_ANSWER_S)
        await asyncio.sleep(1.0)
    finally:
        await again.stop()
    return answers()


async def revoked_rows(platforms: list[str], tmp: Path) -> list[Row]:
    rows: list[Row] = []
    if "slack" in platforms:
        rows += [await slack_revoked_row(fault, tmp) for fault in SLACK_REVOKED]
    if "discord" in platforms:
        rows += [await discord_revoked_row(fault, tmp) for fault in DISCORD_REVOKED]
    return rows


SDK_STUCK_S = 15.0


async def sdk_rows() -> list[Row]:
    """One round of each Slack fault against slack_bolt's ``AsyncSocketModeHandler``."""
    return [await sdk_row(fault) for fault in [*SLACK_FAULTS, "abrupt close mid-event"]]


async def sdk_row(fault: str) -> Row:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    async with running_fake_slack() as slack:
        slack.redeliver_unacked = True
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        quiet = logging.getLogger("bench.reconnect.sdk")  # its tracebacks are the point,
        quiet.setLevel(logging.CRITICAL + 1)  # not worth printing
        app = AsyncApp(client=client, signing_secret=slack.signing_secret, logger=quiet)

        async def on_message() -> None:
            return None

        app.event("message")(on_message)
        handler = AsyncSocketModeHandler(
            app, app_token=slack.app_token, ping_interval=1.0, logger=quiet
        )
        await handler.connect_async()  # type: ignore[no-untyped-call]
        reconnect: object = "stuck"
        acked = 0
        try:
            await slack.wait_for_socket()
            before = slack.socket_connections
            started = asyncio.get_running_loop().time()
            event = slack.events.message("after the fault", user="U9")
            if fault == "abrupt close mid-event":
                await slack.push_then_drop("events_api", slack.events.event_callback(event))
            else:
                await SLACK_FAULTS[fault](slack)
            with contextlib.suppress(TimeoutError):
                await slack.wait_until(
                    lambda: slack.socket_connections > before, timeout_s=SDK_STUCK_S
                )
                reconnect = round(asyncio.get_running_loop().time() - started, 3)
            if reconnect != "stuck":
                if fault != "abrupt close mid-event":
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await slack.push_event(event)
                with contextlib.suppress(TimeoutError):
                    await slack.wait_until(
                        lambda: any(
                            slack_event_of(slack, str(a["envelope_id"])) == "U9" for a in slack.acks
                        ),
                        timeout_s=5,
                    )
                    acked = 1
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
    return {
        "platform": "slack-sdk",
        "fault": fault,
        "reconnect_p50_s": reconnect,
        "reconnect_max_s": reconnect,
        "sent": 1,
        "answered": acked,
        "answered_twice": 0,
        "lost": 1 - acked,
    }


def slack_event_of(slack: object, envelope_id: str) -> str | None:
    """The user of the ``events_api`` envelope ``envelope_id`` the fake sent, if any."""
    for envelope in getattr(slack, "envelopes", []):
        if envelope.get("envelope_id") == envelope_id:
            return str(envelope.get("payload", {}).get("event", {}).get("user"))
    return None


def table(rows: list[Row]) -> str:
    head = ("platform", "fault", "p50 s", "max s", "sent", "answered", "twice", "lost", "exit")
    keys = (
        "platform",
        "fault",
        "reconnect_p50_s",
        "reconnect_max_s",
        "sent",
        "answered",
        "answered_twice",
        "lost",
        "exit",
    )
    cells = [
        [
            str(r.get(k, "-")) if r["fault"] != "no fault" or "reconnect" not in k else "-"
            for k in keys
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


async def main_async(
    rounds: int, platforms: list[str], *, sdk: bool, revoked: bool, soaks: bool
) -> list[Row]:
    rows: list[Row] = await sdk_rows() if sdk else []
    with tempfile.TemporaryDirectory() as tmp:
        if "slack" in platforms:
            rows += await slack_rows(rounds, Path(tmp))
            if soaks:
                rows.append(await slack_soak(Path(tmp)))
        if "discord" in platforms:
            rows += await discord_rows(rounds, Path(tmp))
            if soaks:
                rows.append(await discord_soak(Path(tmp) / "soak"))
        if revoked:
            rows += await revoked_rows(platforms, Path(tmp))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="times each fault is applied")
    parser.add_argument("--platform", choices=("slack", "discord"), action="append")
    parser.add_argument("--sdk-baseline", action="store_true", help="also slack_sdk's client")
    parser.add_argument("--soak", action="store_true", help="also 30 faults over two minutes")
    parser.add_argument("--no-revoked", action="store_true", help="skip the revoked-token rows")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    platforms = args.platform or ["slack", "discord"]
    rows = asyncio.run(
        main_async(
            args.rounds,
            platforms,
            sdk=args.sdk_baseline,
            revoked=not args.no_revoked,
            soaks=args.soak,
        )
    )
    ours = [r for r in rows if r["platform"] != "slack-sdk"]
    once = all(
        r["answered"] == r["sent"] and r["answered_twice"] == 0 and r.get("exit", 1) == 1
        for r in ours
    )
    if not args.json:
        print(table(rows))
    print(json.dumps({"rows": rows, "exactly_once": once}))
    sys.exit(0 if once else 1)


if __name__ == "__main__":
    main()
