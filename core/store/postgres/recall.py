"""BM25 recall in PostgreSQL: the SQL that picks a user's candidate pool, and the exact
re-scoring (:func:`core.rules.bm25.rescore`, shared with SQLite) that ranks it.

One statement, one round trip: the GIN index finds the user's active memories holding any
query term (terms carry the user's id, so only that user's postings are read); a boolean per
term and memory gives each term's document frequency among them; the best
``max(10 * k, 60)`` by BM25 with every term counted once come back with the memory rows,
the user's N and total length, and the frequencies. :func:`core.rules.bm25.rescore` ranks that
pool by exact Okapi BM25. Where this can differ from SQLite: :mod:`core.store.postgres.store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import asyncpg

from core.rules.bm25 import BM25_B, BM25_K1, candidate_pool, rescore
from core.rules.places import check_reaches, parse_place
from core.rules.text import query_terms
from core.types import Memory, ScoredMemory

MAX_TERM_CHARS = 2046
"""PostgreSQL's longest lexeme, in bytes (index terms are ASCII)."""

MEMORY_COLUMNS = (
    "m.id, m.text, m.kind, m.category, m.source, m.origin, m.created_at, m.updated_at,"
    " m.conversation_key, m.superseded_by, m.about, m.valid_from, m.valid_until, m.place"
)
_N = MEMORY_COLUMNS.count(",") + 1
"""Where the pool's own columns begin after :data:`MEMORY_COLUMNS` (terms, n_terms, the
user's N and total length, the frequencies)."""
COLUMN_TERMS = 64
"""Queries with up to this many distinct terms get one boolean column per term (fastest);
longer ones use the row-per-match form of the same ranking."""

# Both forms: $1 uid, $2 tsquery (any term), $3 reach tokens (NULL: all), $4 pool size,
# $5 k1, $6 b; then the terms. Each counts every term's document frequency among the
# user's active memories holding any term (not only those of the wanted reach, as
# SQLite's vocabulary does), ranks by BM25 with each term counted once, and returns the
# pool with the user's N, total length and the frequencies aligned with the terms.
_USER = (
    "u AS (SELECT n_docs, total_len, CASE WHEN n_docs > 0 AND total_len > 0"
    " THEN total_len::float8 / n_docs ELSE 1.0 END AS avgdl FROM users WHERE uid = $1)"
)
_HITS = "FROM memories m WHERE m.uid = $1 AND m.superseded_by IS NULL AND m.tsv @@ $2::tsquery"
_LENGTH_NORM = "(1 + $5::float8 * (1 - $6::float8 + $6::float8 * h.len / u.avgdl))"
_POOL_COLUMNS = f"{MEMORY_COLUMNS}, m.terms, m.n_terms, u.n_docs, u.total_len"
_REACHABLE = "($3::text[] IS NULL OR h.reach = ANY($3::text[]))"
"""The place rule's filter (:mod:`core.rules.places`), pushed into the ranking."""


@lru_cache(maxsize=COLUMN_TERMS)
def _recall_sql(k: int) -> str:
    """The one-column-per-term form for ``k`` terms ($7 ... as tsquery)."""
    found = ", ".join(f"m.tsv @@ ${7 + i}::tsquery AS f{i}" for i in range(k))
    counts = ", ".join(f"count(*) FILTER (WHERE f{i})::float8 AS d{i}" for i in range(k))
    weights = ", ".join(
        f"ln(1 + (u.n_docs - c.d{i} + 0.5) / (c.d{i} + 0.5)) AS w{i}" for i in range(k)
    )
    score = " + ".join(f"CASE WHEN h.f{i} THEN w.w{i} ELSE 0 END" for i in range(k))
    dfs = ", ".join(f"w.d{i}::bigint" for i in range(k))
    return (
        f"WITH hits AS MATERIALIZED (SELECT m.id, m.n_terms::float8 AS len, m.reach, {found}"
        f" {_HITS}), {_USER},"
        f" w AS MATERIALIZED (SELECT c.*, {weights} FROM (SELECT {counts} FROM hits) c, u),"
        f" top AS (SELECT h.id, ({score}) / {_LENGTH_NORM} AS s FROM hits h, w, u"
        f" WHERE {_REACHABLE} ORDER BY s DESC, h.id DESC LIMIT $4)"
        f" SELECT {_POOL_COLUMNS}, ARRAY[{dfs}]"
        " FROM top t JOIN memories m ON m.id = t.id CROSS JOIN w CROSS JOIN u"
    )


