"""The ground floor: pure rules the store and memory both use (tokens and stems, BM25,
dedupe, cleanup operations, the secret check). No I/O.
"""
