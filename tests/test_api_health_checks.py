"""``/healthz`` beyond "the database answers": a damaged page that no query of the check reads
fails it (SQLite's bounded ``PRAGMA quick_check``), a check that runs out of time says
``unchecked``, and a database the service cannot write is ``degraded`` while every write
answers 503 naming the read-only database (its password masked)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import API_TOKEN, bearer, seed_lineage
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from api.app import create_app
from db import health
from db.migrate import head_revision, upgrade

AUTH = bearer(API_TOKEN)
JOB = {"path": "trsm_small", "dtype": "float64", "gpu": "nvidia-h200"}


@pytest.fixture(autouse=True)
def _configured_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)


def _health(*, status: str, integrity: str, read_only: bool) -> dict[str, object]:
    return {
        "status": status,
        "database": "ok",
        "schema_revision": head_revision(),
        "schema_head": head_revision(),
        "integrity": integrity,
        "read_only": read_only,
    }


def test_a_writable_intact_database_is_ok(fresh_database_url: str) -> None:
    sqlite = fresh_database_url.startswith("sqlite")
    with TestClient(create_app(fresh_database_url)) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    # PostgreSQL has no page check to run: a damaged page fails the query that reads it.
    assert response.json() == _health(
        status="ok", integrity="ok" if sqlite else "unchecked", read_only=False
    )


def test_a_damaged_page_of_a_table_fails_the_health_check(tmp_path: Path) -> None:
    path = tmp_path / "kernevo.db"
    upgrade(f"sqlite:///{path}")
    seed_lineage(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:
        (root,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'program'"
        ).fetchone()
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    connection.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start : start + page_size] = b"\xa5" * page_size
    path.write_bytes(bytes(data))
    with TestClient(create_app(f"sqlite:///{path}"), headers=AUTH) as client:
        response = client.get("/healthz")
        assert response.status_code == 503
        # SQLite refuses the damaged root page outright (SQLITE_CORRUPT), before any finding.
        assert response.json() == {
            "detail": "database is damaged: database disk image is malformed"
        }
        # The health check's own query (alembic_version) reads fine: only the page check sees it.
        assert client.get("/v1/version").status_code == 200


def test_a_check_past_its_budget_is_unchecked_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kernevo.db"
    upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:  # about 40 MB: tens of milliseconds to check
        connection.execute("CREATE TABLE filler (data BLOB)")
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "INSERT INTO filler SELECT randomblob(2000) FROM n"
        )
    connection.close()
    monkeypatch.setattr(health, "QUICK_CHECK_BUDGET_S", 0.001)
    with TestClient(create_app(f"sqlite:///{path}")) as client:
        # The 1 ms timer fires while the check runs, unless this busy machine starts its thread
        # only after the check's tens of milliseconds: a few tries.
        for _ in range(5):
            response = client.get("/healthz")
            assert response.status_code == 200
            if response.json()["integrity"] == "unchecked":
                break
        assert response.json() == _health(status="ok", integrity="unchecked", read_only=False)
        # The interrupt never reaches a later request's statements on the pooled connection.
        monkeypatch.setattr(health, "QUICK_CHECK_BUDGET_S", 5.0)
        assert client.get("/healthz").json()["integrity"] == "ok"


def _read_only_url(url: str) -> str:
    """``url`` opened so that every write is refused by the database itself: a SQLite file:
    URI with ``mode=ro``; a PostgreSQL session with ``default_transaction_read_only`` on and a
    password in the URL (trust auth ignores it) that the answer must mask."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite:///file:{parsed.database}?mode=ro&uri=true"
    options = parsed.query["options"] + " -cdefault_transaction_read_only=on"
    read_only = parsed.set(password="hunter2").update_query_dict({"options": options})
    return read_only.render_as_string(hide_password=False)


def test_a_read_only_database_is_degraded_and_its_writes_say_so(fresh_database_url: str) -> None:
    url = _read_only_url(fresh_database_url)
    sqlite = url.startswith("sqlite")
    with TestClient(create_app(url), headers=AUTH) as client:
        response = client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == _health(
            status="degraded", integrity="ok" if sqlite else "unchecked", read_only=True
        )
        response = client.post("/v1/jobs", json=JOB)
        assert client.get("/v1/jobs").json() == []
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    if sqlite:
        name = f"file:{make_url(fresh_database_url).database}"
        reason = "attempt to write a readonly database"
        remedy = "make the file, its -wal and -shm files and its folder writable by this process"
    else:
        name = make_url(url).render_as_string(hide_password=True)
        assert "hunter2" not in name and ":***@" in name
        reason = "cannot execute INSERT in a read-only transaction"
        remedy = "point kernevo at a writable primary"
    assert response.json() == {"detail": f"database {name} is read-only ({reason}); {remedy}"}


@contextmanager
def _unwritable(folder: Path) -> Iterator[None]:
    """``folder`` made unwritable for this process: its mode 0555, or for root (whom modes do
    not stop) the immutable attribute; the test is skipped when neither holds."""
    folder.chmod(0o555)
    immutable = False
    try:
        if os.access(folder, os.W_OK):
            done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
            immutable = done.returncode == 0
            if not immutable:
                pytest.skip("cannot make a folder unwritable here (root without chattr)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_a_database_in_an_unwritable_folder_says_why_it_cannot_be_opened(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "kernevo.db"
    upgrade(f"sqlite:///{path}")  # closed: no -wal or -shm file left beside it
    assert [p.name for p in folder.iterdir()] == ["kernevo.db"]
    expected = {
        "detail": "database is unreachable: unable to open database file (its folder "
        f"{folder} is not writable, and SQLite in WAL mode creates kernevo.db-shm there even "
        "to read)"
    }
    with _unwritable(folder), TestClient(create_app(f"sqlite:///{path}"), headers=AUTH) as client:
        for response in (
            client.get("/healthz"),
            client.get("/v1/jobs"),
            client.post("/v1/jobs", json=JOB),
        ):
            assert response.status_code == 503
            assert response.json() == expected
