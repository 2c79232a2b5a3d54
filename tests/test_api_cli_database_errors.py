"""A locked, damaged or missing SQLite database: the API answers 503 with a one-line JSON
``detail`` (and ``/healthz`` fails), ``kernevo jobs`` prints one line and exits 1; reads through
either never change the database file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import API_TOKEN, Seeded, bearer, create_api_token, seed_lineage
from fastapi.testclient import TestClient
from test_db_session import exclusive_lock, fingerprint

import db.session
from api.app import create_app
from kernevo.cli import main

LOCK_WAIT_S = 0.2  # busy timeout in these tests: long enough to queue, short enough to fail
# Every /v1 read needs a token: the configured one (scope write), compared without the database,
# so what these tests see is the route's own answer to the database's state.
AUTH = bearer(API_TOKEN)


@pytest.fixture(autouse=True)
def _configured_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)


@pytest.fixture
def sqlite_lineage(tmp_path: Path) -> tuple[Path, Seeded]:
    """A migrated SQLite file with the seeded lineage, every connection to it closed."""
    from db.migrate import upgrade

    path = tmp_path / "kernevo.db"
    upgrade(f"sqlite:///{path}")
    return path, seed_lineage(f"sqlite:///{path}")


def _get_paths(seeded: Seeded) -> list[str]:
    best = "/v1/kernels/best?op=trsm&dtype=float64&gpu=nvidia-h200&m=64&n=64"
    return [
        "/v1/jobs",
        f"/v1/jobs/{seeded.job_id}",
        f"/v1/programs/{seeded.grandchild_id}",
        f"/v1/programs/{seeded.grandchild_id}/lineage",
        best,
    ]


def _assert_one_line_503(response: object, starts: str) -> None:
    assert response.status_code == 503, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/json"  # type: ignore[attr-defined]
    detail = response.json()["detail"]  # type: ignore[attr-defined]
    assert detail.startswith(starts) and "\n" not in detail, detail


# --- API --------------------------------------------------------------------------------------


def test_gets_and_the_health_check_never_change_the_file(
    sqlite_lineage: tuple[Path, Seeded],
) -> None:
    path, seeded = sqlite_lineage
    before = fingerprint(path)
    with TestClient(create_app(f"sqlite:///{path}"), headers=AUTH) as client:
        for url in ["/healthz", *_get_paths(seeded)]:
            assert client.get(url).status_code == 200, url
    assert fingerprint(path) == before


def test_a_locked_database_is_a_503_and_a_failing_health_check(
    sqlite_lineage: tuple[Path, Seeded],
) -> None:
    path, seeded = sqlite_lineage
    app = create_app(f"sqlite:///{path}", busy_timeout_s=LOCK_WAIT_S)
    with TestClient(app, headers=AUTH) as client:
        with exclusive_lock(path):
            for url in ["/healthz", *_get_paths(seeded)]:
                _assert_one_line_503(client.get(url), "database is locked")
        # The lock is gone: the same service answers again.
        assert client.get("/healthz").status_code == 200
        assert client.get(f"/v1/jobs/{seeded.job_id}").json()["state"] == "waiting"


def test_a_database_token_on_a_locked_database_is_a_503_not_a_401(
    sqlite_lineage: tuple[Path, Seeded],
) -> None:
    """A token of the database is looked up in it: a locked database cannot say whether the
    token is valid, so the answer is 503 (retry), never 401 (the token is not at fault)."""
    path, seeded = sqlite_lineage
    reader = create_api_token(f"sqlite:///{path}", "read")
    app = create_app(f"sqlite:///{path}", busy_timeout_s=LOCK_WAIT_S)
    with TestClient(app, headers=bearer(reader)) as client:
        with exclusive_lock(path):
            _assert_one_line_503(client.get(f"/v1/jobs/{seeded.job_id}"), "database is locked")
        assert client.get(f"/v1/jobs/{seeded.job_id}").status_code == 200


def test_a_locked_database_refuses_writes_with_503(
    sqlite_lineage: tuple[Path, Seeded], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, seeded = sqlite_lineage
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    app = create_app(f"sqlite:///{path}", busy_timeout_s=LOCK_WAIT_S)
    with TestClient(app, headers=AUTH) as client, exclusive_lock(path):
        patch = client.patch(
            f"/v1/jobs/{seeded.job_id}",
            json={"state": "cancelled"},
            headers={"Authorization": f"Bearer {API_TOKEN}"},
        )
        _assert_one_line_503(patch, "database is locked")
    with TestClient(app, headers=AUTH) as client:  # the refused write left no trace
        assert client.get(f"/v1/jobs/{seeded.job_id}").json()["state"] == "waiting"


@pytest.mark.parametrize(
    ("content", "starts"),
    [
        (b"", None),  # an empty file is a valid empty database: no kernevo tables
        (b"not a database at all\n" * 400, "database is damaged: file is not a database"),
        (bytes(range(256)) * 64, "database is damaged: file is not a database"),
    ],
)
def test_a_damaged_database_is_a_503_and_a_failing_health_check(
    tmp_path: Path, content: bytes, starts: str | None
) -> None:
    path = tmp_path / "kernevo.db"
    path.write_bytes(content)
    with TestClient(
        create_app(f"sqlite:///{path}", busy_timeout_s=LOCK_WAIT_S), headers=AUTH
    ) as client:
        health = client.get("/healthz")
        if starts is None:
            assert health.status_code == 200
            assert health.json()["schema_revision"] is None
        else:
            _assert_one_line_503(health, starts)
            _assert_one_line_503(client.get("/v1/jobs"), starts)
            _assert_one_line_503(client.get("/v1/programs/1"), starts)
    assert path.read_bytes() == content


def test_a_torn_database_is_a_503(sqlite_lineage: tuple[Path, Seeded]) -> None:
    path, seeded = sqlite_lineage
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    data[page_size:] = b"\xa5" * (len(data) - page_size)  # every page after the header's
    path.write_bytes(bytes(data))
    with TestClient(create_app(f"sqlite:///{path}"), headers=AUTH) as client:
        _assert_one_line_503(client.get("/healthz"), "database is damaged")
        _assert_one_line_503(client.get(f"/v1/jobs/{seeded.job_id}"), "database is damaged")


def test_a_missing_database_file_fails_the_health_check(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    with TestClient(create_app(f"sqlite:///{path}"), headers=AUTH) as client:
        _assert_one_line_503(client.get("/healthz"), "database is unreachable")
        _assert_one_line_503(client.get("/v1/jobs"), "database is unreachable")
    assert not path.exists()


# --- CLI --------------------------------------------------------------------------------------


def _jobs(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["jobs", "--database-url", f"sqlite:///{path}"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_one_line(err: str, reason: str) -> None:
    # The CLI shortens a long echoed path; the reason stays whole at the end.
    assert err.startswith("kernevo: database sqlite:///") and err.endswith(f" {reason}\n"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_kernevo_jobs_never_changes_the_file(
    sqlite_lineage: tuple[Path, Seeded], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = sqlite_lineage
    before = fingerprint(path)
    status, out, err = _jobs(path, capsys)
    assert (status, err) == (0, "")
    assert out.splitlines()[1].split()[:5] == [
        "1",
        "trsm_small/m64n64",
        "float64",
        "nvidia-h200",
        "waiting",
    ]
    assert fingerprint(path) == before


def test_kernevo_jobs_on_a_locked_database_is_one_line(
    sqlite_lineage: tuple[Path, Seeded],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, _ = sqlite_lineage
    monkeypatch.setattr(db.session, "SQLITE_BUSY_TIMEOUT_S", LOCK_WAIT_S)
    with exclusive_lock(path):
        status, out, err = _jobs(path, capsys)
    assert (status, out) == (1, "")
    _assert_one_line(err, "database is locked")


@pytest.mark.parametrize("content", [b"not a database at all\n" * 400, bytes(range(256)) * 64])
def test_kernevo_jobs_on_a_damaged_database_is_one_line(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kernevo.db"
    path.write_bytes(content)
    status, out, err = _jobs(path, capsys)
    assert (status, out) == (1, "")
    _assert_one_line(err, "file is not a database")
    assert path.read_bytes() == content
