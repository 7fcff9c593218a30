"""Files through the real bot: memory under a burst of large PDFs, and what an image adds to
the time to the first answer token.

    python bench/files.py [--users 20] [--pdf-mb 30] [--accepted-mb 22] [--image-mb 5]
                          [--baseline [COMMIT]] [--json]

Each scenario starts the real bot (``selfmind slack --http``, a child process on a fresh
SQLite file) against the fake Slack (which hosts the files as Slack does: ``url_private``,
a same-host redirect, the bot token) and the fake Anthropic API (which decodes and checks
every file as the API would, in this process). Scenarios, each ``--users`` users sending one
DM at once:

- ``text``: the burst without files;
- ``pdf N MB, cap 30``: each DM carries an N MB PDF (``--pdf-mb``, default 30) with
  ``SELFMIND_FILE_MAX_MB=30``: refused from its declared size before any download, since
  its base64 could not fit the API's 32 MB request;
- ``pdf M MB sent``: each DM carries an M MB PDF (``--accepted-mb``, default 22: the largest
  whose base64 fits a request, read with ``SELFMIND_FILE_MAX_MB=30``) that is read and sent
  to Claude: the most an accepted file costs; again with half the users.

Columns: ``peak RSS`` the bot process's ``VmHWM`` (``/proc/PID/status``) at the end of the
burst; ``over text`` its excess over the text burst; ``bound`` the bound held: 1.5 times the
text burst's peak plus the bytes of the files held at once (``held``: as many files as
``SELFMIND_FILE_MEMORY_MB`` (100) holds, at least one; the baseline's
``SELFMIND_FILE_CONCURRENCY`` held 4). ``wall``: the burst's time until every DM shows its
whole answer.

``copies``: one PDF of ``--accepted-mb`` MB read and sent alone in a child process under
``tracemalloc`` (the fake in this process): the peak of Python's allocations while it is read
(``prepare``), while its request is sent (to the first answer token), and what is still
allocated as the answer streams, each over the file's size (the downloaded bytes count 1;
what the client allocated before the request is left out of the last two).

``--baseline`` runs the bursts and the copies of another commit too (default: ``git
merge-base HEAD main``), checked out with ``git worktree`` into a temporary folder
(``bench/load.py``'s ``baseline_tree``), in the same run: both tables side by side.

Then ``first token``: one DM alone, the time from sending it to the first Slack call showing
the model's text, with no file, with an ``--image-mb`` MB photo-like JPEG (passed as is), and
with an ``--image-mb`` MB PNG screenshot of noise (over the API's 5 MB base64 limit: scaled
to 1568 px and re-encoded). Median of 3 each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image

from bench.load import baseline_tree, merge_base
from bench.replay_locomo import REPO_ROOT, BotProcess
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_files import file_share
from tests.fakes.slack_server import FakeSlack, running_fake_slack, shown_markdown
from tests.files_helpers import pdf

ANSWER = "ANSWER-TEXT: read and done."
MEMORY_MB = 100
BASELINE_SLOTS = 4
BIG_FILES = {"SELFMIND_FILE_MAX_MB": "30"}


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
    repo: Path = REPO_ROOT,
) -> dict[str, Any]:
    bot = BotProcess(work / f"{name}.db", slack, claude, work / f"{name}.log", repo=repo)
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
        "users": users,
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


COPIES_CHILD = r"""
import asyncio, sys, tracemalloc
from pathlib import Path
from core.files.prepare import prepare
from core.files.refs import FileRef
from core.model.claude import ChatMessage, ClaudeChatModel, SystemBlock

async def main(path, base_url):
    tracemalloc.start()
    data = bytearray(Path(path).read_bytes())  # as a download holds it
    size = len(data)
    tracemalloc.reset_peak()
    block = prepare(FileRef("big.pdf"), data, max_side=8000, max_text_chars=1000).block
    del data
    read = tracemalloc.get_traced_memory()[1]
    held = tracemalloc.get_traced_memory()[0]
    model = ClaudeChatModel(api_key="sk-ant-bench", base_url=base_url, chat_model="m",
                            reflection_model="m", max_tokens=100, memory_max_tokens=100)
    stream = model.stream(system=[SystemBlock("hi")],
                          messages=[ChatMessage("user", "Read it", files=(block,))])
    del block
    before = tracemalloc.get_traced_memory()[0] - size  # all but the file
    tracemalloc.reset_peak()
    async for _ in stream:
        sent = tracemalloc.get_traced_memory()[1]
        streaming = tracemalloc.get_traced_memory()[0]
        break
    async for _ in stream:
        pass
    await model.aclose()
    print(size, held, read, sent - before, streaming - before)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def copies(repo: Path, pdf_path: Path, base_url: str) -> dict[str, float]:
    """The PDF at ``pdf_path`` read and sent by the code of ``repo`` under tracemalloc (see
    the module docstring); each figure over the file's size."""
    out = subprocess.run(
        [sys.executable, "-c", COPIES_CHILD, str(pdf_path), base_url],
        check=True,
        capture_output=True,
        text=True,
        cwd=pdf_path.parent,
        env={**os.environ, "PYTHONPATH": str(repo)},
    ).stdout.split()
    size, held, read, sent, streaming = map(int, out[-5:])
    return {
        "held_x": round(held / size, 2),
        "read_peak_x": round(read / size, 2),
        "send_peak_x": round(sent / size, 2),
        "streaming_x": round(streaming / size, 2),
    }


