"""The memory audit: which stored memories break the memory rules, per user and in total.

``selfmind memories audit [--user U] [--json] [--days N] [--fix]`` reads each user's active
memories (nothing is changed unless ``--fix``) and reports, per memory, the rules it breaks:

- ``duplicate``: adds nothing to an older active memory, by the dedupe rule
  (:func:`core.rules.dedupe.judge`: the same fact, or a general one after its specific twin);
- ``less_specific``: a newer active memory is a more specific fact about the same thing (the
  rule's supersede: the one a write today would have superseded);
- ``contradicted``: a newer active memory says the opposite or a new state of the same thing:
  the rule judges the newer one against it as a negation ("The user does not drink coffee."
  after "The user drinks coffee.") or as a new state ("no longer", "used to", "former",
  "dead"), or states another value of something that holds once (:mod:`core.rules.contradict`:
  "lives in Berlin" after "lives in Paris", "light mode" after "dark mode", "spaces over
  tabs" after "tabs over spaces"; the prompt already carries only the newer). Other
  contradictions take a model (``memories cleanup``);
- ``secret``: the secret check every write runs (:func:`core.rules.secrets.find_secrets`)
  finds one (a memory stored before that check, or by an import of an old store); the
  finding names its kinds, never the text;
- ``first_person``: not a third-person sentence about the user: starts with I / my / we /
  you (restated system prompts: "You are a helpful assistant."), or is a question;
- ``too_long``: :data:`core.types.MAX_MEMORY_CHARS` characters or more (a memory is one
  sentence under 200);
- ``suggestion``: the assistant's advice stored as a fact ("Consider using Redis.", "The
  assistant suggested ...", "The user should try ...");
- ``not_recalled``: in no delivered answer's prompt (standing profile or recall) for the last
  ``days`` days, although the store could have seen it: it existed, and recalls were being
  recorded (:meth:`core.store.seams.RecallLog.recall_log_started`), for all that time.
  Judged only where a prompt could have carried it: a private memory when one of the user's
  private memories reached a prompt in that time (a DM), a shared one when any did (a user
  away, or with memory off, is not judged: their silence says nothing about one memory);
  never a standing memory (:func:`_not_recalled`).

``--fix`` hands the findings to the cleanup review as one change (the same plan, apply and
undo as ``memories cleanup``, :func:`core.memory.cleanup.apply_run`): a duplicate is
superseded by the memory it duplicates, a less specific or contradicted memory by the newer
one; a first-person memory is **mended** (issue 37): reworded by the offline rule
``/remember`` and import use (:func:`core.memory.service.in_third_person`: "I prefer tabs
over spaces" becomes "The user prefers tabs over spaces.", same kind, category, source,
place and date; the old row superseded by the new one), or superseded by an active memory
the reworded text duplicates; only one the rule cannot reword ("You are a helpful
assistant.", a question) is retired, with the secret, over-long, suggestion and
not-recalled ones. The report says what each operation did (ids only) and how to undo it.
Nothing is deleted at once: ``memories undo`` restores the change within the undo window
(after it, retired memories are erased as a forget erases them).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, get_args

from core.memory.cleanup import ApplyStore, CleanupRun, PlannedOp, apply_run
from core.memory.profile import is_standing
from core.memory.reflection import addressed_or_asked
from core.rules.about import same_person
from core.rules.cleanup_ops import ChangeOp, MergeOp, RetireOp, SupersedeOp
from core.rules.contradict import contradicted
from core.rules.dedupe import Deduper
from core.rules.dedupe_index import DedupeIndex, Known
from core.rules.reassert import one_copy_each
from core.rules.secrets import SecretFinding, find_secrets
from core.store.seams import RecallLog
from core.types import MAX_MEMORY_CHARS, Memory, MemoryUse

logger = logging.getLogger(__name__)

Rule = Literal[
    "duplicate",
    "less_specific",
    "contradicted",
    "secret",
    "first_person",
    "too_long",
    "suggestion",
    "not_recalled",
]
RULES: tuple[Rule, ...] = get_args(Rule)
DEFAULT_DAYS = 90

_SUGGESTION = re.compile(
    r"^(consider|try|make sure|remember to|don't forget|it is recommended|recommended)\b"
    r"|\b(assistant|bot|ai|claude|chatgpt|model)\s+(suggested|suggests|recommended|recommends|"
    r"proposed|advised|said|thinks)\b"
    r"|^the user (should|could|might want to|may want to)\b",
    re.IGNORECASE,
)
SecretCheck = Callable[[str], Sequence[SecretFinding]]


@dataclass(frozen=True, slots=True)
class Finding:
    """One memory breaking one rule; ``related_id``: the memory it duplicates, or the newer
    one that narrows or contradicts it."""

    memory_id: int
    rule: Rule
    detail: str
    related_id: int | None = None


@dataclass
class UserAudit:
    """One user's findings."""

    user_key: str
    memories: int
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Memories per rule broken (a memory can break several)."""
        c = Counter(f.rule for f in self.findings)
        return {rule: c[rule] for rule in RULES}

    @property
    def flagged(self) -> int:
        """Distinct memories breaking at least one rule."""
        return len({f.memory_id for f in self.findings})


def audit_memories(
    user_key: str,
    memories: Sequence[Memory],
    *,
    deduper: Deduper,
    now: datetime,
    days: int = DEFAULT_DAYS,
    secrets: SecretCheck | None = find_secrets,
    uses: Mapping[int, MemoryUse] | None = None,
    recall_log_started: datetime | None = None,
) -> UserAudit:
    """Audit one user's active ``memories`` (oldest first, as ``store.export`` gives them).

    ``uses``: the user's :meth:`core.store.seams.RecallLog.memory_uses`;
    ``recall_log_started``: when the store began recording recalls (None: ``not_recalled``
    is not judged). Pure: reads nothing, changes nothing. Near-duplicates are found through
    :class:`core.rules.dedupe_index.DedupeIndex` (linear in the memories, not all pairs).
    """
    result = UserAudit(user_key, len(memories))
    found = result.findings
    found.extend(_not_recalled(memories, uses or {}, recall_log_started, now, days))
    for m in memories:
        if secrets is not None and (hits := secrets(m.text)):
            kinds = sorted({h.kind for h in hits})
            found.append(Finding(m.id, "secret", ", ".join(kinds)))
        if len(m.text) >= MAX_MEMORY_CHARS:
            found.append(Finding(m.id, "too_long", f"{len(m.text)} characters"))
        elif addressed_or_asked(m.text.strip()):
            found.append(Finding(m.id, "first_person", "not a third-person sentence"))
        if _SUGGESTION.search(m.text):
            found.append(Finding(m.id, "suggestion", "the assistant's advice, not a fact"))
    found.extend(_near_twins(memories, deduper))
    found.extend(_contradictions(memories, found))
    found.sort(key=lambda f: (f.memory_id, RULES.index(f.rule)))
    return result


def _not_recalled(
    memories: Sequence[Memory],
    uses: Mapping[int, MemoryUse],
    started: datetime | None,
    now: datetime,
    days: int,
) -> list[Finding]:
    """Memories watched for ``days`` days (existing, with recalls recorded) and recalled in
    none of them. Judged only where the user had prompts that could have carried them: a
    private memory only when one of their private memories was recalled in that time (a DM
    prompt; a channel prompt carries shared memories only), a shared one when any was. A
    standing memory (a preference, a correction, who the user is: :func:`is_standing`) is
    never flagged: the profile's budget, not its worth, keeps it out of a full profile."""
    cutoff = now - timedelta(days=days)
    if started is None or started > cutoff:
        return []
    origin_of = {m.id: m.origin for m in memories}
    seen: set[str] = set()  # origins with a memory recalled since the cutoff
    for memory_id, use in uses.items():
        if use.last_recalled_at is not None and use.last_recalled_at >= cutoff:
            seen.add(origin_of.get(memory_id, "shared"))
    judged = {"private", "shared"} if "private" in seen else ({"shared"} if seen else set())
    out = []
    for m in memories:
        if m.origin not in judged or is_standing(m):
            continue
        last = uses[m.id].last_recalled_at if m.id in uses else None
        if m.created_at < cutoff and (last is None or last < cutoff):
            when = (
                "never recalled" if last is None else f"last recalled {(now - last).days} days ago"
            )
            out.append(Finding(m.id, "not_recalled", f"{when} (in no prompt for {days} days)"))
    return out


