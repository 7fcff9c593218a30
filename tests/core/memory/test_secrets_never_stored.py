"""Secrets never become memories, on both backends: ``/remember`` (the service every adapter
calls) refuses and stores nothing, an import refuses the whole file naming the line, a
reflection drops the candidate (counted, never logged), a cleanup merge cannot write one,
and an answered chat message is redacted in the store."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator

import pytest

from core.errors import ImportFormatError, SecretInMemory
from core.memory import replies
from core.memory.cleanup import PlanOperation, PlanOutput, check_plan
from core.memory.reflection import screen_text
from core.memory.service import MemoryService
from core.metrics import Metrics
from core.rules.cleanup_ops import MergeOp
from core.rules.secrets import has_secret
from core.types import Memory, utcnow
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import dm, harness, memories_reply

ALICE = "cli:alice"
AWS_ID = "AKIA" + "Z7Q2XK4M9TBW3HJD"
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"
ANTHROPIC = "sk-ant-api03-" + "Qw3rTy7uIo9pAs2dFg5hJk8l" * 2


def refused(metrics: Metrics, source: str) -> float | None:
    assert metrics.registry is not None
    return metrics.registry.get_sample_value("selfmind_memories_refused_total", {"source": source})


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as server:
        yield server


@pytest.mark.parametrize(
    ("text", "secret", "named"),
    [
        (f"The user's AWS key is {AWS_ID}.", AWS_ID, "an AWS key"),
        (f"Deploy with {GITHUB}", GITHUB, "a GitHub token"),
        (f"The bot uses {ANTHROPIC}", ANTHROPIC, "an Anthropic API key"),
        ("my password for staging is hunter2", "hunter2", "a password"),
        ("The user's PIN is 4711.", "4711", "a PIN"),
    ],
)
async def test_remember_refuses_a_secret_in_one_sentence_and_stores_nothing(
    service: MemoryService, text: str, secret: str, named: str
) -> None:
    service.metrics = metrics = Metrics.create()
    with pytest.raises(SecretInMemory) as caught:
        await service.remember(user_key=ALICE, text=text)
    message = str(caught.value)
    assert message == (
        f"That looks like {named}, and secrets are never stored as memories, "
        "so nothing was remembered."
    )
    assert secret not in message
    assert await service.count(user_key=ALICE) == 0
    assert await service.history(user_key=ALICE) == []
    assert refused(metrics, "remember") == 1
    # the same fact without the secret is fine
    ok = await service.remember(user_key=ALICE, text="The user keeps keys in a vault.")
    assert ok.status == "added"


async def test_import_refuses_the_whole_file_naming_the_line(service: MemoryService) -> None:
    service.metrics = metrics = Metrics.create()
    lines = [
        json.dumps({"text": "The user drinks green tea."}),
        "",
        json.dumps({"text": f"The user's token is {GITHUB}."}),
        json.dumps({"text": "The user lives in Oslo."}),
    ]
    with pytest.raises(ImportFormatError) as caught:
        await service.import_lines(user_key=ALICE, lines=lines)
    assert caught.value.line == 3 and caught.value.secret
    assert str(caught.value) == (
        "line 3: it holds a GitHub token; secrets are never stored as memories"
    )
    assert await service.count(user_key=ALICE) == 0  # not even line 1
    assert await service.store.users(user_key=ALICE) == []
    assert refused(metrics, "import") == 1


async def test_import_names_every_problem_line_in_one_run(service: MemoryService) -> None:
    service.metrics = metrics = Metrics.create()
    lines = [
        json.dumps({"text": "The user drinks green tea."}),
        json.dumps({"text": "The user's card is 4111 1111 1111 1111."}),
        json.dumps({"text": "The user's IBAN is DE89 3704 0044 0532 0130 00."}),
        "not json",
        json.dumps({"text": "The user's password, hunter2, expires soon."}),
        json.dumps({"text": "The user's cache is redis://:hunter2@cache:6379/0."}),
        json.dumps({"text": "The user's SSN is 536-22-1234."}),
        json.dumps({"text": "The user lives in Oslo."}),
    ]
    with pytest.raises(ImportFormatError) as caught:
        await service.import_lines(user_key=ALICE, lines=lines)
    error = caught.value
    assert [n for n, _, _ in error.problems] == [2, 3, 4, 5, 6, 7]
    assert [secret for _, _, secret in error.problems] == [True, True, False, True, True, True]
    assert error.line == 2 and error.secret
    assert str(error).splitlines() == [
        "6 lines cannot be imported, so nothing was:",
        "  line 2: it holds a payment card number; secrets are never stored as memories",
        "  line 3: it holds a bank account number (IBAN); secrets are never stored as memories",
        "  line 4: not JSON (Expecting value)",
        "  line 5: it holds a password; secrets are never stored as memories",
        "  line 6: it holds a password in a URL; secrets are never stored as memories",
        "  line 7: it holds a US Social Security number; secrets are never stored as memories",
    ]
    assert "hunter2" not in str(error) and "4111" not in str(error)
    assert await service.count(user_key=ALICE) == 0
    assert refused(metrics, "import") == 5


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("The user's card is 4111 1111 1111 1111.", "a payment card number"),
        ("The user's card is 4532015112830366 exp 12/27.", "a payment card number"),
        ("The user's card CVV is 737.", "a card security code"),
        ("The user's router password admin123 is on a sticker.", "a password"),
        ('The user\'s wifi password "blue-moon-77" is shared.', "a password"),
        ("The user's password, hunter2, expires soon.", "a password"),
        ("The user's cache is redis://:hunter2@cache:6379/0.", "a password in a URL"),
        (
            "The bot token is xoxb- 1234567890 - 1234567890123 - abcdefghijklmnopqrstuvwx.",
            "a Slack token",
        ),
        ("The user's 2FA backup codes are 1234-5678 2345-6789.", "two-factor backup codes"),
        ("The user's TOTP seed is JBSWY3DPEHPK3PXP.", "a two-factor (TOTP) seed"),
        ("The user's IBAN is GB82WEST12345698765432.", "a bank account number (IBAN)"),
        ("The user's SSN is 536-22-1234.", "a US Social Security number"),
    ],
)
async def test_remember_refuses_each_form_of_issue_36(
    service: MemoryService, text: str, named: str
) -> None:
    with pytest.raises(SecretInMemory, match=f"^That looks like {re.escape(named)}, "):
        await service.remember(user_key=ALICE, text=text)
    assert await service.count(user_key=ALICE) == 0
    # a reflection candidate meets the same gate (screen_text calls clean_memory_text)
    with pytest.raises(SecretInMemory):
        screen_text(text)


async def test_a_reflection_drops_a_secret_and_the_answered_message_is_redacted(
    fake: FakeAnthropic, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with harness(fake, db_url) as h:
        h.reflector.metrics = metrics = Metrics.create()
        fake.enqueue(f"Got it: {AWS_ID} is the staging key.", kind="chat")
        fake.enqueue(
            memories_reply(
                (f"The user's staging AWS key is {AWS_ID}.", "fact", "tools"),
                ("The user's staging AWS key is [redacted: aws key].", "fact", "tools"),
                ("The user deploys staging to AWS.", "fact", "tools"),
            ),
            kind="extract",
        )
        answer = await h.say(dm(ALICE, f"my staging key is {AWS_ID}, we deploy to AWS"))
        assert AWS_ID in answer  # the answer was shown as Claude wrote it
        assert await h.reflector.drain(10)
        memories = await h.service.list_memories(user_key=ALICE)
        assert [m.text for m in memories] == ["The user deploys staging to AWS."]
        # Claude had the message for its answer; the stored turns no longer hold the key,
        # so the reflection (which reads them) never saw it either.
        (chat,) = fake.requests_of("chat")
        assert AWS_ID in json.dumps(chat.body)
        (extract,) = fake.requests_of("extract")
        assert AWS_ID not in json.dumps(extract.body)
        turns = await h.store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
        assert [t.text for t in turns] == [
            "my staging key is [redacted: aws key], we deploy to AWS",
            "Got it: [redacted: aws key] is the staging key.",
        ]
    assert refused(metrics, "reflection") == 1
    # never logged: not by the memory code at any level, by nothing at INFO or above
    # (aiosqlite's DEBUG lines show every statement's parameters, message text included)
    ours = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("core.memory") or r.levelno >= logging.INFO
    ]
    assert not [line for line in ours if AWS_ID in line]
    assert any("secrets=1" in line for line in ours)


async def test_a_message_without_a_secret_is_stored_as_it_was(
    fake: FakeAnthropic, db_url: str
) -> None:
    text = "The fix is commit 3f786850e387550fdab836ed7e6dc881de23001b, call +49 170 1234567"
    async with harness(fake, db_url) as h:
        fake.enqueue("Thanks!", kind="chat")
        fake.enqueue(memories_reply(), kind="extract")
        await h.say(dm(ALICE, text))
        assert await h.reflector.drain(10)
        turns = await h.store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
        assert [t.text for t in turns] == [text, "Thanks!"]


def test_a_cleanup_merge_cannot_write_a_secret() -> None:
    now = utcnow()
    batch = [
        Memory(
            id=i,
            user_key=ALICE,
            text=text,
            kind="fact",
            category="tools",
            origin="private",
            source="reflection",
            created_at=now,
            updated_at=now,
        )
        for i, text in ((1, "The user deploys to AWS."), (2, "The user uses AWS for staging."))
    ]

    def merge(text: str) -> PlanOutput:
        op = PlanOperation(
            op="merge",
            ids=[1, 2],
            newer_id=0,
            text=text,
            kind="fact",
            category="tools",
            user_added=[],
            reason="same fact",
        )
        return PlanOutput(operations=[op])

    assert check_plan(merge("The user deploys staging to AWS."), batch) is not None
    assert check_plan(merge(f"The user's AWS key is {AWS_ID}."), batch) is None
    # a durable part is merged without the secret (core.rules.secrets.durable_part)
    assert screen_text(f"The user deploys to AWS with {AWS_ID}.") == "The user deploys to AWS."
    planned = check_plan(merge(f"The user deploys to AWS with {AWS_ID}."), batch)
    assert planned is not None
    assert [p.op.text for p in planned if isinstance(p.op, MergeOp)] == ["The user deploys to AWS."]


@pytest.mark.parametrize(
    ("text", "kept", "named"),
    [
        ("I use Postgres 16 with password admin123", "The user uses Postgres 16.", "A password"),
        (
            "I live in Porto, and my SSN is 536-22-1234.",
            "The user lives in Porto.",
            "A US Social Security number",
        ),
        (
            "The user pays for the team lunch; card 4111 1111 1111 1111",
            "The user pays for the team lunch.",
            "A payment card number",
        ),
    ],
)
async def test_remember_keeps_the_durable_part_and_says_the_secret_was_left_out(
    service: MemoryService, text: str, kept: str, named: str
) -> None:
    metrics = service.metrics = Metrics.create()
    result = await service.remember(user_key=ALICE, text=text)
    assert result.text == kept and result.left_out
    said = replies.remembered(result, code=str)
    assert said == (
        f"Remembered (#{result.id}): {kept} ({named} was left out: secrets are never stored"
        " as memories.)"
    )
    assert [m.text for m in await service.list_memories(user_key=ALICE)] == [kept]
    assert refused(metrics, "remember") is None  # stored, not refused
    for part in ("admin123", "536-22", "1111"):
        assert part not in said
    # the same gate for import lines (and reflection candidates: screen_text)
    await service.import_lines(user_key="cli:bob", lines=[json.dumps({"text": text})])
    (imported,) = await service.list_memories(user_key="cli:bob")
    assert imported.text == kept and not has_secret(imported.text)