async def tree_rows(
    slack: FakeSlack,
    claude: FakeAnthropic,
    work: Path,
    args: argparse.Namespace,
    *,
    label: str,
    repo: Path,
    accepted: bytes,
    refused: bytes | None,
) -> list[dict[str, Any]]:
    def name(scenario: str) -> str:
        return f"{label}: {scenario}"

    rows = [await burst(slack, claude, work, name("text"), args.users, None, {}, repo)]
    if refused is not None:
        rows.append(
            await burst(
                slack,
                claude,
                work,
                name(f"pdf {args.pdf_mb:g} MB, cap 30"),
                args.users,
                refused,
                BIG_FILES,
                repo,
            )
        )
    sent = f"pdf {args.accepted_mb:g} MB sent"
    rows.append(await burst(slack, claude, work, name(sent), args.users, accepted, BIG_FILES, repo))
    half = args.users // 2
    rows.append(
        await burst(
            slack, claude, work, name(f"{sent}, {half} users"), half, accepted, BIG_FILES, repo
        )
    )
    text = rows[0]["peak_rss_mb"]
    for row in rows:
        row["tree"] = label
        row["over_text_mb"] = row["peak_rss_mb"] - text
        size = row["file_mb"]
        slots = BASELINE_SLOTS if label == "base" else max(1, int(MEMORY_MB // size)) if size else 0
        row["held"] = min(slots, row["users"]) if "sent" in row["scenario"] else 0
        row["bound_mb"] = round(1.5 * text + row["held"] * size)
    return rows


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    trees: list[tuple[str, Path]] = [("this", REPO_ROOT)]
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        if args.baseline is not None:
            commit = args.baseline or merge_base()
            print(f"baseline: {commit[:12]} (git worktree)")
            trees.insert(0, ("base", stack.enter_context(baseline_tree(commit))))
        async with (
            running_fake_slack() as slack,
            running_fake_anthropic(responder=lambda body: ANSWER) as claude,
        ):
            accepted = big_pdf(args.accepted_mb)
            refused = big_pdf(args.pdf_mb)
            pdf_path = work / "big.pdf"
            pdf_path.write_bytes(accepted)
            rows: list[dict[str, Any]] = []
            copied: dict[str, dict[str, float]] = {}
            for label, repo in trees:
                copied[label] = await asyncio.to_thread(copies, repo, pdf_path, claude.base_url)
                claude.requests.clear()
                rows += await tree_rows(
                    slack,
                    claude,
                    work,
                    args,
                    label=label,
                    repo=repo,
                    accepted=accepted,
                    refused=refused if label == "this" else None,
                )
                claude.requests.clear()
            firsts: dict[str, float] = {}
            if not args.no_first_token:
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
    return {"bursts": rows, "copies": copied, "first_token_s": firsts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--pdf-mb", type=float, default=30)
    parser.add_argument("--accepted-mb", type=float, default=22)
    parser.add_argument("--image-mb", type=float, default=5)
    parser.add_argument("--baseline", nargs="?", const="", default=None, metavar="COMMIT")
    parser.add_argument("--no-first-token", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.users} users at once; this tree SELFMIND_FILE_MEMORY_MB={MEMORY_MB}")
    print(
        f"{'scenario':<34}{'peak RSS':>10}{'over text':>11}{'held':>6}{'bound':>9}"
        f"{'holds':>7}{'wall':>8}"
    )
    for r in result["bursts"]:
        holds = "yes" if r["peak_rss_mb"] <= r["bound_mb"] else "NO"
        print(
            f"{r['scenario']:<34}{r['peak_rss_mb']:>7} MB{r['over_text_mb']:>8} MB{r['held']:>6}"
            f"{r['bound_mb']:>6} MB{holds:>7}{r['wall_s']:>7}s"
        )
    print(f"copies of one {args.accepted_mb:g} MB PDF (x its size; tracemalloc)")
    print(f"{'tree':<8}{'held read':>11}{'read peak':>11}{'send peak':>11}{'streaming':>11}")
    for label, c in result["copies"].items():
        print(
            f"{label:<8}{c['held_x']:>10.2f}x{c['read_peak_x']:>10.2f}x"
            f"{c['send_peak_x']:>10.2f}x{c['streaming_x']:>10.2f}x"
        )
    firsts = result["first_token_s"]
    if firsts:
        base = firsts["no file"]
        for name, t in firsts.items():
            print(f"first token, {name:<24}{t:6.3f} s  (+{t - base:.3f} s)")


if __name__ == "__main__":
    main()