def _near_twins(memories: Sequence[Memory], deduper: Deduper) -> list[Finding]:
    """Duplicates, less specific and contradicted memories, each newer memory judged against
    the older ones its screen passes (as a write of it today would be). The copies of a
    sentence said in several places are one (:func:`core.rules.reassert.one_copy_each`):
    each is the fact where its own place may use it, none a duplicate of another."""
    ordered = sorted(one_copy_each(memories), key=lambda m: (m.created_at, m.id))
    index = DedupeIndex(deduper, [m.text for m in ordered])
    about = {m.id: m.about for m in ordered}
    out: list[Finding] = []
    for m in ordered:
        twin: int | None = None
        for known in index.candidates(m.text):
            assert known.id is not None
            if not same_person(about[known.id], m.about):  # as the writer compares them
                continue
            judgement = deduper.judge(m.text, known.text)
            if judgement.outcome == "duplicate":
                twin = twin if twin is not None else known.id
            elif judgement.outcome == "supersede":
                rule: Rule = "contradicted" if judgement.reason == "state" else "less_specific"
                out.append(Finding(known.id, rule, f"#{m.id} is newer", m.id))
            elif judgement.reason == "negation":
                out.append(Finding(known.id, "contradicted", f"#{m.id} negates it", m.id))
        if twin is not None:
            out.append(Finding(m.id, "duplicate", f"adds nothing to #{twin}", twin))
        else:  # a duplicate adds nothing to judge later memories against
            index.add(Known(m.id, m.text))
    return out


