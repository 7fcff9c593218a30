"""Recording the usage each Claude call reports, for the loop, reflection and cleanup alike."""

from __future__ import annotations

from core.model.claude import Usage
from core.store.seams import UsageStore
from core.types import CallKind, UsageRecord


def usage_record(
    *,
    user_key: str,
    workspace: str | None,
    kind: CallKind,
    model: str,
    usage: Usage,
    turn_id: int | None = None,
) -> UsageRecord:
    """The row one Claude call's ``usage`` (as the API reported it) is stored as; a step that
    makes the call stores it in its own transaction (``finish_turn(usage=...)``)."""
    return UsageRecord(
        user_key=user_key,
        workspace=workspace,
        kind=kind,
        model=model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        turn_id=turn_id,
    )


async def record_call(
    store: UsageStore,
    *,
    user_key: str,
    workspace: str | None,
    kind: CallKind,
    model: str,
    usage: Usage,
    turn_id: int | None = None,
) -> None:
    """Record one Claude call's ``usage`` (as the API reported it) in ``store``."""
    await store.record_usage(
        usage=usage_record(
            user_key=user_key,
            workspace=workspace,
            kind=kind,
            model=model,
            usage=usage,
            turn_id=turn_id,
        )
    )
