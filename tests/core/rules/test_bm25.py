"""The shared BM25 re-scoring (core.rules.bm25): what its constants do to one-sentence
memories."""

from core.rules.bm25 import rescore


def _scores(docs: dict[int, str], query: list[str]) -> list[tuple[float, int]]:
    rows = [(i, text, len(text.split())) for i, text in docs.items()]
    freqs = {t: sum(t in text.split() for text in docs.values()) for t in query}
    return rescore(rows, freqs, n_docs=len(rows), total_len=sum(r[2] for r in rows))


def test_equal_matches_rank_the_shorter_memory_first_not_the_newest() -> None:
    # Both match "dance" and "studio" once; with no length normalisation (b = 0) they would
    # tie exactly and the newer id would win whatever its length.
    docs = {1: "jon dance studio", 2: "jon dance studio open late on fridays near the station"}
    assert [i for _, i in _scores(docs, ["dance", "studio"])] == [1, 2]


def test_a_longer_memory_that_says_more_is_not_ranked_under_a_short_generic_one() -> None:
    # The specific memory holds the question's rarer word too, in a sentence four times as
    # long; FTS5's b = 0.75 put the short generic one (and a two-word one) above it.
    docs = {
        1: "jon runs his dance studio",
        2: "jon is expanding his dance studio and offering workshops and classes to local"
        " schools and mentoring",
        3: "jon dance",
        4: "jon studio",
        5: "gina tea",
        6: "jon likes dance",
        7: "gina offering tea",
    }
    ranked = [i for _, i in _scores(docs, ["jon", "dance", "studio", "offering"])]
    assert ranked[:2] == [2, 1]