def _contradictions(memories: Sequence[Memory], found: Sequence[Finding]) -> list[Finding]:
    """The memories a newer one contradicts by :func:`core.rules.contradict.contradicted`
    (one finding each, none the near-twin rule made already)."""
    known = {(f.memory_id, f.rule) for f in found}
    return [
        Finding(old, "contradicted", f"#{new} says otherwise", new)
        for old, new in sorted(contradicted(memories).items())
        if (old, "contradicted") not in known
    ]


_RETIRED: tuple[Rule, ...] = ("secret", "first_person", "too_long", "suggestion", "not_recalled")


def fix_plan(
    audit: UserAudit, memories: Sequence[Memory], deduper: Deduper | None = None
) -> CleanupRun:
    """The audit's findings as a cleanup plan (:class:`core.memory.cleanup.CleanupRun`), for
    :func:`core.memory.cleanup.apply_run`: reword first-person memories the offline rule can
    reword (a one-memory merge into the reworded sentence, or a supersede by an active
    memory it duplicates by ``deduper``'s rule), retire what breaks a text rule otherwise,
    supersede duplicates by their twin and less specific or contradicted memories by the
    newer one.

    Each memory is in one operation at most and a memory another one is superseded by stays
    active (the change's rules, :func:`core.store.cleanup.check_disjoint`); a finding that
    would break that is left for the next audit.
    """
    from core.memory.service import in_third_person  # the service imports the cleanup

    rule = deduper or Deduper()
    by_id = {m.id: m for m in memories}
    run = CleanupRun(user_key=audit.user_key, before=len(memories))
    run.texts = {m.id: m.text for m in memories}
    taken: set[int] = set()  # out of recall by an operation
    keepers: set[int] = set()  # another memory is superseded by these
    rules_of: dict[int, set[Rule]] = {}
    for f in audit.findings:
        rules_of.setdefault(f.memory_id, set()).add(f.rule)

    def plan(op: ChangeOp, memory_id: int, reason: str) -> None:
        user_added = tuple(
            i
            for i in {memory_id, getattr(op, "new_id", memory_id)}
            if by_id[i].source == "remember"
        )
        run.planned.append(PlannedOp(op, reason, tuple(sorted(user_added))))

    def mend(m: Memory) -> bool:
        """Reword ``m`` (or supersede it by the memory its rewording duplicates); False
        when the rule cannot reword it."""
        text = in_third_person(m.text)
        if text == m.text or addressed_or_asked(text.strip()):
            return False
        others = [o for o in memories if o.id != m.id]
        twin = rule.match(text, others)
        if twin is not None:
            if twin.id in taken:
                return True  # left for the next audit, not retired meanwhile
            keepers.add(twin.id)
            plan(
                SupersedeOp(m.id, twin.id), m.id, f"audit: first_person, reworded it is #{twin.id}"
            )
        else:
            plan(MergeOp((m.id,), text, m.kind, m.category), m.id, "audit: first_person, reworded")
        taken.add(m.id)
        return True

    for f in audit.findings:
        if f.rule not in _RETIRED or f.memory_id in taken:
            continue
        others = rules_of[f.memory_id] - {"first_person"}
        if f.rule == "first_person" and not others & set(_RETIRED):
            if "duplicate" in others:
                continue  # superseded by its twin below: the twin already says it
            if mend(by_id[f.memory_id]):
                continue
        taken.add(f.memory_id)
        plan(RetireOp(f.memory_id), f.memory_id, f"audit: {f.rule}")
    for f in audit.findings:
        new = f.related_id
        if f.rule in _RETIRED or new is None:
            continue
        if f.memory_id in taken or f.memory_id in keepers or new in taken:
            continue
        taken.add(f.memory_id)
        keepers.add(new)
        plan(SupersedeOp(f.memory_id, new), f.memory_id, f"audit: {f.rule}, {f.detail}")
    return run


