"""The one price table: Claude list prices in US dollars per million tokens (an estimate).

Source: Anthropic's public list prices (https://www.anthropic.com/pricing and
https://docs.claude.com/en/docs/about-claude/pricing), as the author of this table knew them
**as of 2025-11-24** (:data:`PRICES_AS_OF`); check the page before relying on a figure.
Batch discounts, long-context surcharges (> 200K input tokens) and taxes are not modelled.

Prompt caching, from the same page: a 5-minute cache write costs 1.25 x the input price, a
cache read 0.1 x. ``min_cache_tokens`` is the model's minimum cacheable prompt prefix, from
the prompt-caching documentation (shorter prefixes are processed, never cached).

Models marked ``assumed=True`` had no list price known to the author: they carry the price of
the latest model of the same family that had one, and every report says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.model.claude import Usage

PRICES_AS_OF = "2025-11-24"
PRICES_SOURCE = "https://www.anthropic.com/pricing (Anthropic list prices, USD per MTok)"
CACHE_WRITE_FACTOR = 1.25
"""5-minute cache writes cost 1.25 x the base input price (pricing page)."""
CACHE_READ_FACTOR = 0.1
"""Cache reads cost 0.1 x the base input price (pricing page)."""


@dataclass(frozen=True)
class Price:
    """List prices of one model in USD per million tokens, and its cache minimum in tokens."""

    model: str
    input_per_mtok: float
    output_per_mtok: float
    min_cache_tokens: int
    assumed: bool = False
    note: str = ""

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage`` (uncached input, cache writes and reads, output)."""
        per = self.input_per_mtok / 1e6
        return (
            usage.input_tokens * per
            + usage.cache_creation_input_tokens * per * CACHE_WRITE_FACTOR
            + usage.cache_read_input_tokens * per * CACHE_READ_FACTOR
            + usage.output_tokens * self.output_per_mtok / 1e6
        )


PRICES: dict[str, Price] = {
    p.model: p
    for p in (
        Price("claude-opus-4-5", 5.0, 25.0, 4096),
        Price("claude-opus-4-1", 15.0, 75.0, 1024),
        Price("claude-sonnet-4-5", 3.0, 15.0, 1024),
        Price("claude-haiku-4-5", 1.0, 5.0, 4096),
        Price("claude-3-5-haiku-latest", 0.8, 4.0, 2048),
        Price(
            "claude-opus-4-8",
            5.0,
            25.0,
            1024,
            assumed=True,
            note="no list price known; Opus 4.5's assumed (cache minimum as the test fake)",
        ),
        Price(
            "claude-sonnet-4-6",
            3.0,
            15.0,
            1024,
            assumed=True,
            note="no list price known; Sonnet 4.5's assumed",
        ),
    )
}
"""Known models by API id. Dated snapshot ids (``claude-haiku-4-5-20251001``) resolve to
their alias via :func:`price_of`."""


def price_of(model: str) -> Price | None:
    """The price of ``model`` (an alias or a dated id such as ``claude-haiku-4-5-20251001``),
    or None when the table does not know it."""
    if model in PRICES:
        return PRICES[model]
    base, _, tail = model.rpartition("-")
    if base and tail.isdigit() and len(tail) == 8:
        return PRICES.get(base)
    return None
