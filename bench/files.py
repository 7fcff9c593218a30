"""Files through the real bot: memory under a burst of large PDFs, and what an image adds to
the time to the first answer token.

    python bench/files.py [--users 20] [--pdf-mb 30] [--accepted-mb 19] [--image-mb 5]
                          [--json]

Each scenario starts the real bot (``selfmind slack --http``, a child process on a fresh
SQLite file) against the fake Slack (which hosts the files as Slack does: ``url_private``,
a same-host redirect, the bot token) and the fake Anthropic API (which decodes and checks
every file as the API would, in this process). Scenarios, each ``--users`` users sending one
DM at once:

- ``text``: the burst without files;
- ``pdf N MB``: each DM carries an N MB PDF (``--pdf-mb``, default 30: over the default
  ``SELFMIND_FILE_MAX_MB`` of 20, refused from its declared size, nothing downloaded);
- ``pdf N MB, cap 30``: the same with ``SELFMIND_FILE_MAX_MB=30``: refused all the same,
  before any download, since its base64 could not fit the API's 32 MB request;
- ``pdf M MB sent``: each DM carries an M MB PDF (``--accepted-mb``) that is read and sent
  to Claude: the most an accepted file costs; again with half the users, and with
  ``SELFMIND_FILE_MEMORY_MB=40``.

Columns: ``peak RSS`` the bot process's ``VmHWM`` (``/proc/PID/status``) at the end of the
burst; ``over text`` its excess over the text burst; ``bound`` the bound held: the files
held at once fit ``SELFMIND_FILE_MEMORY_MB`` (100), whatever the number of users, each at
most about 10 times its size (the bytes, a copy for pypdf, their base64 text, the
SDK's JSON body of the request kept while the answer streams, and while that is built its
JSON text, plus what the allocator and the transport keep). ``wall``: the burst's time
until every DM shows its whole answer. Then ``first token``: one DM alone, the
time from sending it to the first Slack call showing the model's text, with no file, with an
``--image-mb`` MB photo-like JPEG (passed as is), and with an ``--image-mb`` MB PNG
screenshot of noise (over the API's 5 MB base64 limit: scaled to 1568 px and re-encoded).
Median of 3 each.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image

from bench.replay_locomo import BotProcess
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_files import file_share
from tests.fakes.slack_server import FakeSlack, running_fake_slack, shown_markdown
from tests.files_helpers import pdf

ANSWER = "ANSWER-TEXT: read and done."
MEMORY_MB = 100
OVERHEAD_X = 10


def big_pdf(mb: float) -> bytes:
    """A 10-page PDF of about ``mb`` MB (incompressible metadata pads it)."""
    base = len(pdf(10))
    return pdf(10, pad_bytes=max(0, int(mb * 1024 * 1024) - base - 64))


def photo_jpeg(mb: float) -> bytes:
    """A JPEG of about ``mb`` MB (smooth gradients plus noise, quality 92), under 8000 px."""
    side = 256
    while True:
        gradient = Image.linear_gradient("L").resize((side, side)).convert("RGB")
        noise = Image.frombytes("RGB", (side, side), random.randbytes(side * side * 3))
        out = io.BytesIO()
        Image.blend(gradient, noise, 0.35).save(out, format="JPEG", quality=92)
        if out.tell() >= mb * 1024 * 1024:
            return out.getvalue()
        side = int(side * 1.1) + 8


def noise_png(mb: float) -> bytes:
    side = int((mb * 1024 * 1024 / 3) ** 0.5)
    image = Image.frombytes("RGB", (side, side), random.randbytes(side * side * 3))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _mb(data: bytes) -> str:
    return f"{len(data) / (1024 * 1024):.1f} MB"


def _px(data: bytes) -> str:
    width, height = Image.open(io.BytesIO(data)).size
    return f"{width}x{height}"


def answered(slack: FakeSlack, channel: str) -> bool:
    return any(
        ANSWER in shown_markdown(m) and m.get("user") == slack.identity.user_id
        for m in slack.messages(channel)
    )


async def burst(
    slack: FakeSlack,
    claude: FakeAnthropic,
    work: Path,
    name: str,
    users: int,
    data: bytes | None,
    env: dict[str, str],
) -> dict[str, Any]:
    bot = BotProcess(work / f"{name}.db", slack, claude, work / f"{name}.log")
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env | {"SELFMIND_SLACK_STREAMING": "edits"})
    try:
        await bot.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        events = []
        for u in range(users):
            user = f"U{abs(hash(name)) % 10**6:06d}{u:03d}"
            files = (
                []
                if data is None
                else [slack.file_host.add(f"report-{u}.pdf", data, mimetype="application/pdf")]
            )
            event = (
                file_share(slack.events, "Please read this", files, user=user)
                if files
                else slack.events.message("Please read this", user=user)
            )
            events.append((slack.events.dm_channel(user), event))
        started = time.monotonic()
        await asyncio.gather(*(slack.send_event(bot.url, e) for _, e in events))
        await slack.wait_until(
            lambda: all(answered(slack, c) for c, _ in events), timeout_s=300, what="answers"
        )
        wall = time.monotonic() - started
        peak = bot.peak_rss_mb()
    finally:
        await bot.stop()
    size_mb = 0.0 if data is None else len(data) / (1024 * 1024)
    return {
        "scenario": name,
        "peak_rss_mb": round(peak),
        "wall_s": round(wall, 1),
        "file_mb": round(size_mb, 1),
    }


async def time_one(slack: FakeSlack, bot: BotProcess, user: str, data: bytes | None) -> float:
    """Seconds from sending one DM (with ``data`` as an image, if any) to the first Slack
    call that shows the model's text; returns once the answer is whole."""
    channel = slack.events.dm_channel(user)
    files = []
    if data is not None:
        media_type = "image/png" if data[:4] == b"\x89PNG" else "image/jpeg"
        files.append(slack.file_host.add(f"{user}.img", data, mimetype=media_type))
    event = (
        file_share(slack.events, "What is this?", files, user=user)
        if files
        else slack.events.message("What is this?", user=user)
    )
    before = len(slack.recorded)

    def shown() -> list[Any]:
        return [c for c in slack.recorded[before:] if ANSWER[:6] in json.dumps(c.params)]

    started = time.monotonic()
    await slack.send_event(bot.url, event)
    await slack.wait_until(lambda: bool(shown()), timeout_s=120, what="first text")
    first = float(shown()[0].at - started)
    await slack.wait_until(lambda: answered(slack, channel), timeout_s=120, what="answer")
    return first