def change_lines(run: CleanupRun) -> list[str]:
    """What an applied fix did, one line per operation, ids only (never a memory's text):
    ``reworded #3 as #15 (first person to third)``, ``superseded #4 by #9 (duplicate, adds
    nothing to #9)``, ``retired #7 (secret)``."""
    if run.applied is None:
        return []
    added = iter(run.applied.added)
    out = []
    for p in run.planned:
        why = p.reason.removeprefix("audit: ")
        if isinstance(p.op, MergeOp):
            new_id = next(added, None)
            old = ", ".join(f"#{i}" for i in p.op.ids)
            out.append(f"reworded {old} as #{new_id} (first person to third)")
        elif isinstance(p.op, SupersedeOp):
            out.append(f"superseded #{p.op.old_id} by #{p.op.new_id} ({why})")
        else:
            out.append(f"retired #{p.op.memory_id} ({why})")
    return out


class AuditStore(ApplyStore, RecallLog, Protocol):
    """What the audit reads (users, export, the recall log) and, with ``fix``, applies (a
    cleanup change)."""


@dataclass
class AuditReport:
    """Every user audited, in key order; ``fixed``: the change applied per user (``--fix``)."""

    users: list[UserAudit]
    secrets_checked: bool
    days: int
    recall_log_started: datetime | None = None
    recalls_judged: bool = False
    """Recalls were recorded for at least ``days`` days: ``not_recalled`` was judged."""
    fixed: dict[str, CleanupRun] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        """Findings per rule over every user, with ``memories`` and ``flagged`` (distinct
        memories breaking a rule)."""
        out = {"memories": sum(u.memories for u in self.users)}
        out["flagged"] = sum(u.flagged for u in self.users)
        for rule in RULES:
            out[rule] = sum(u.counts()[rule] for u in self.users)
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"secrets_checked", "days", "recall_log_started" (ISO 8601 or null),
        "recalls_judged", "total": {...}, "users": [{"user", "memories", "flagged", "counts",
        "findings": [{"id", "rule", "detail", "related"}], "change_id"}]}``. Never a memory's
        text."""
        started = self.recall_log_started
        return {
            "secrets_checked": self.secrets_checked,
            "days": self.days,
            "recall_log_started": started.isoformat() if started is not None else None,
            "recalls_judged": self.recalls_judged,
            "total": self.totals(),
            "users": [
                {
                    "user": u.user_key,
                    "memories": u.memories,
                    "flagged": u.flagged,
                    "counts": u.counts(),
                    "findings": [
                        {
                            "id": f.memory_id,
                            "rule": f.rule,
                            "detail": f.detail,
                            "related": f.related_id,
                        }
                        for f in u.findings
                    ],
                    "change_id": _change_id(self.fixed.get(u.user_key)),
                }
                for u in self.users
            ],
        }


def _change_id(run: CleanupRun | None) -> str | None:
    return run.applied.change_id if run is not None and run.applied is not None else None


async def run_audit(
    store: AuditStore,
    *,
    user_key: str | None = None,
    deduper: Deduper,
    now: datetime,
    days: int = DEFAULT_DAYS,
    fix: bool = False,
    secrets: SecretCheck | None = find_secrets,
) -> AuditReport:
    """Audit every user with memories (or just ``user_key``); with ``fix``, apply each user's
    :func:`fix_plan` as one cleanup change (undoable with ``memories undo``)."""
    keys = [u.user_key for u in await store.users(user_key=user_key) if u.memories]
    started = await store.recall_log_started()
    report = AuditReport(
        [],
        secrets_checked=secrets is not None,
        days=days,
        recall_log_started=started,
        recalls_judged=started is not None and started <= now - timedelta(days=days),
    )
    for key in keys:
        memories = await store.export(user_key=key)
        audit = audit_memories(
            key,
            memories,
            deduper=deduper,
            now=now,
            days=days,
            secrets=secrets,
            uses=await store.memory_uses(user_key=key),
            recall_log_started=started,
        )
        report.users.append(audit)
        if fix:
            plan = fix_plan(audit, memories, deduper)
            if plan.planned:
                report.fixed[key] = await apply_run(store, plan)
        logger.info(
            "audit user=%s memories=%d flagged=%d fixed=%s",
            key,
            audit.memories,
            audit.flagged,
            _change_id(report.fixed.get(key)),
        )
    return report


def format_report(report: AuditReport) -> list[str]:
    """The report as text lines: one table row per user and the total, then each user's
    findings (ids, rules and details; no memory text)."""
    head = f"{'user':<28} {'memories':>8} {'flagged':>7} " + " ".join(f"{r:>13}" for r in RULES)
    rows = [head, "-" * len(head)]
    for u in report.users:
        counts = u.counts()
        rows.append(
            f"{u.user_key:<28} {u.memories:>8} {u.flagged:>7} "
            + " ".join(f"{counts[r]:>13}" for r in RULES)
        )
    total = report.totals()
    rows.append(
        f"{'total':<28} {total['memories']:>8} {total['flagged']:>7} "
        + " ".join(f"{total[r]:>13}" for r in RULES)
    )
    if not report.secrets_checked:
        rows.append("secret: not checked")
    started = report.recall_log_started
    if not report.recalls_judged:
        since = started.date().isoformat() if started is not None else "never"
        rows.append(
            f"not_recalled: not judged yet (recalls recorded since {since}; it needs"
            f" {report.days} days of them)"
        )
    for u in report.users:
        for f in u.findings:
            rows.append(f"{u.user_key}  #{f.memory_id}  {f.rule}: {f.detail}")
        run = report.fixed.get(u.user_key)
        if run is not None and run.applied is not None:
            rows.extend(f"{u.user_key}: {line}" for line in change_lines(run))
            rows.append(
                f"{u.user_key}: fixed as change {run.applied.change_id}, {run.before} ->"
                f" {run.after} memories (undo: selfmind memories undo --user {u.user_key}"
                f" {run.applied.change_id})"
            )
    return rows
