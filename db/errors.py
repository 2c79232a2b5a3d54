"""Errors the repository raises. Each carries a one-line message naming what was wrong."""

from __future__ import annotations


class RepositoryError(Exception):
    """Base of every error ``db.repository`` raises on purpose."""


class NotFoundError(RepositoryError, LookupError):
    """A job, program or evaluation id that is not in the database."""


class UnknownParentError(RepositoryError, LookupError):
    """``record_program`` got a ``parent_uid`` that no recorded program has."""


class ProgramConflictError(RepositoryError, ValueError):
    """A program uid recorded again with a different source (programs are immutable)."""


class NotVerifiedError(RepositoryError, ValueError):
    """``promote_champion`` got an evaluation whose state is not ``verified``."""


class ChampionMismatchError(RepositoryError, ValueError):
    """A promotion whose evaluation, program or cubin does not belong to the champion key."""


class InvalidTransitionError(RepositoryError, ValueError):
    """A job state change that ``db.states.JOB_TRANSITIONS`` does not allow."""


class InvalidValueError(RepositoryError, ValueError):
    """An argument outside its allowed values (unknown state, malformed launch or envelope)."""
