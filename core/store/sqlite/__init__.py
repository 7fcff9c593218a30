"""The SQLite backend: only what is SQLite's (SQL, migrations, FTS5 index terms)."""
