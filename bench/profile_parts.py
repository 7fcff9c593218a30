"""Where a bot's CPU goes, by part of a turn, from ``bench/load.py --profile DIR``'s samples.

    python bench/profile_parts.py DIR [--cpu LABEL=MS ...]

Reads each py-spy ``raw`` file in DIR (one line a distinct stack: ``frame;frame;... count``,
written with ``--gil``, so a sample is a moment the bot's Python held the interpreter) and
puts every sample in one part: the first of :data:`PARTS` whose marker appears in its stack
(so the store's share inside a reflection counts as the store's; the stack of the bot's main
task, which only starts and stops it, is start-up). Samples under an import are
left out: they are start-up, not turns. ``--cpu base-sqlite-200-0=24.4`` (a file's name
without ``.txt``, and the CPU ms per turn bench/load.py printed for that run) turns the
file's shares into ms per turn.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up and shut-down", ("open_slack_bot",)),
    ("store (SQL, its thread hand-off)", ("core/store/",)),
    ("recall (BM25, fusion)", ("core/memory/recall.py", "core/memory/semantic.py")),
    ("status indicator (setStatus)", ("StatusIndicator.show",)),
    ("answer edits (chat.update)", ("SlackReplySink._edit", "SlackReplySink.edit")),
    ("answer post (chat.postMessage)", ("SlackReplySink._post", "SlackReplySink.post")),
    ("answer stream (Anthropic SDK)", ("_ClaudeAnswerStream",)),
    ("reflection call (Anthropic SDK)", ("ClaudeChatModel.extract",)),
    ("reflection, rest", ("core/memory/reflection.py",)),
    ("event in (HTTP server, Bolt)", ("SlackBot._http_events", "aiohttp/web_protocol.py")),
    (
        "streaming, intake, turn loop (ours)",
        ("core/chat/", "core/streaming/", "core/memory/", "core/model/", "bots/slack_bot/"),
    ),
    ("event loop and I/O callbacks", ("",)),
)
"""(part, markers): a sample belongs to the first part with a marker in its stack."""


def shares(path: Path) -> tuple[Counter[str], int]:
    """Samples per part of one raw file, and the total counted."""
    parts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or "_find_and_load" in stack:
            continue
        total += int(count)
        for name, markers in PARTS:
            if any(marker in stack for marker in markers):
                parts[name] += int(count)
                break
    return parts, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--cpu", nargs="*", default=[], metavar="LABEL=MS")
    args = parser.parse_args()
    cpu = {k: float(v) for k, v in (item.split("=", 1) for item in args.cpu)}
    files = sorted(args.dir.glob("*.txt"))
    if not files:
        raise SystemExit(f"no py-spy raw files in {args.dir}")
    counted = {f.stem: shares(f) for f in files}
    unit = "ms/turn" if cpu else "share"
    print(f"{'part of a turn':<36}" + "".join(f"{f.stem:>22}" for f in files) + f"   ({unit})")
    for name, _ in PARTS:
        cells = []
        for f in files:
            parts, total = counted[f.stem]
            share = parts[name] / total if total else 0.0
            cells.append(f"{share * cpu[f.stem]:>22.2f}" if f.stem in cpu else f"{share:>22.1%}")
        print(f"{name:<36}" + "".join(cells))
    print(f"{'samples':<36}" + "".join(f"{counted[f.stem][1]:>22}" for f in files))


if __name__ == "__main__":
    main()
