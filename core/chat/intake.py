"""Message intake: the rules that keep a platform message from being lost or answered twice,
once for every platform adapter.

An adapter turns a platform event into an :class:`core.chat.loop.IncomingMessage` and a few
keys, and calls:

1. :meth:`Intake.receive` before it acknowledges the event (Slack) or before anything shows
   (Discord): the message is **claimed** in the store by its ``claim_keys`` (a duplicate
   delivery, a gateway replay, a retry, also across restarts, is dropped), and **stored**
   (``TurnLoop.receive``) before the acknowledgement. A store failure raises
   :class:`core.errors.IntakeFailed`: acknowledge nothing. A second delivery that arrives
   while the first is still being stored shares its outcome; one that arrives while the
   message is being answered in this process is dropped, and so is one another live process
   sharing the store has claimed (``event_claimed_elsewhere``). A claimed message whose
   stored turn has no answer (the process that claimed it died mid-answer) is an
   **interrupted** one: it is answered on the stored turn (``Received.resume``).
2. :meth:`Intake.respond` after the acknowledgement: an interrupted answer is answered only
   if the turn still has none, **into the messages it left on screen**
   (:meth:`ReplyPlace.shown_reply`: the first is edited into the new answer, the rest are
   deleted), so the user sees one answer. The answer is **stored once the platform shows it
   whole** (``Delivery.done`` after :meth:`ReplyPlace.show` returned): a crash, or a
   platform error, before that leaves the turn unanswered.
3. :meth:`Intake.unanswered` and :meth:`Intake.recovered` at **start-up**: user messages
   stored within :data:`RECOVERY_WINDOW` that have no answer (a crash after the
   acknowledgement: the platform will not redeliver them) are claimed by one live process
   (``recover:{turn_id}``, a claim that outlives no process that held it, so a recovery that
   dies too is recovered at the next start) and answered as interrupted ones.

The platform's part sits behind :class:`ReplyPlace` (find what a crash left, show the
answer, say one line); the adapter builds one per message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from core.chat.admission import Admission
from core.chat.loop import Delivery, IncomingMessage, TurnLoop
from core.errors import IntakeFailed, LimitReached, storage_failed
from core.types import Turn, utcnow

logger = logging.getLogger(__name__)

RECOVERY_WINDOW = timedelta(minutes=10)
"""How old an unanswered stored message may be and still be answered at start-up."""


class ReplyPlace(Protocol):
    """Where the answer to one platform message is shown (the adapter's side of the intake).

    Message handles are the platform's message ids as strings (Slack ``ts``, Discord
    snowflake), oldest first.
    """

    async def shown_reply(self) -> list[str]:
        """The handles of the bot's messages already on the platform in answer to this
        message (what a crash or a failed final edit left), oldest first; empty when none
        or the platform cannot be read."""
        ...

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        """Stream ``deltas`` into the platform; ``reuse[0]`` (if any) is edited into the
        answer instead of posting a new message, ``reuse[1:]`` are deleted. Returns once
        the platform shows the whole answer; raises the platform's error otherwise."""
        ...

    async def say(self, text: str) -> None:
        """Post one short line instead of an answer (e.g. ``NOT_ENABLED``)."""
        ...


@dataclass(frozen=True)
class Received:
    """What :meth:`Intake.receive` decided: a stored turn to answer, a cap already reached
    (``limit``: the answer is that note), or one line instead of an answer (``say``)."""

    turn_id: int | None
    flight_key: str
    say: str | None = None
    limit: LimitReached | None = None
    resume: bool = False
    """An interrupted answer: answer it only if it still has none, into what it left."""


async def _failing(error: LimitReached) -> AsyncIterator[str]:
    """An answer stream that fails at once (a daily cap reached before any Claude call)."""
    raise error
    yield ""  # pragma: no cover - makes this an async generator


