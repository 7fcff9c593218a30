"""Terminal chat: the third thin adapter (``selfmind chat``).

Inputs starting with ``/`` are memory commands and need no API key::

    /remember TEXT   /forget ID   /forget all   /memories [QUERY]   /stats
    /memory pause|resume|off|on   /attach PATH   /help   /quit

Anything else is a chat message for Claude.

- In a terminal (standard input and output both ttys): line editing and an input history
  file per user, which forgetting reaches (:mod:`bots.terminal.history`), the answer
  rendered as Markdown while it streams, Ctrl-C to stop an answer, ``/forget all`` asks
  first; logs go to a file named in ``/help`` (see :mod:`bots.terminal.tty`).
- Otherwise (a pipe, a script): one message per line, plain text, no ANSI, logs on
  standard error as configured; at end of input pending work is finished and the program
  exits 0.

At the start, a line of this user's left without an answer in the last
``core.chat.intake.RECOVERY_WINDOW`` (a kill while its answer streamed, or an answer that
failed before any of it showed) is answered once, under a line saying so
(:meth:`bots.terminal.chat.TerminalChat.recover`), by the same intake rules as Slack and
Discord, unless another chat of that user is open on this machine (its line may be answering
now). An answer is stored before its last character is written
(:meth:`bots.terminal.chat.TerminalChat._watched`), so a kill never leaves a whole answer on
screen that the next start writes again.

:func:`bots.terminal.run.run_terminal` runs it. This package imports nothing, so the core
reading :mod:`bots.terminal.platform` (the terminal's description) loads no chat machinery.
"""
