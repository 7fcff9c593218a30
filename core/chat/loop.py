"""The turn loop every adapter runs: recall -> prompt -> answer (streamed) -> reflect.

An adapter turns a platform event into an :class:`IncomingMessage` and iterates
``TurnLoop.answer(message)``, rendering the text deltas (``core.streaming.reply`` does it by
message edits). The loop:

1. stores the user's message first (so a crash loses nothing the user said);
2. recalls the user's top-k memories by BM25 (none when their memory is off; only memories
   usable where the message was said, by the place rule of :mod:`core.rules.places`: every
   memory in the owner's DM, elsewhere those learned in that same group DM or private
   channel, or in a public channel of the same workspace when asked in one; every memory
   everywhere with ``recall_private_in_channels``, the operator's opt-in);
3. builds the system prompt (cached persona, then the memory block) and the message list
   from the conversation's stored history;
4. reads the message's files, if any (:mod:`core.files`: the files all turns hold at once
   stay within ``SELFMIND_FILE_MEMORY_MB``, a turn waits until they fit), sent as content
   blocks with the current message only (the store and the history keep a placeholder
   line per file); a file not read gets one sentence, which the answer starts with;
5. streams Claude's answer and yields its text deltas;
6. stores the answer, the recalls of the memories its prompt carried (the standing profile
   and recall: :class:`core.store.seams.RecallLog`, in the same transaction) and queues the
   reflection in the background (not while memory is paused or off), so the reply never
   waits for it.

Before any Claude call the daily caps are checked (``LimitReached``, nothing stored). The
usage the API reports for each call is recorded, a stopped or failed one's too. An answer
that fails or is refused (``ModelError``) or stopped (the reader closes the stream, or the
task is cancelled) is not delivered: the user's message is not reflected on; the text shown
so far, if any, is stored with a mark saying it was cut (:data:`CUT_MARK`,
:data:`STOPPED_MARK`), and with nothing shown no answer is stored and later history leaves
the message out. A ``ModelError`` propagates to the adapter, which shows
``error.user_message``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, cast

from core.chat.controls import Controls
from core.chat.prompt import history_messages, system_blocks
from core.errors import ModelError
from core.files import FileReader, FileRef, ReadFiles, gone_note, placeholder_names
from core.files.budget import Reservation
from core.files.refs import with_placeholders
from core.memory.profile import MemoryContext, ProfileStore, build_context
from core.memory.query import recall_query
from core.memory.recall import BM25Recaller, MemorySearch, Recaller
from core.memory.reflection import LearnedCallback, Reflector
from core.memory.team import TeamMemory, TeamStore, parse_allowed
from core.metrics import Metrics
from core.model.claude import AnswerStream, ChatMessage, ChatModel, SystemBlock
from core.model.usage import usage_record
from core.rules.cleanup_ops import UNDO_WINDOW
from core.rules.dedupe import Deduper
from core.rules.links import speaker
from core.rules.places import owner_dm, place_of_conversation, usable_reaches
from core.rules.secrets import redact_secrets
from core.rules.text import clean_text
from core.settings import Settings
from core.store.seams import ClaimStore, CleanupStore, ModeStore, TurnStore, UsageStore
from core.types import MemoryMode, NewTurn, Origin, Place, UsageRecord, utcnow

logger = logging.getLogger(__name__)

PRUNE_EVERY = timedelta(hours=1)

CUT_MARK = "\n\n(This answer was cut off here: it failed before it finished.)"
STOPPED_MARK = "\n\n(The person stopped this answer here.)"
"""Stored after the part of an answer that was shown when it failed or was stopped, so
later turns see it was not a whole answer."""

EMPTY_MESSAGE = "(a message with no text)"
"""The text of a message left with nothing once cleaned (it held only control characters)."""


def _clean_message(text: str) -> str:
    cleaned = clean_text(text, keep_newlines=True)
    return cleaned if cleaned.strip() or not text else EMPTY_MESSAGE


def _clean_name(name: str | None) -> str | None:
    return None if name is None else clean_text(name, keep_newlines=False)


@dataclass(frozen=True)
class IncomingMessage:
    """One user message as the core sees it, whatever the platform.

    ``user_key``: ``slack:{team}:{user}`` | ``discord:{user}`` | ``cli:{name}``;
    ``conversation_key``: the DM, the thread root, or the terminal session;
    ``origin``: ``private`` (DM, terminal) or ``shared`` (a channel);
    ``where``: one line for the prompt, e.g. "a Slack channel thread".
    ``text`` and ``author`` are cleaned on construction (:func:`core.rules.text.clean_text`); a
    text left blank by that becomes ``EMPTY_MESSAGE``.
    """

    user_key: str
    conversation_key: str
    text: str
    origin: Origin
    sent_at: datetime
    author: str | None = None
    platform_ref: str | None = None
    where: str = "a private conversation"
    workspace: str | None = None
    thread_ref: str | None = None
    """The thread it was said in when ``conversation_key`` does not name it (a Slack DM
    thread's ``thread_ts``): stored with the turn (:attr:`core.types.Turn.thread_ref`)."""
    files: tuple[FileRef, ...] = ()
    """The message's files, read for the answer only (:mod:`core.files`); the store keeps
    a placeholder line for each (:attr:`stored_text`)."""
    place: Place | None = None
    """Where it was said (:class:`core.types.Place`): what may be recalled here, where what
    is learned from it may be used, and the channel whose own memory applies."""

    def __post_init__(self) -> None:
        # Message text enters the core here, whatever the adapter: cleaned once
        # (core.rules.text.clean_text, newlines and tabs kept), so the store, recall and the
        # prompt all see the same text.
        object.__setattr__(self, "text", _clean_message(self.text))
        object.__setattr__(self, "author", _clean_name(self.author))

    @property
    def stored_text(self) -> str:
        """What the store keeps: the text, then one placeholder line per file."""
        return with_placeholders(self.text, self.files)


def message_place(message: IncomingMessage) -> Place:
    """Where ``message`` was said: its ``place``, else (an adapter that gives none) the
    owner's DM for a private message and the place its conversation key names for a shared
    one (:func:`core.rules.places.place_of_conversation`: never wider than a channel)."""
    if message.place is not None:
        return message.place
    if message.origin == "private":
        return owner_dm(message.user_key)
    return place_of_conversation(message.conversation_key, user_key=message.user_key, shared=True)


@dataclass(frozen=True)
class ContextMessage:
    """Earlier platform messages (a thread read once) stored as history, never reflected."""

    text: str
    role: str = "user"
    author: str | None = None
    user_key: str | None = None
    sent_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _clean_message(self.text))
        object.__setattr__(self, "author", _clean_name(self.author))


