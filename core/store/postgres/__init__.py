"""The PostgreSQL backend: only what is PostgreSQL's (SQL, migrations, GIN index, advisory
locks).
"""
