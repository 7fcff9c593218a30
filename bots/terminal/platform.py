"""What the core knows of the terminal (:class:`core.platforms.Platform`, registered as the
entry point ``cli`` in ``pyproject.toml``) and how answers stream in a terminal.

Keys: users ``cli:{name}`` (a bare name on the command line means the same), conversations
``cli:{name}:terminal:{session}``. A terminal chat is its user's DM outside any workspace: no
links, no mentions, no allow-lists (whoever runs it owns the database), no channels.
"""

from __future__ import annotations

from core.platforms import LOCAL, Platform
from core.streaming.reply import StreamConfig

#: Seconds between two renderings of a streaming answer (a Markdown parse each).
EDIT_INTERVAL_S = 0.1

TERMINAL = Platform(name=LOCAL, title="the terminal")


def stream_config() -> StreamConfig:
    """How an answer streams in a terminal: no length limit worth rolling over at, no
    "still writing" marker in the text (a spinner under it says so), no placeholder."""
    return StreamConfig(
        max_chars=1_000_000,
        edit_interval_s=EDIT_INTERVAL_S,
        writing_marker="",
        placeholder=None,
        status_text="thinking…",
    )
