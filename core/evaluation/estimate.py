"""Before a run: its input tokens from the API's token counting, and its cost at list prices.

Input tokens are counted, not guessed: every reflection prompt and judge prompt the run will
send is built locally, exactly as sent, except for the stored memories it will recall, which
cannot be known before reflecting. For those the estimate assumes the memories are the
speaker's earlier observations, rewritten to "the user" (the last ``related_k``). The texts
are counted with ``client.messages.count_tokens`` in a few large batches (one request per
about :data:`BATCH_CHARS` characters, not one per call); the fixed part of every request
(the system prompt, the schema, the message framing) is counted once and multiplied.

Output tokens cannot be counted; the estimate assumes a reflection writes about one memory
per observation of the speaker (each as the JSON the schema asks for) and a judge verdict of
one short JSON object per observation and per new memory. Both are labelled as assumptions
wherever the estimate is shown.

Cost: :mod:`core.model.prices`. Judge prompts of one session share a cached prefix (instructions
and transcript): the first call writes it, the second reads it, when it reaches the judge
model's cache minimum.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anthropic

from core.evaluation.judge import judge_instructions, judge_prompt, transcript, verdict_schema
from core.evaluation.locomo import Conversation
from core.evaluation.reflection_eval import exchanges, turn_time
from core.evaluation.scoring import as_user
from core.evaluation.suites import correction_cases, negative_cases
from core.memory.reflection import REFLECTION_RULES, ReflectionOutput, reflection_prompt
from core.model.claude import Usage
from core.model.prices import price_of
from core.types import Memory, ScoredMemory, Turn

BATCH_CHARS = 200_000
"""Characters per ``count_tokens`` request (well under the context window)."""


@dataclass(frozen=True)
class Estimate:
    """Token estimate of one model's run; ``input`` counted, ``output`` assumed."""

    reflection_calls: int
    reflection_input: int
    reflection_output: int
    judge_calls: int
    judge_input: int
    judge_cached_prefix: int
    judge_output: int
    count_requests: int

    def cost(self, *, model: str, judge_model: str | None) -> float | None:
        """Dollars at list prices; None when a model is not in the price table."""
        price = price_of(model)
        if price is None:
            return None
        total = price.cost(
            Usage(input_tokens=self.reflection_input, output_tokens=self.reflection_output)
        )
        if judge_model is None:
            return total
        judge = price_of(judge_model)
        if judge is None:
            return None
        cached = (
            self.judge_cached_prefix if self.judge_cached_prefix >= judge.min_cache_tokens else 0
        )
        # One write and one read of each session's prefix (two speakers per session).
        usage = Usage(
            input_tokens=self.judge_input - cached,
            cache_creation_input_tokens=cached // 2,
            cache_read_input_tokens=cached - cached // 2,
            output_tokens=self.judge_output,
        )
        return total + judge.cost(usage)

    def as_json(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {
            "reflection_calls": self.reflection_calls,
            "reflection_input_tokens": self.reflection_input,
            "reflection_output_tokens_assumed": self.reflection_output,
            "judge_calls": self.judge_calls,
            "judge_input_tokens": self.judge_input,
            "judge_output_tokens_assumed": self.judge_output,
            "count_tokens_requests": self.count_requests,
        }


def _memory(i: int, text: str) -> ScoredMemory:
    now = datetime(2020, 1, 1, tzinfo=UTC)
    m = Memory(i, "", text, "fact", "general", "reflection", "private", now, now)
    return ScoredMemory(m, 1.0)


def _turn(text: str, at: datetime) -> Turn:
    return Turn(0, "", "", "user", text, "private", at)


def _candidate(text: str) -> str:
    return json.dumps({"text": text, "kind": "fact", "category": "general", "supersedes": []})


class _Counter:
    def __init__(self, client: anthropic.AsyncAnthropic, model: str) -> None:
        self.client, self.model, self.requests = client, model, 0

    async def count(self, text: str, *, system: str = "", schema: Any = None) -> int:
        self.requests += 1
        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = system
        if schema is not None:
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        result = await self.client.messages.count_tokens(
            model=self.model, messages=[{"role": "user", "content": text}], **kwargs
        )
        return int(result.input_tokens)

    async def texts(self, texts: Sequence[str], overhead: int) -> int:
        """Tokens of ``texts`` as if each were sent alone (less the framing ``overhead``)."""
        total, size = 0, 0
        batch: list[str] = []
        for text in [*texts, None]:
            if text is None or (batch and size + len(text) > BATCH_CHARS):
                if batch:
                    total += await self.count("\n".join(batch)) - overhead
                batch, size = [], 0
            if text is not None:
                batch.append(text)
                size += len(text) + 1
        return total


async def estimate_run(
    *,
    client: anthropic.AsyncAnthropic,
    model: str,
    judge_model: str | None,
    conversations: Sequence[Conversation],
    sessions: int | None,
    related_k: int = 10,
) -> Estimate:
    """Count the run's input tokens (see the module docstring); raises ``anthropic.APIError``."""
    counter = _Counter(client, model)
    overhead = await counter.count(".") - 1
    fixed = (
        await counter.count(
            ".", system=REFLECTION_RULES, schema=anthropic.transform_schema(ReflectionOutput)
        )
        - 1
    )
    prompts, outputs = _reflection_texts(conversations, sessions, related_k)
    reflection_input = len(prompts) * fixed + await counter.texts(prompts, overhead)
    reflection_output = await counter.texts(outputs, overhead)
    judge_calls = judge_input = judge_cached = judge_output = 0
    requests = counter.requests
    if judge_model is not None:
        judge = _Counter(client, judge_model)
        j_overhead = await judge.count(".") - 1
        j_fixed = await judge.count(".", system=judge_instructions(), schema=verdict_schema()) - 1
        instructions = j_fixed - j_overhead
        transcripts, users, verdicts = _judge_texts(conversations, sessions)
        t_tokens = await judge.texts(transcripts, j_overhead)
        t_chars = sum(map(len, transcripts)) or 1
        price = price_of(judge_model)
        minimum = price.min_cache_tokens if price else 1024
        for t in transcripts:  # two calls per session share instructions + transcript
            prefix = instructions + round(t_tokens * len(t) / t_chars)
            if prefix >= minimum:
                judge_cached += 2 * prefix
        judge_calls = len(users)
        judge_input = judge_calls * j_fixed + 2 * t_tokens + await judge.texts(users, j_overhead)
        judge_output = await judge.texts(verdicts, j_overhead)
        requests += judge.requests
    return Estimate(
        reflection_calls=len(prompts),
        reflection_input=reflection_input,
        reflection_output=reflection_output,
        judge_calls=judge_calls,
        judge_input=judge_input,
        judge_cached_prefix=judge_cached,
        judge_output=judge_output,
        count_requests=requests,
    )


def _judge_texts(
    conversations: Sequence[Conversation], sessions: int | None
) -> tuple[list[str], list[str], list[str]]:
    """Per session its transcript; per speaker-session the judge prompt (memories assumed:
    the speaker's observations so far, rewritten) and an assumed verdict."""
    transcripts: list[str] = []
    users: list[str] = []
    verdicts: list[str] = []
    for conv in conversations:
        seen: dict[str, list[str]] = {conv.speaker_a: [], conv.speaker_b: []}
        for session in conv.sessions[: sessions or None]:
            transcripts.append(
                transcript(session.turns, session.date.isoformat(timespec="minutes"))
            )
            for speaker in (conv.speaker_a, conv.speaker_b):
                obs = [
                    o.text
                    for o in conv.observations.get(session.number, [])
                    if o.speaker == speaker
                ]
                before = len(seen[speaker])
                seen[speaker].extend(as_user(o, speaker) for o in obs)
                memories = [(i, t, i > before) for i, t in enumerate(seen[speaker], 1)]
                users.append(judge_prompt(name=speaker, observations=obs, memories=memories))
                verdicts.append(
                    json.dumps(
                        {
                            "observations": [
                                {"observation": i, "covered_by": [before + i]}
                                for i in range(1, len(obs) + 1)
                            ],
                            "memories": [
                                {"memory": i, "support": "observation"}
                                for i, _, new in memories
                                if new
                            ],
                        }
                    )
                )
    return transcripts, users, verdicts


def _reflection_texts(
    conversations: Sequence[Conversation], sessions: int | None, related_k: int
) -> tuple[list[str], list[str]]:
    """The reflection prompts of the run (with assumed recalled memories) and the assumed
    outputs."""
    prompts: list[str] = []
    outputs: list[str] = []
    for conv in conversations:
        seen: dict[str, list[str]] = {conv.speaker_a: [], conv.speaker_b: []}
        for session in conv.sessions[: sessions or None]:
            obs = conv.observations.get(session.number, [])
            for index, (turn, answer) in enumerate(exchanges(session)):
                related = seen.setdefault(turn.speaker, [])[-related_k:] if related_k else []
                at = turn_time(session, index)
                prompts.append(
                    reflection_prompt(
                        _turn(turn.text, at),
                        _turn(answer.text, at) if answer else None,
                        [_memory(i, t) for i, t in enumerate(related, 1)],
                    )
                )
                mine = [
                    as_user(o.text, turn.speaker)
                    for o in obs
                    if o.speaker == turn.speaker and turn.dia_id in o.evidence
                ]
                outputs.append(json.dumps({"memories": [json.loads(_candidate(t)) for t in mine]}))
                seen[turn.speaker].extend(mine)
    for case in negative_cases():
        now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
        prompts.append(reflection_prompt(_turn(case.user, now), _turn(case.assistant, now), []))
        outputs.append('{"memories": []}')
    for cc in correction_cases():
        now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
        prompts.append(
            reflection_prompt(_turn(cc.user, now), _turn(cc.assistant, now), [_memory(1, cc.seed)])
        )
        outputs.append(json.dumps({"memories": [json.loads(_candidate(cc.expected))]}))
    return prompts, outputs
