"""Logging set-up, in one place: ``SELFMIND_LOG_FORMAT=text`` (one human line a record) or
``json`` (one JSON object a line, by python-json-logger).

Both carry the same fields: time, level, logger, message, plus any ``extra={...}`` a call
passes (and the traceback, when there is one). Text: ``TIME LEVEL LOGGER: MESSAGE``; JSON:
``{"time": ISO-8601 UTC, "level": ..., "logger": ..., "message": ..., **extras}``.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

QUIET_AT_INFO = ("httpx", "httpx2")
"""Libraries whose INFO lines are per-request noise, raised to WARNING unless ``level`` is
DEBUG: the HTTP client under the Anthropic SDK logs ``HTTP Request: POST ... 200 OK`` for every
Claude call, two a turn, which the bot's own turn lines already cover."""


def configure_logging(
    *, level: str, fmt: Literal["text", "json"] = "text", stream: TextIO | None = None
) -> None:
    """Send every record at ``level`` or above to ``stream`` (default stderr) in ``fmt``,
    replacing handlers set up before (so a second call in one process does not double lines).
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "{levelname}{name}{message}",
                style="{",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
                json_ensure_ascii=False,
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    debug = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
    for name in QUIET_AT_INFO:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else logging.WARNING)