# The row-per-match form: $7 the quoted terms as text[].
_RECALL_MANY = (
    "WITH q AS MATERIALIZED (SELECT n::int AS i, t::tsquery AS tq"
    " FROM unnest($7::text[]) WITH ORDINALITY AS x(t, n)),"
    f" hits AS MATERIALIZED (SELECT m.id, m.n_terms::float8 AS len, m.reach, m.tsv {_HITS}),"
    " matches AS MATERIALIZED (SELECT h.id, h.len, h.reach, q.i FROM q"
    " CROSS JOIN LATERAL (SELECT id, len, reach FROM hits WHERE hits.tsv @@ q.tq) h),"
    f" {_USER},"
    " c AS MATERIALIZED (SELECT i, count(*)::float8 AS n FROM matches GROUP BY i),"
    " w AS MATERIALIZED (SELECT array_agg(COALESCE(c.n, 0)::bigint ORDER BY q.i) AS dfs,"
    " array_agg(COALESCE(ln(1 + (u.n_docs - c.n + 0.5) / (c.n + 0.5)), 0) ORDER BY q.i) AS ws"
    " FROM q LEFT JOIN c ON c.i = q.i CROSS JOIN u),"
    f" top AS (SELECT h.id, sum(w.ws[h.i]) / {_LENGTH_NORM} AS s FROM matches h, w, u"
    f" WHERE {_REACHABLE} GROUP BY h.id, h.len, u.avgdl"
    " ORDER BY s DESC, h.id DESC LIMIT $4)"
    f" SELECT {_POOL_COLUMNS}, w.dfs"
    " FROM top t JOIN memories m ON m.id = t.id CROSS JOIN w CROSS JOIN u"
)


def memory_from_row(row: Sequence[Any], user_key: str) -> Memory:
    """A :class:`Memory` from the first columns of a ``MEMORY_COLUMNS`` row."""
    return Memory(
        id=row[0],
        user_key=user_key,
        text=row[1],
        kind=row[2],
        category=row[3],
        source=row[4],
        origin=row[5],
        created_at=row[6],
        updated_at=row[7],
        conversation_key=row[8],
        superseded_by=row[9],
        about=row[10],
        valid_from=row[11],
        valid_until=row[12],
        place=parse_place(row[13]),
    )


async def search_user(
    conn: asyncpg.Connection,
    uid: int,
    user_key: str,
    query: str,
    k: int,
    reach: Sequence[str] | None,
    pool: int | None = None,
) -> list[ScoredMemory]:
    """BM25 recall of user ``uid`` on ``conn``: at most ``k`` memories, best first, from
    ``pool`` re-scored candidates (default :func:`core.rules.bm25.candidate_pool` of ``k``)."""
    # A lexeme has at most 2046 bytes; a longer query word matches no memory anyway.
    terms = [t for t in query_terms(uid, query) if len(t) <= MAX_TERM_CHARS]
    if not terms or (reach is not None and not reach):
        return []
    # Terms are [a-z0-9_] only, so quoting them cannot break out of the tsquery syntax.
    quoted = [f"'{t}'" for t in terms]
    term_args: list[Any]
    if len(terms) <= COLUMN_TERMS:
        sql, term_args = _recall_sql(len(terms)), list(quoted)
    else:
        sql, term_args = _RECALL_MANY, [quoted]
    rows = await conn.fetch(
        sql,
        uid,
        " | ".join(quoted),
        None if reach is None else check_reaches(reach),
        candidate_pool(k, pool),
        BM25_K1,
        BM25_B,
        *term_args,
    )
    if not rows:
        return []
    first = rows[0]
    doc_freqs = dict(zip(terms, first[_N + 4], strict=True))
    scores = rescore(
        ((r[0], r[_N], r[_N + 1]) for r in rows),
        doc_freqs,
        n_docs=first[_N + 2],
        total_len=first[_N + 3],
    )
    by_id = {r[0]: r for r in rows}
    return [
        ScoredMemory(memory=memory_from_row(by_id[memory_id], user_key), score=score)
        for score, memory_id in scores[:k]
    ]