class Delivery:
    """Defers storing an answer until the platform shows it (see :meth:`TurnLoop.answer`)."""

    def __init__(self) -> None:
        self.finish: Callable[[], Awaitable[None]] | None = None
        self.abandon: Callable[[], Awaitable[None]] | None = None

    async def done(self) -> None:
        """Store the answer, the call's usage and queue its reflection, in one transaction;
        call once the platform shows it. Does nothing when the answer never started (e.g. a
        daily cap)."""
        finish, self.finish, self.abandon = self.finish, None, None
        if finish is not None:
            await finish()

    async def failed(self) -> None:
        """The platform could not show the answer: record only what its Claude call cost
        (the turn stays unanswered, to be answered again). Does nothing after ``done``."""
        abandon, self.finish, self.abandon = self.abandon, None, None
        if abandon is not None:
            await abandon()


class LoopStore(
    TurnStore,
    ModeStore,
    UsageStore,
    CleanupStore,
    MemorySearch,
    ProfileStore,
    ClaimStore,
    Protocol,
):
    """What the turn loop uses of the store: turns, modes, usage (caps), the purge after the
    cleanup undo window, BM25 search (the default recall), the standing memories and count
    (the profile), and the claims and marks its message intake (:mod:`core.chat.intake`)
    takes."""