async def first_token(
    slack: FakeSlack, claude: FakeAnthropic, work: Path, samples: dict[str, bytes | None]
) -> dict[str, float]:
    bot = BotProcess(work / "first.db", slack, claude, work / "first.log")
    await bot.start()
    out: dict[str, float] = {}
    try:
        await time_one(slack, bot, "UWARM", None)  # the first DM's notice and connections
        for n, (name, data) in enumerate(samples.items()):
            times = [await time_one(slack, bot, f"UFT{n}{i}", data) for i in range(3)]
            out[name] = statistics.median(times)
    finally:
        await bot.stop()
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        work = Path(tmp)
        async with (
            running_fake_slack() as slack,
            running_fake_anthropic(responder=lambda body: ANSWER) as claude,
        ):
            rows = [await burst(slack, claude, work, "text", args.users, None, {})]
            refused = big_pdf(args.pdf_mb)
            rows.append(
                await burst(slack, claude, work, f"pdf {args.pdf_mb:g} MB", args.users, refused, {})
            )
            rows.append(
                await burst(
                    slack,
                    claude,
                    work,
                    f"pdf {args.pdf_mb:g} MB, cap 30",
                    args.users,
                    refused,
                    {"SELFMIND_FILE_MAX_MB": "30"},
                )
            )
            accepted = big_pdf(args.accepted_mb)
            sent = f"pdf {args.accepted_mb:g} MB sent"
            rows.append(await burst(slack, claude, work, sent, args.users, accepted, {}))
            rows.append(
                await burst(
                    slack,
                    claude,
                    work,
                    f"{sent}, {args.users // 2} users",
                    args.users // 2,
                    accepted,
                    {},
                )
            )
            rows.append(
                await burst(
                    slack,
                    claude,
                    work,
                    f"{sent}, memory 40 MB",
                    args.users,
                    accepted,
                    {"SELFMIND_FILE_MEMORY_MB": "40"},
                )
            )
            base = rows[0]["peak_rss_mb"]
            for row in rows:
                row["over_text_mb"] = row["peak_rss_mb"] - base
                memory = 40 if "memory 40" in row["scenario"] else MEMORY_MB
                held = max(1, memory // max(1, round(row["file_mb"]))) if row["file_mb"] else 0
                row["bound_mb"] = round(held * OVERHEAD_X * row["file_mb"])
            jpeg, png = photo_jpeg(args.image_mb), noise_png(args.image_mb)
            firsts = await first_token(
                slack,
                claude,
                work,
                {
                    "no file": None,
                    f"{_mb(jpeg)} JPEG {_px(jpeg)}": jpeg,
                    f"{_mb(png)} PNG {_px(png)}": png,
                },
            )
    return {"bursts": rows, "first_token_s": firsts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--pdf-mb", type=float, default=30)
    parser.add_argument("--accepted-mb", type=float, default=19)
    parser.add_argument("--image-mb", type=float, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.users} users at once, SELFMIND_FILE_MEMORY_MB={MEMORY_MB}")
    print(f"{'scenario':<24}{'peak RSS':>10}{'over text':>11}{'bound':>8}{'wall':>8}")
    for r in result["bursts"]:
        print(
            f"{r['scenario']:<24}{r['peak_rss_mb']:>7} MB{r['over_text_mb']:>8} MB"
            f"{r['bound_mb']:>5} MB{r['wall_s']:>7}s"
        )
    base = result["first_token_s"]["no file"]
    for name, t in result["first_token_s"].items():
        print(f"first token, {name:<24}{t:6.3f} s  (+{t - base:.3f} s)")


if __name__ == "__main__":
    main()
