"""The judge call of ``selfmind eval reflection``: one structured-output request per speaker
and session, with a cached prompt.

Request layout (``messages.create``, thinking disabled):

- ``system[0]``: the judge instructions, ``core/data/eval/judge.md`` between its ``---``
  lines (each rule with its reason), cache breakpoint;
- ``system[1]``: the session transcript (every turn, both speakers), cache breakpoint: the
  second speaker's call of the same session reads instructions and transcript from the
  cache. The API (and the test fake) caches a breakpoint only when its prefix reaches the
  model's minimum (:attr:`core.model.prices.Price.min_cache_tokens`);
- one user message: the person's name, the session's observations of them, their memories.

The answer is :class:`Verdicts`; malformed answers raise ``MalformedOutput``, API failures
``ModelError`` (after the SDK's own retries).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import anthropic
import pydantic
from anthropic.types import TextBlockParam
from pydantic import BaseModel, ConfigDict, Field

from core.errors import MalformedOutput, ModelError
from core.evaluation.locomo import Turn
from core.evaluation.scoring import SessionScore
from core.model.claude import Usage

logger = logging.getLogger(__name__)

Support = Literal["observation", "own_words", "other_speaker", "none"]


class ObservationVerdict(BaseModel):
    """Which memories state one observation."""

    model_config = ConfigDict(extra="forbid")

    observation: int = Field(description="the observation's number")
    covered_by: list[int] = Field(description="ids of memories stating it; [] if none")


class MemoryVerdict(BaseModel):
    """What grounds one new memory."""

    model_config = ConfigDict(extra="forbid")

    memory: int = Field(description="the memory's id")
    support: Support = Field(description="observation, own_words, other_speaker or none")


class Verdicts(BaseModel):
    """The judge's whole answer."""

    model_config = ConfigDict(extra="forbid")

    observations: list[ObservationVerdict]
    memories: list[MemoryVerdict] = Field(description="one verdict per memory marked new")


@functools.cache
def judge_instructions() -> str:
    """The judge's system prompt: the part of ``core/data/eval/judge.md`` between ``---``."""
    text = resources.files("core").joinpath("data/eval/judge.md").read_text(encoding="utf-8")
    parts = text.split("\n---\n")
    return parts[1].strip()


@functools.cache
def verdict_schema() -> dict[str, Any]:
    """The JSON schema sent for :class:`Verdicts` (API subset)."""
    return anthropic.transform_schema(Verdicts)


def transcript(turns: Sequence[Turn], date: str) -> str:
    """The session transcript block: one JSON-quoted line per turn."""
    lines = [f'<transcript session_date="{date}">']
    lines += [f"{t.dia_id} {t.speaker}: {json.dumps(t.text, ensure_ascii=False)}" for t in turns]
    lines.append("</transcript>")
    return "\n".join(lines)


def judge_prompt(
    *, name: str, observations: Sequence[str], memories: Sequence[tuple[int, str, bool]]
) -> str:
    """The user message: ``memories`` are ``(id, text, new)``."""
    lines = [f"<person>{json.dumps(name)}</person>", "<observations>"]
    lines += [f"{i} {json.dumps(o, ensure_ascii=False)}" for i, o in enumerate(observations, 1)]
    lines += ["</observations>", "<memories>"]
    for mid, text, new in memories:
        flag = " new" if new else ""
        lines.append(f"{mid}{flag} {json.dumps(text, ensure_ascii=False)}")
    lines.append("</memories>")
    return "\n".join(lines)


def judge_system(transcript_text: str) -> list[TextBlockParam]:
    """The two cached system blocks (instructions, transcript)."""
    return [
        {"type": "text", "text": judge_instructions(), "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": transcript_text, "cache_control": {"type": "ephemeral"}},
    ]


@dataclass(frozen=True)
class Judged:
    """A judge verdict turned into scores, and the call's usage."""

    score: SessionScore
    usage: Usage


class Judge:
    """Judge calls to ``model`` over an ``AsyncAnthropic`` client the caller owns."""

    def __init__(
        self, *, client: anthropic.AsyncAnthropic, model: str, max_tokens: int = 4096
    ) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens

    async def score(
        self,
        *,
        transcript_text: str,
        name: str,
        observations: Sequence[str],
        memories: Sequence[tuple[int, str, bool]],
    ) -> Judged:
        """Score one speaker's session; see the module docstring for errors."""
        prompt = judge_prompt(name=name, observations=observations, memories=memories)
        try:
            message = await self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=judge_system(transcript_text),
                messages=[{"role": "user", "content": prompt}],
                thinking={"type": "disabled"},
                output_config={"format": {"type": "json_schema", "schema": verdict_schema()}},
            )
        except anthropic.APIError as exc:
            logger.warning("judge call failed: %s", type(exc).__name__)
            raise ModelError(f"judge: {type(exc).__name__}", user_message=str(exc)) from exc
        usage = Usage.from_api(message.usage)
        text = "".join(block.text for block in message.content if block.type == "text")
        try:
            verdicts = Verdicts.model_validate_json(text)
        except pydantic.ValidationError:
            raise MalformedOutput(f"judge reply malformed (stop={message.stop_reason})") from None
        return Judged(score=_scores(verdicts, observations, memories), usage=usage)


def _scores(
    verdicts: Verdicts,
    observations: Sequence[str],
    memories: Sequence[tuple[int, str, bool]],
) -> SessionScore:
    ids = {mid for mid, _, _ in memories}
    new = {mid for mid, _, is_new in memories if is_new}
    covered = {
        v.observation
        for v in verdicts.observations
        if 1 <= v.observation <= len(observations) and ids.intersection(v.covered_by)
    }
    support = {v.memory: v.support for v in verdicts.memories if v.memory in new}
    return SessionScore(
        observations=len(observations),
        covered=len(covered),
        new_memories=len(new),
        supported=sum(1 for s in support.values() if s in ("observation", "own_words")),
        from_other=sum(1 for s in support.values() if s == "other_speaker"),
    )
