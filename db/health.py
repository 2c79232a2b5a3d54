"""Cheap probes of a database's health beyond "it answers a query": whether its pages are intact
(SQLite's ``PRAGMA quick_check``, bounded in time) and whether the writer can write to it.

``/healthz`` runs both on every call, so both are bounded: the integrity check gives up after
``QUICK_CHECK_BUDGET_S`` and says so (``unchecked``) rather than slowing a health probe down.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Literal

from sqlalchemy import text
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from db.errors import DatabaseUnavailableError
from db.session import sqlite_file

# Measured on a 2-core machine: PRAGMA quick_check reads a 1.6 MB database in about 3 ms and a
# 531 MB one in 250-390 ms from the page cache (9 s from disk). 100 ms covers a database of
# roughly 100 MB while keeping /healthz fast on any size.
QUICK_CHECK_BUDGET_S = 0.1

_SQLITE_INTERRUPT = 9

Integrity = Literal["ok", "unchecked"]


def integrity(session: Session, *, budget_s: float | None = None) -> Integrity:
    """``ok`` when SQLite's ``PRAGMA quick_check`` finished within ``budget_s`` (default
    ``QUICK_CHECK_BUDGET_S``, read at the call) and found every
    page intact; ``unchecked`` when it ran out of time, or on PostgreSQL (which has no such
    check: a damaged page there fails the query that reads it, XX001).

    ``quick_check`` reads every page of every table and index (not index contents against
    rows, which ``integrity_check`` does at several times the cost), so a damaged page no
    query of the health check itself reads is found.

    Raises:
        db.errors.DatabaseUnavailableError: ``damaged``, with quick_check's first finding.
        sqlalchemy.exc.DBAPIError: the check failed otherwise (the caller classifies it).
    """
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return "unchecked"
    driver = connection.connection.driver_connection
    # sqlite3_interrupt from a timer, not a progress handler: SQLite checks every page of the
    # file in one VM instruction, which a progress handler cannot stop.
    budget = QUICK_CHECK_BUDGET_S if budget_s is None else budget_s
    timer = threading.Timer(budget, driver.interrupt)
    timer.start()
    try:
        rows = [row[0] for row in connection.execute(text("PRAGMA quick_check(5)"))]
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlite_errorcode", None) == _SQLITE_INTERRUPT:
            return "unchecked"
        raise
    finally:
        # An interrupt that fires after the check ended is cleared by SQLite when the next
        # statement starts on an idle connection; joining keeps it out of a later request.
        timer.cancel()
        timer.join()
    if rows == ["ok"]:
        return "ok"
    # Findings come one per row; the first may open with a "*** in database main ***" line.
    lines = [line for row in rows for line in str(row).splitlines() if not line.startswith("***")]
    finding = " ".join(lines[0].split())[:200] if lines else "no finding named"
    raise DatabaseUnavailableError(
        "damaged", f"database is damaged: PRAGMA quick_check found: {finding}"
    )


def _sqlite_read_only(url: URL) -> bool:
    database = sqlite_file(url)
    if database is None:
        # A file: URI says itself whether the writer may write (mode=ro, immutable=1).
        return url.query.get("mode") == "ro" or url.query.get("immutable") == "1"
    path = Path(database).expanduser()
    if not os.access(path, os.W_OK):
        return True
    # WAL mode writes the -wal and -shm files beside the database: each must be writable, or
    # the folder (to create them) where they do not exist.
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists() and not os.access(side, os.W_OK):
            return True
        if not side.exists() and not os.access(path.parent, os.W_OK):
            return True
    return False


def read_only(engine: Engine, session: Session) -> bool:
    """Whether the writer engine ``engine`` cannot write: SQLite, the database file (or its
    WAL files, or the folder that must hold them) is not writable by this process, or the URL
    opens it read-only; PostgreSQL, the server is a standby in recovery or the database's
    ``default_transaction_read_only`` is on (asked through ``session``, any session on it).

    Raises:
        sqlalchemy.exc.DBAPIError: PostgreSQL did not answer (the caller classifies it).
    """
    if engine.dialect.name == "sqlite":
        return _sqlite_read_only(engine.url)
    row = session.execute(
        text(
            "SELECT pg_is_in_recovery() OR current_setting('default_transaction_read_only') = 'on'"
        )
    ).one()
    return bool(row[0])
