"""What the core knows of the terminal (:class:`core.platforms.Platform`, registered as the
entry point ``cli`` in ``pyproject.toml``).

Keys: users ``cli:{name}`` (a bare name on the command line means the same), conversations
``cli:{name}:terminal:{session}``. A terminal chat is its user's DM outside any workspace: no
links, no mentions, no allow-lists (whoever runs it owns the database), no channels.
"""

from __future__ import annotations

from core.platforms import LOCAL, Platform

TERMINAL = Platform(name=LOCAL, title="the terminal")
