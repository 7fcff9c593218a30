"""SelfMind core: the platform-free turn loop, memory store, recall, reflection and streaming."""

__version__ = "0.3.2"
"""This SelfMind's version: the package's (pyproject reads it), ``--version``, ``doctor`` and
the newer-store refusal. It moves with each release and each schema change: a new step of
:data:`core.store.migrations.STEPS` needs a row in :data:`core.store.schema.RELEASES` naming
the version that first knows it, and the newest row is this version
(tests/core/store/test_migration_effects.py)."""
