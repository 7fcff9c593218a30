"""Scripted reflection models and a scripted judge for ``selfmind eval`` tests, answering
the fake Anthropic server's requests (``FakeAnthropic(responder=ScriptedModels(...))``).

Reflection behaviours:

- ``oracle``: LoCoMo's observations of the speaker, rewritten to "the user" and passed
  through the product's rules check, each offered once, at the first exchange at or after
  the turn it cites (the rest at the speaker's last exchange of the session); the negative
  suite gets nothing, the correction suite its expected memory superseding the seed;
- ``silent``: never stores anything;
- ``parrot``: stores the assistant's (the other speaker's) words as a fact about the user;
- ``stubborn``: the oracle, but corrections never list ``supersedes``.

The judge (any request whose first system block is the judge instructions) says a memory
states an observation when their normalized texts are equal, and grounds a new memory in an
observation, in the person's own words, or in the other speaker's words by the same rule as
the offline scoring.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any, Literal

from core.evaluation.judge import judge_instructions
from core.evaluation.locomo import Conversation
from core.evaluation.reflection_eval import exchanges
from core.evaluation.scoring import as_user, containment, terms
from core.evaluation.suites import correction_cases
from core.memory.reflection import REFLECTION_RULES, check_text
from core.rules.text import normalize

Behaviour = Literal["oracle", "silent", "parrot", "stubborn"]
_USER = re.compile(r'^user: (".*")$', re.M)
_ASSISTANT = re.compile(r'^assistant: (".*")$', re.M)
_TIME = re.compile(r'message_time="([^"]+)"')
_STORED = re.compile(r"^(\{.*\})$", re.M)


def candidate(text: str, supersedes: Sequence[int] = ()) -> dict[str, Any]:
    return {"text": text, "kind": "fact", "category": "general", "supersedes": list(supersedes)}


def oracle_plan(conv: Conversation) -> dict[tuple[str, str], list[str]]:
    """``(user text, message_time) -> memories`` the oracle returns for that exchange."""
    plan: dict[tuple[str, str], list[str]] = {}
    for session in conv.sessions:
        observations = conv.observations.get(session.number, [])
        pairs = exchanges(session)
        order = {t.dia_id: i for i, t in enumerate(session.turns)}
        given: set[int] = set()
        last = {t.speaker: i for i, t in enumerate(session.turns)}
        for index, (turn, _) in enumerate(pairs):
            at = (session.date.replace(tzinfo=UTC) + timedelta(seconds=index)).isoformat(
                timespec="seconds"
            )
            out = []
            for k, obs in enumerate(observations):
                if k in given or obs.speaker != turn.speaker:
                    continue
                cited = [order[e] for e in obs.evidence if e in order]
                if (cited and min(cited) <= index) or last[turn.speaker] == index:
                    given.add(k)
                    text = check_text(as_user(obs.text, obs.speaker))
                    if text is not None:
                        out.append(text)
            plan[(" ".join(turn.text.split()), at)] = out
    return plan


@dataclass
class ScriptedModels:
    """The fake's responder: reflection by ``behaviour``, judging as the module says."""

    conversations: Sequence[Conversation] = ()
    behaviour: Behaviour = "oracle"
    plan: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    judged: int = 0
    reflected: int = 0

    def __post_init__(self) -> None:
        for conv in self.conversations:
            self.plan.update(oracle_plan(conv))

    def __call__(self, body: dict[str, Any]) -> Any:
        system = body.get("system")
        first = system if isinstance(system, str) else (system or [{}])[0].get("text", "")
        if first == REFLECTION_RULES:
            self.reflected += 1
            return self.reflect(body)
        if first == judge_instructions():
            self.judged += 1
            return judge(body)
        raise AssertionError("unexpected request")

    def reflect(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = _text(body["messages"][0]["content"])
        user = json.loads(_USER.search(prompt).group(1))  # type: ignore[union-attr]
        found = _ASSISTANT.search(prompt)
        assistant = json.loads(found.group(1)) if found else ""
        when = _TIME.search(prompt).group(1)  # type: ignore[union-attr]
        stored = [json.loads(line) for line in _STORED.findall(prompt)]
        if self.behaviour == "silent":
            return {"memories": []}
        if self.behaviour == "parrot":
            words = assistant.rstrip("?!. ")[:150]
            if not words:
                return {"memories": []}
            return {"memories": [candidate(f"The user heard: {words}.")]}
        for case in correction_cases():
            if case.user == user:
                ids = [m["id"] for m in stored if m["text"] == case.seed]
                keep = [] if self.behaviour == "stubborn" else ids
                return {"memories": [candidate(case.expected, keep)]}
        texts = self.plan.get((" ".join(user.split()), when), [])
        return {"memories": [candidate(t) for t in texts]}


def judge(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted judge's verdicts for one judge request."""
    transcript = body["system"][1]["text"]
    prompt = _text(body["messages"][0]["content"])
    person = json.loads(re.search(r"<person>(.*)</person>", prompt).group(1))  # type: ignore[union-attr]
    obs_block = prompt.split("<observations>\n", 1)[1].split("</observations>", 1)[0]
    mem_block = prompt.split("<memories>\n", 1)[1].split("</memories>", 1)[0]
    observations = [json.loads(line.split(" ", 1)[1]) for line in obs_block.splitlines()]
    memories = []
    for line in mem_block.splitlines():
        head, text = line.split(" ", 1)
        new = text.startswith("new ")
        memories.append((int(head), json.loads(text[4:] if new else text), new))
    turns = [ln for ln in transcript.splitlines() if re.match(r"^D\d+:\d+ ", ln)]
    own = [json.loads(ln.split(": ", 1)[1]) for ln in turns if ln.split(" ", 2)[1] == person + ":"]
    other = [
        json.loads(ln.split(": ", 1)[1]) for ln in turns if ln.split(" ", 2)[1] != person + ":"
    ]
    rewritten = [normalize(as_user(o, person)) for o in observations]
    verdicts = [
        {
            "observation": i,
            "covered_by": [mid for mid, text, _ in memories if normalize(text) == r],
        }
        for i, r in enumerate(rewritten, 1)
    ]
    supports = []
    for mid, text, new in memories:
        if not new:
            continue
        m = terms(text, person)
        if normalize(text) in rewritten:
            kind = "observation"
        elif max((containment(m, terms(t, person)) for t in own), default=0) >= 0.6:
            kind = "own_words"
        elif max((containment(m, terms(t, person)) for t in other), default=0) >= 0.6:
            kind = "other_speaker"
        else:
            kind = "none"
        supports.append({"memory": mid, "support": kind})
    return {"observations": verdicts, "memories": supports}


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    assert isinstance(content, list)
    return "".join(str(b.get("text", "")) for b in content)


SYNTHETIC = Path(__file__).parent / "data" / "eval_conversation.json"
"""A two-session conversation in LoCoMo's format written for these tests (Ada and Ben)."""


def write_synthetic(folder: Path, name: str = "conv-90") -> Path:
    """The synthetic two-session conversation as a LoCoMo file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(SYNTHETIC.read_text(encoding="utf-8"), encoding="utf-8")
    return path