class TurnLoop:
    """Runs turns over one store, one model and one reflector."""

    def __init__(
        self,
        *,
        store: LoopStore,
        model: ChatModel,
        reflector: Reflector,
        settings: Settings,
        clock: Callable[[], datetime] = utcnow,
        metrics: Metrics | None = None,
        recaller: Recaller | None = None,
        files: FileReader | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.files = files or FileReader.from_settings(settings)
        self.store = store
        self.recaller: Recaller = recaller or BM25Recaller(store)
        self.model = model
        self.reflector = reflector
        self.settings = settings
        self.clock = clock
        self.controls = Controls(settings, store)
        self._deduper = Deduper(settings.dedupe_threshold)
        self._last_prune: datetime | None = None
        self.team = TeamMemory(
            cast(TeamStore, store),
            deduper=Deduper(settings.dedupe_threshold),
            budget_tokens=settings.channel_memory_tokens,
            admins=parse_allowed(settings.channel_memory_admins),
            clock=clock,
        )
        """A channel's own memory (:mod:`core.memory.team`), read on every channel message."""

    async def start(self, *, on_learned: LearnedCallback | None = None) -> None:
        """Start-up work: prune old turns and resume reflections left pending, reporting
        what they learn to ``on_learned`` (:meth:`Reflector.start`)."""
        await self._maybe_prune(force=True)
        await self.reflector.start(on_learned=on_learned)

    async def shutdown(self, timeout_s: float | None = None) -> bool:
        """Let queued reflections finish (bounded), then stop; unfinished ones stay pending."""
        drained = await self.reflector.drain(
            self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        )
        await self.reflector.close()
        return drained

    def _reach(self, message: IncomingMessage) -> list[str] | None:
        return usable_reaches(
            message_place(message), private_in_channels=self.settings.recall_private_in_channels
        )

    async def memory_context(
        self,
        message: IncomingMessage,
        *,
        mode: MemoryMode | None = None,
        previous: str | None = None,
    ) -> MemoryContext:
        """What this message's prompt carries of the user's memory: the standing profile
        (``profile_tokens``), recall's ``top_k`` of the rest, the count stored, and whether
        the message asks about the memory itself (:func:`core.memory.profile.build_context`).
        ``mode``: the user's memory mode when the caller has read it already (``off``:
        nothing); ``previous``: the conversation's previous user message, for recall.
        Only the memories usable where it was said (:mod:`core.rules.places`)."""
        if mode is None:
            mode = await self.store.get_mode(user_key=message.user_key)
        return await build_context(
            store=self.store,
            recaller=self.recaller,
            user_key=message.user_key,
            message=message.text,
            query=recall_query(message.text, previous),
            k=self.settings.top_k,
            reach=self._reach(message),
            budget_tokens=self.settings.profile_tokens,
            mode=mode,
            today=self.clock().date(),
            deduper=self._deduper,
        )

    async def seed_context(
        self, *, conversation_key: str, origin: Origin, messages: Sequence[ContextMessage]
    ) -> None:
        """Store earlier platform messages as history (a thread the bot joins late), their
        secrets redacted (:func:`core.rules.secrets.redact_secrets`): they are context, never
        answered themselves."""
        for m in messages:
            await self.store.add_turn(
                turn=NewTurn(
                    conversation_key=conversation_key,
                    user_key=m.user_key,
                    role="assistant" if m.role == "assistant" else "user",
                    text=redact_secrets(m.text),
                    origin=origin,
                    sent_at=m.sent_at or self.clock(),
                    author=m.author,
                )
            )

    async def receive(self, message: IncomingMessage) -> int:
        """Check the daily caps and store the user's message durably; returns its turn id.

        Adapters call it before acknowledging a platform event, so a crash after the
        acknowledgement cannot lose the message; ``answer(message, turn_id=...)`` answers it.
        Raises ``LimitReached`` (nothing stored).
        """
        turn_id = await self.receive_claimed(message, claim_keys=None)
        assert turn_id is not None
        return turn_id

    async def receive_claimed(
        self, message: IncomingMessage, *, claim_keys: Sequence[str] | None
    ) -> int | None:
        """:meth:`receive`, claiming the platform event by ``claim_keys`` in the same
        transaction (``receive_turn``): None, nothing stored, when it was claimed before.
        ``claim_keys=None``: no claim (then never None). Raises ``LimitReached``."""
        await self.controls.check_limits(
            user_key=message.user_key, workspace=message.workspace, now=self.clock()
        )
        await self._maybe_prune()
        turn = NewTurn(
            conversation_key=message.conversation_key,
            user_key=message.user_key,
            role="user",
            text=message.stored_text,
            origin=message.origin,
            sent_at=message.sent_at,
            author=message.author,
            reflection="answering",
            platform_ref=message.platform_ref,
            workspace=message.workspace,
            thread_ref=message.thread_ref,
            place=message_place(message),
        )
        if claim_keys is None:
            turn_id: int | None = await self.store.add_turn(turn=turn)
        else:
            turn_id = await self.store.receive_turn(claim_keys=claim_keys, turn=turn)
        if turn_id is not None:
            self.metrics.message_received(message.user_key)
        return turn_id

    async def answer(
        self,
        message: IncomingMessage,
        *,
        turn_id: int | None = None,
        delivery: Delivery | None = None,
    ) -> AsyncIterator[str]:
        """Run one turn; yields the answer's text deltas. Raises ``ModelError`` on failure
        and ``LimitReached`` at a daily cap.

        ``turn_id`` names the user turn already stored by :meth:`receive` (or left
        ``answering`` by a crash and redelivered by the platform): it is answered without
        being stored twice.

        With a ``delivery``, the answer is stored only when the adapter calls
        ``delivery.done()`` after the platform shows it whole: a crash before that leaves the
        message unanswered in the store, so it is answered again after a restart rather than
        left cut on screen.
        """
        started = time.monotonic()
        if turn_id is None:
            turn_id = await self.receive(message)
        history = await self.store.recent_turns(
            conversation_key=message.conversation_key,
            limit=2 * self.settings.history_turns,
            before_id=turn_id,
        )
        mode = await self.store.get_mode(user_key=message.user_key)  # read once a turn
        previous = next((t.text for t in reversed(history) if t.role == "user"), None)
        memory = await self.memory_context(message, mode=mode, previous=previous)
        channel = await self.team.context(
            place=message.place,
            query=recall_query(message.text, previous),
            k=self.settings.top_k,
        )
        logger.info(
            "turn=%s user=%s conversation=%s profile=%d recalled=%d stored=%d question=%s"
            " history=%d channel=%d",
            turn_id,
            message.user_key,
            message.conversation_key,
            len(memory.profile),
            len(memory.recalled),
            memory.stored,
            memory.question,
            len(history),
            -1 if channel is None else len(channel.ids),
        )
        shared = message.origin == "shared"
        label = speaker(message.user_key, message.author) if shared else None
        system = system_blocks(
            memory,
            now=self.clock(),
            where=f"This is {message.where}.",
            user_name=message.author,
            user_label=label,
            channel=channel,
        )
        holding = self.files.hold(message.files) if message.files else contextlib.nullcontext()
        async with holding as held:
            read = ReadFiles() if held is None else await self.files.read(message.files, held=held)
            notes = list(read.notes)
            gone = [] if message.files else placeholder_names(message.text)
            if gone:  # answered again after a restart: the files were never kept
                notes.append(gone_note(gone))
            current = message.stored_text
            if notes:
                current += "\n\n(Shown to the person above your answer: " + " ".join(notes) + ")"
            messages = history_messages(
                history,
                current,
                attribute=shared,
                current_author=label,
                files=read.blocks,
            )
            del read
            prefix = "".join(f"_{note}_\n" for note in notes) + "\n" if notes else ""
            answer = self._stream(
                message, turn_id, system, messages, mode, prefix, delivery, started, memory.ids,
                held,
            )  # fmt: skip
            del messages  # the stream holds the files until the request is sent, no longer
            async with contextlib.aclosing(answer):
                async for delta in answer:
                    yield delta

    async def _stream(
        self,
        message: IncomingMessage,
        turn_id: int,
        system: Sequence[SystemBlock],
        messages: Sequence[ChatMessage],
        mode: MemoryMode,
        prefix: str,
        delivery: Delivery | None,
        started: float,
        in_prompt: Sequence[int],
        held: Reservation | None = None,
    ) -> AsyncGenerator[str, None]:
        parts: list[str] = []
        failed: ModelError | None = None
        stopped = False
        # The files' budget goes back once the request is sent (its body let go), not when
        # the answer ends: a long answer, its thinking first, no longer holds up the next
        # turn with files.
        stream = self.model.stream(
            system=system,
            messages=messages,
            on_sent=None if held is None else (lambda: held.shrink(0)),
        )
        del messages  # the files' bytes: held by the stream until its request is sent
        try:
            if prefix:
                parts.append(prefix)
                yield prefix
            async for delta in stream:
                parts.append(delta)
                yield delta
            self.metrics.answered(started)
        except ModelError as exc:  # failed or refused (StreamCutError: cut midway)
            failed = exc
            raise
        except (GeneratorExit, asyncio.CancelledError):  # stopped (Ctrl-C, shutdown)
            stopped = True
            raise
        finally:
            await stream.aclose()
            usage = self._usage(stream, message, turn_id)  # what the API reported, always
            # Not delivered (failed, refused, stopped): never reflected on. What was shown is
            # stored marked as cut; with nothing shown no answer is stored, and later history
            # leaves the message out (prompt.answered): it is never glued to the next one.
            delivered = failed is None and not stopped
            text = "".join(parts) if any(parts[bool(prefix) :]) else ""
            if text and not delivered:
                text += CUT_MARK if failed is not None else STOPPED_MARK
            reflect = mode == "on" and delivered
            # The memories this prompt carried count as recalled once the answer is delivered
            # (with a delivery: once the platform shows it).
            recalled = in_prompt if delivered else ()
            finish = functools.partial(
                self._finish, turn_id, message.user_key, text, failed, reflect, usage, recalled
            )
            if delivery is None:
                await finish()
            else:
                delivery.finish = finish
                delivery.abandon = functools.partial(self._record_usage, usage)

    def _usage(
        self, stream: AnswerStream, message: IncomingMessage, turn_id: int
    ) -> list[UsageRecord]:
        usage = stream.usage
        if usage is None:
            return []
        return [
            usage_record(
                user_key=message.user_key,
                workspace=message.workspace,
                kind="chat",
                model=self.settings.chat_model,
                usage=usage,
                turn_id=turn_id,
            )
        ]

    async def _record_usage(self, usage: Sequence[UsageRecord]) -> None:
        for record in usage:
            await self.store.record_usage(usage=record)

    async def _finish(
        self,
        turn_id: int,
        user_key: str,
        answer: str,
        failed: ModelError | None,
        reflect: bool,
        usage: Sequence[UsageRecord],
        recalled: Sequence[int],
    ) -> None:
        # One transaction: the call's usage, the answer, the reflection queued, the recalls
        # of the memories in its prompt. A mode changed since the turn began already stopped
        # its reflection (``set_mode``).
        answer = clean_text(answer, keep_newlines=True)
        await self.store.finish_turn(
            turn_id=turn_id, answer=answer, reflect=reflect, usage=usage, recalled=recalled
        )
        if failed is not None:
            logger.info("turn=%s answer failed: %s", turn_id, type(failed).__name__)
        if reflect:
            self.reflector.submit(turn_id=turn_id, user_key=user_key)

    async def _maybe_prune(self, *, force: bool = False) -> None:
        now = self.clock()
        if not force and self._last_prune and now - self._last_prune < PRUNE_EVERY:
            return
        self._last_prune = now
        cutoff = now - timedelta(days=self.settings.history_retention_days)
        pruned = await self.store.prune_turns(older_than=cutoff)
        erased = await self.store.purge_retired(older_than=now - UNDO_WINDOW)
        if erased:
            logger.info("erased %d memories retired by cleanups past the undo window", erased)
        if pruned:
            logger.info(
                "pruned %d turns older than %s days", pruned, self.settings.history_retention_days
            )