async def with_prefix(prefix: str | None, deltas: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """``prefix`` (if any), then ``deltas``; closing this closes ``deltas`` too."""
    try:
        if prefix:
            yield prefix
        async for delta in deltas:
            yield delta
    finally:
        close = getattr(deltas, "aclose", None)
        if close is not None:
            await close()


class Intake:
    """The durable intake of one process over one turn loop (and its store)."""

    def __init__(self, *, loop: TurnLoop, admission: Admission | None = None) -> None:
        self.loop = loop
        self.store = loop.store
        self.admission = admission or Admission(max_turns=loop.settings.max_concurrent_turns)
        """Answers (not acknowledgements) wait here: :mod:`core.chat.admission`."""
        self._in_flight: set[str] = set()
        self._intakes: dict[str, asyncio.Future[bool]] = {}

    # --- small questions adapters ask (so they need no store)

    async def once(self, mark: str) -> bool:
        """True the first time ``mark`` is asked for (a first-DM notice, a thread read
        once), False after that, also across restarts."""
        return await self.store.mark_once(mark=mark)

    async def has_history(self, conversation_key: str) -> bool:
        """True when anything is stored for the conversation (the bot takes part in it)."""
        return bool(await self.store.recent_turns(conversation_key=conversation_key, limit=1))

    async def record_reply(self, *, turn_id: int, handles: Sequence[str]) -> None:
        """Record the platform messages the answer to ``turn_id`` shows so far, for a
        platform that cannot mark them as answers (a Slack stream takes no metadata until it
        stops): after a crash, :meth:`recorded_reply` names them for ``ReplyPlace.shown_reply``.
        A store failure is logged and not raised: the answer goes on."""
        try:
            await self.store.set_reply_ref(turn_id=turn_id, reply_ref=" ".join(handles))
        except Exception as exc:
            logger.warning(
                "could not record the reply to turn %s: %s",
                turn_id,
                type(exc).__name__,
                exc_info=not storage_failed(exc),
            )

    async def recorded_reply(self, *, turn_id: int) -> list[str]:
        """The handles :meth:`record_reply` recorded for ``turn_id``, oldest first."""
        turn = await self.store.get_turn(turn_id=turn_id)
        return turn.reply_ref.split() if turn is not None and turn.reply_ref else []

    # --- 1. before the acknowledgement

    async def receive(
        self,
        incoming: IncomingMessage,
        *,
        flight_key: str,
        claim_keys: Sequence[str],
        say: str | None = None,
        before_store: Callable[[], Awaitable[None]] | None = None,
    ) -> Received | None:
        """Claim and store ``incoming``; returns what to answer, or None when there is
        nothing to (a duplicate, in flight, claimed by another live process, answered).

        ``flight_key`` names the platform message in this process (e.g. channel + ts);
        ``claim_keys`` are claimed in the store (all of a message's ids). ``say``: answer
        with this one line instead (nothing stored). ``before_store`` runs just before the
        message is stored, only when it is new (e.g. an unseen thread's earlier messages).

        Once it returns, the message is stored: pass the result to :meth:`respond` (which
        ends the flight). Raises ``IntakeFailed`` when it could not be stored.
        """
        pending = self._intakes.get(flight_key)
        if pending is not None:
            if not await asyncio.shield(pending):
                raise IntakeFailed(f"message {flight_key}: its first delivery failed")
            logger.info("message %s: duplicate of a message just stored", flight_key)
            return None
        if flight_key in self._in_flight:
            logger.info("message %s: duplicate of a message in flight", flight_key)
            return None
        self._in_flight.add(flight_key)
        stored: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._intakes[flight_key] = stored
        received: Received | None = None
        handled = False  # stored, or rightly ignored: either way the event may be acked
        try:
            received = await self._intake(incoming, flight_key, claim_keys, say, before_store)
            handled = True
        except Exception as exc:
            logger.warning(
                "message %s not stored, so not acknowledged: %s",
                flight_key,
                type(exc).__name__,
                exc_info=not storage_failed(exc),  # a bug: keep its traceback
            )
            raise IntakeFailed(f"message {flight_key} could not be stored") from exc
        finally:
            del self._intakes[flight_key]
            stored.set_result(handled)
            if received is None:
                self._in_flight.discard(flight_key)
        return received

    async def _intake(
        self,
        incoming: IncomingMessage,
        flight_key: str,
        claim_keys: Sequence[str],
        say: str | None,
        before_store: Callable[[], Awaitable[None]] | None,
    ) -> Received | None:
        turn_id: int | None = None
        resume = False
        if say is None and before_store is None:
            # The common case: claim and store in one transaction (``receive_turn``).
            try:
                turn_id = await self.loop.receive_claimed(incoming, claim_keys=claim_keys)
            except LimitReached as exc:  # nothing stored: the claim alone, then the note
                if await self.store.claim_event(keys=claim_keys):
                    return Received(turn_id=None, flight_key=flight_key, limit=exc)
            else:
                if turn_id is not None:
                    return Received(turn_id=turn_id, flight_key=flight_key)
            claimed = False
        else:
            claimed = await self.store.claim_event(keys=claim_keys)
        if not claimed:
            if await self.store.event_claimed_elsewhere(keys=claim_keys):
                logger.info("message %s: another live process has it", flight_key)
                return None
            turn = None
            if incoming.platform_ref is not None:
                turn = await self.store.find_turn(
                    conversation_key=incoming.conversation_key, platform_ref=incoming.platform_ref
                )
            if turn is not None and await self.store.answer_to(turn_id=turn.id) is not None:
                logger.info("message %s: already answered", flight_key)
                return None
            if turn is None and say is not None:
                return None  # its one line was said before
            if turn is not None:
                # Answered by one live process: a start-up recovery of this very message
                # (here or in another replica) holds its claim; a dead one's passes to us.
                if not await self.store.claim_recovery(turn_id=turn.id):
                    logger.info("message %s: its recovery is under way", flight_key)
                    return None
                turn_id, resume = turn.id, True
            logger.info("message %s: answering an interrupted message", flight_key)
        if say is not None and turn_id is None:
            return Received(turn_id=None, flight_key=flight_key, say=say)
        limit: LimitReached | None = None
        if turn_id is None:
            if before_store is not None:
                await before_store()
            try:
                turn_id = await self.loop.receive(incoming)  # stored before the ack
            except LimitReached as exc:
                limit = exc
        return Received(turn_id=turn_id, flight_key=flight_key, limit=limit, resume=resume)

    # --- 3. at start-up

    async def unanswered(self, *, conversation_prefix: str) -> list[Turn]:
        """Stored user messages of the last :data:`RECOVERY_WINDOW` with no answer whose
        conversation key starts with ``conversation_prefix``, oldest first. Ask before
        reflections resume (``open_runtime(before_start=...)``)."""
        return await self.store.unanswered_turns(
            since=utcnow() - RECOVERY_WINDOW, conversation_prefix=conversation_prefix
        )

    async def recovered(self, turn: Turn, *, flight_key: str) -> Received | None:
        """Claim the recovery of ``turn`` (``ClaimStore.claim_recovery``: held by one live
        process; a recovery that died with its process is claimed again at the next start);
        returns what to pass to :meth:`respond`, or None when another live process recovers
        it or it is in flight here."""
        if flight_key in self._in_flight:
            return None
        # In flight from here: a redelivery arriving while the claim is written is dropped
        # as one in flight, not taken for a recovery under way elsewhere (then neither
        # would answer it).
        self._in_flight.add(flight_key)
        try:
            claimed = await self.store.claim_recovery(turn_id=turn.id)
        except BaseException:
            self._in_flight.discard(flight_key)
            raise
        if not claimed:
            self._in_flight.discard(flight_key)
            return None
        logger.info("answering message %s left unanswered by a crash", turn.id)
        return Received(turn_id=turn.id, flight_key=flight_key, resume=True)

    def release(self, received: Received) -> None:
        """End a flight without :meth:`respond` (the adapter could not place the answer)."""
        self._in_flight.discard(received.flight_key)

    # --- 2. after the acknowledgement

    async def respond(
        self,
        incoming: IncomingMessage,
        received: Received,
        place: ReplyPlace,
        *,
        notice: str | None = None,
        notice_mark: str | None = None,
        store_at_end: bool = False,
    ) -> None:
        """Answer a received message into ``place`` (see the module docstring); ``notice``
        comes first, the first time ``notice_mark`` is asked for. Platform errors propagate
        (the answer then stays unstored); the flight ends whatever happens. Waits for a place
        first (:attr:`admission`: after the person's earlier answers, at most
        ``SELFMIND_MAX_CONCURRENT_TURNS`` at once).

        ``store_at_end``: store the answer as its stream ends, before ``place.show``
        returns, for a place a restart cannot read back (the terminal: it shows the answer's
        last part only once the stream ended, so a kill leaves either a cut answer and an
        unanswered message, or the answer stored; never the whole answer unstored)."""
        try:
            async with self.admission.turn(incoming.user_key):
                await self._respond(incoming, received, place, notice, notice_mark, store_at_end)
        finally:
            self._in_flight.discard(received.flight_key)

    async def _respond(
        self,
        incoming: IncomingMessage,
        received: Received,
        place: ReplyPlace,
        notice: str | None,
        notice_mark: str | None,
        store_at_end: bool,
    ) -> None:
        if received.say is not None:
            await place.say(received.say)
            return
        reuse: list[str] = []
        if received.resume and received.turn_id is not None:
            if await self.store.answer_to(turn_id=received.turn_id) is not None:
                # Answered meanwhile (a redelivery and the start-up recovery of one message).
                logger.info("message %s: answered meanwhile", received.flight_key)
                return
            reuse = await place.shown_reply()
        if notice_mark is None or not await self.once(notice_mark):
            notice = None
        delivery = Delivery()
        answer = (
            _failing(received.limit)
            if received.limit is not None
            else self.loop.answer(
                incoming, turn_id=received.turn_id, delivery=None if store_at_end else delivery
            )
        )
        deltas = with_prefix(notice, answer)
        try:
            await place.show(deltas, reuse=reuse)
        except Exception:
            try:
                await deltas.aclose()  # the turn loop's end runs now, not when collected
                await delivery.failed()  # what the call cost is recorded all the same
            except Exception as exc:
                logger.warning("turn=%s usage not recorded: %s", received.turn_id, exc)
            raise
        # Stored once the platform shows the whole answer (its final edit): a crash or a
        # platform error before this leaves the message to be answered at start-up. (With
        # ``store_at_end`` the turn loop stored it already: nothing left to do here.)
        await delivery.done()
