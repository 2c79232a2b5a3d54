"""Declarative base whose MetaData names every constraint and index the same way on every backend.

Stable names let Alembic migrations drop or alter a constraint by name on SQLite and PostgreSQL
alike (the convention from the SQLAlchemy docs, "Configuring Constraint Naming Conventions").
"""

from __future__ import annotations

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of every kernevo table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
