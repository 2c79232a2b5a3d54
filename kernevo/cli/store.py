"""The store a command opens: its URL, and what a refusal of a database without the job
suggests."""

from __future__ import annotations

import argparse

from kernevo.environment import SettingsError


def _store_url(args: argparse.Namespace) -> str:
    """The store's URL: ``--database-url``, else ``KERNEVO_DATABASE_URL``. An in-memory SQLite
    database (``db.session.in_memory_problem``) is refused as a usage error (exit 2) by every
    command that opens the store, before anything runs: the option by its argparse type
    (``arguments._database_url``), the variable here.

    Raises:
        SettingsError: ``KERNEVO_DATABASE_URL`` names an in-memory database.
    """
    from db.session import in_memory_problem
    from db.settings import DatabaseSettings

    if args.database_url:  # checked as it was parsed (arguments._database_url)
        return str(args.database_url)
    url = DatabaseSettings().database_url
    problem = in_memory_problem(url)
    if problem is not None:
        raise SettingsError(
            f"KERNEVO_DATABASE_URL: {problem}", check="value_error", name="KERNEVO_DATABASE_URL"
        )
    return url


# What a refusal of a database without the job suggests: creating one (what evolve or serve
# would do) finds no job in it either.
_JOB_DATABASE_HINT = "point --database-url (or KERNEVO_DATABASE_URL) at the job's database"
