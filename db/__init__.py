"""The lineage store: SQLAlchemy models, sessions, Alembic migrations and the repository.

Other layers use ``db.session`` (engines, ``session_scope``), ``db.migrate`` (``upgrade``) and
``db.repository`` (every read and write); ``db.models`` for typed results.
"""
