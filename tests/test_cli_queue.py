"""``kernevo cancel``, ``kernevo export``, ``kernevo jobs --watch`` and ``kernevo worker``'s
refusals: what they write, and one line on stderr for every error."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_through_app import through_the_app
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from db import queue
from db import repository as repo
from db.session import make_engine, session_scope
from kernevo.cli import main

if TYPE_CHECKING:
    from conftest import Seeded

H200 = "nvidia-h200"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _shown(url: str) -> str:
    """``url`` as lines show it: a password as ``***`` (``without_credentials``)."""
    from kernevo.environment import without_credentials

    return without_credentials(url)


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _enqueue(engine: Engine, iterations: int = 10) -> int:
    with session_scope(engine) as s:
        return queue.enqueue_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu_key=queue.NO_GPU,
            shape_bucket="m64n64",
            config={"path": "trsm_small", "dtype": "float64", "iterations": iterations},
        ).id


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_a_queued_job_then_again(
    capsys: pytest.CaptureFixture[str], engine: Engine, fresh_database_url: str
) -> None:
    job_id = _enqueue(engine)
    code, out, err = _run(capsys, "cancel", str(job_id), "--database-url", fresh_database_url)
    assert (code, err) == (0, "")
    assert out == f"job {job_id} cancelled; a running job stops after its iteration in flight\n"
    with session_scope(engine) as s:
        assert repo.get_job(s, job_id).state == "cancelled"
    code, out, err = _run(capsys, "cancel", str(job_id), "--database-url", fresh_database_url)
    assert (code, out, err) == (0, f"job {job_id} was already cancelled; nothing changed\n", "")


def _ended(engine: Engine, state: str) -> int:
    """A queued job that ran and ended ``state`` (complete or failed)."""
    job_id = _enqueue(engine)
    with session_scope(engine) as s:
        queue.claim_job(s, worker="w", accepts=(queue.NO_GPU,), gpu_key="none", gpu_index=None)
    with session_scope(engine) as s:
        repo.update_job_progress(s, job_id, state=state, last_failure_kind="error")
    return job_id


@pytest.mark.parametrize("state", ["complete", "failed"])
def test_cancel_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], engine: Engine, fresh_database_url: str, state: str
) -> None:
    code, _, err = _run(capsys, "cancel", "99", "--database-url", fresh_database_url)
    assert (code, _one_line(err)) == (
        1,
        f"kernevo: job 99 not found; 'kernevo jobs --database-url {_shown(fresh_database_url)}' "
        "lists the jobs",
    )
    # A job that ended keeps the state it ended in (the tester's failed job became cancelled).
    job_id = _ended(engine, state)
    code, _, err = _run(capsys, "cancel", str(job_id), "--database-url", fresh_database_url)
    assert (code, _one_line(err)) == (
        1,
        f"kernevo: job {job_id} is {state}; only a waiting or running job can be cancelled",
    )
    with session_scope(engine) as s:
        assert repo.get_job(s, job_id).state == state
    with pytest.raises(SystemExit) as exited:
        main(["cancel", "0"])
    assert exited.value.code == 2
    assert "a job id must be 1..2147483647, not 0" in _one_line(capsys.readouterr().err)


def test_cancel_through_the_service_needs_a_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A setting missing: a configuration error (exit 2), before any request, naming how to
    make a write token (tests/test_cli_message_gaps.py: the trial's input)."""
    code, _, err = _run(capsys, "cancel", "1", "--api-url", "http://127.0.0.1:9")
    assert (code, _one_line(err)) == (
        2,
        "kernevo: cancel through the service needs a token: set KERNEVO_API_TOKEN to a write "
        "token ('kernevo token create --scope write' on the service's database)",
    )


@pytest.mark.parametrize("ending", ["cancelled", "complete", "failed", "missing"])
def test_cancel_says_the_same_through_the_service_and_on_the_database(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    api_client: TestClient,
    engine: Engine,
    fresh_database_url: str,
    ending: str,
) -> None:
    """``kernevo cancel --api-url`` printed "cancelled" for a job cancelled before, where the
    database route printed "was already cancelled": the service now says which."""
    through_the_app(monkeypatch, api_client)
    if ending == "cancelled":
        job_id = _enqueue(engine)
    elif ending == "missing":
        job_id = 99
    else:
        job_id = _ended(engine, ending)
    runs = []
    for through in (["--api-url", "http://kernevo.test"], ["--database-url", fresh_database_url]):
        runs.append([_run(capsys, "cancel", str(job_id), *through) for _ in range(2)])
    by_service, on_database = runs
    if ending == "cancelled":
        first, second = by_service
        assert first == (0, f"job {job_id} cancelled; a running job stops after its iteration "
                         "in flight\n", "")  # fmt: skip
        assert second == (0, f"job {job_id} was already cancelled; nothing changed\n", "")
        assert on_database == [second, second]
    elif ending == "missing":  # each names the listing of where it asked
        database = f"--database-url {_shown(fresh_database_url)}"
        for through, answers in (("--api-url http://kernevo.test", by_service),
                                 (database, on_database)):  # fmt: skip
            said = f"kernevo: job 99 not found; 'kernevo jobs {through}' lists the jobs\n"
            assert answers == [(1, "", said)] * 2
    else:
        assert by_service == on_database
        [(code, out, err), _] = by_service
        assert (code, out) == (1, "")
        assert _one_line(err).startswith(f"kernevo: job {job_id} ")


# --- export -----------------------------------------------------------------------------------


def test_export_writes_the_champion_as_files(
    capsys: pytest.CaptureFixture[str], seeded: Seeded, fresh_database_url: str, tmp_path: Path
) -> None:
    from db.session import read_scope
    from evolver.champion import stored_payload
    from evolver.store import open_existing_store

    out_dir = tmp_path / "export"
    code, out, err = _run(
        capsys,
        "export",
        "--op",
        "trsm",
        "--dtype",
        "float64",
        "--gpu",
        "NVIDIA H200",
        "-o",
        str(out_dir),
        "--database-url",
        fresh_database_url,
    )
    assert (code, err) == (0, "")
    folder = out_dir / "trsm_small"
    assert out == (
        f"trsm_small float64 on {H200} (shape bucket m64n64): program {seeded.grandchild_id} "
        f"-> {folder}\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        "certificate.json",
        "champion.json",
        "kernel.cu",
        "kernel.cubin",
        "report.json",
        "signature.json",
        "signed_payload.json",
    ]
    assert (folder / "kernel.cubin").read_bytes() == seeded.cubin
    assert (folder / "kernel.cu").read_text() == seeded.grandchild_source
    champion = json.loads((folder / "champion.json").read_text())
    assert (champion["path"], champion["dtype"], champion["gpu"], champion["program_id"]) == (
        "trsm_small",
        "float64",
        H200,
        seeded.grandchild_id,
    )
    assert champion["evaluation_id"] == seeded.verified_evaluation_id
    assert champion["envelope"] == {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]}
    signature = json.loads((folder / "signature.json").read_text())
    assert (signature["signature"], signature["signing_key_id"]) == (None, None)  # unsigned
    assert json.loads((folder / "certificate.json").read_text()) is None
    assert json.loads((folder / "report.json").read_text())["combined_score"] == 2.01
    engine = open_existing_store(fresh_database_url)
    try:
        with read_scope(engine) as s:
            row = repo.best_champion(
                s, path="trsm_small", dtype="float64", gpu_key=H200, shape_bucket="m64n64"
            )
            assert row is not None
            assert (folder / "signed_payload.json").read_bytes() == stored_payload(row)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ["--dtype", "float32", "--gpu", H200],
            f"kernevo: no champion for trsm float32 on {H200} (paths trsm_small, trsm_blocked)",
        ),
        (
            ["--dtype", "float64", "--gpu", "NVIDIA H100"],
            "kernevo: no champion for trsm float64 on nvidia-h100 (paths trsm_small, trsm_blocked)",
        ),
    ],
)
def test_export_errors_are_one_line(
    capsys: pytest.CaptureFixture[str],
    seeded: Seeded,
    fresh_database_url: str,
    tmp_path: Path,
    extra: list[str],
    line: str,
) -> None:
    argv = ["export", *extra, "-o", str(tmp_path / "x"), "--database-url", fresh_database_url]
    code, out, err = _run(capsys, *argv)
    assert (code, out, _one_line(err)) == (1, "", line)
    assert not (tmp_path / "x").exists()


def test_export_of_a_path_that_does_not_implement_the_op_in_the_dtype_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], seeded: Seeded, fresh_database_url: str, tmp_path: Path
) -> None:
    """``--path`` contradicting ``--dtype`` is a contradictory combination of options: exit 2
    (README's exit codes), as ``evolve --path P --dtype D`` of a dtype P lacks, whatever the
    database holds."""
    argv = ["export", "--dtype", "float64", "--gpu", H200, "--path", "trsm_small_z64"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "-o", str(tmp_path / "x"), "--database-url", fresh_database_url])
    out, err = capsys.readouterr()
    assert (exited.value.code, out, _one_line(err)) == (
        2,
        "",
        "kernevo export: error: argument --path: path trsm_small_z64 does not implement trsm "
        "in float64 (it implements trsm in complex128) (see kernevo export --help)",
    )
    assert not (tmp_path / "x").exists()


def test_export_into_a_file_is_one_line(
    capsys: pytest.CaptureFixture[str], seeded: Seeded, fresh_database_url: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["export", "--dtype", "float64", "--gpu", H200, "-o", str(blocker)]
    code, _, err = _run(capsys, *argv, "--database-url", fresh_database_url)
    assert code == 1
    assert _one_line(err) == (
        f"kernevo: export folder {blocker} is a file, not a folder (-o/--output)"
    )  # kernevo.cli.folders._file_in_the_way, before the database is read


def test_export_of_a_missing_database_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    argv = ["export", "--dtype", "float64", "--gpu", H200, "-o", str(tmp_path / "x")]
    code, _, err = _run(capsys, *argv, "--database-url", url)
    assert code == 1
    assert _one_line(err).startswith(f"kernevo: database {url}: no such file ")


# --- jobs --watch -----------------------------------------------------------------------------


def test_jobs_watch_ends_when_no_job_is_active(
    capsys: pytest.CaptureFixture[str], engine: Engine, fresh_database_url: str
) -> None:
    """A running job that completes while watched: the watch fetches again, then ends by
    itself; off a terminal it prints its last listing, exactly plain ``kernevo jobs``'s."""
    job_id = _enqueue(engine, iterations=8)
    with session_scope(engine) as s:
        queue.claim_job(s, worker="host:1:ab", accepts=(queue.NO_GPU,), gpu_key="none",
                        gpu_index=None)  # fmt: skip
        repo.update_job_progress(s, job_id, iteration=3)

    def finish() -> None:
        time.sleep(1.0)
        with session_scope(engine) as s:
            repo.update_job_progress(s, job_id, state="complete", iteration=8, best_score=1.25)

    finisher = threading.Thread(target=finish)
    finisher.start()
    started = time.monotonic()
    code, out, err = _run(
        capsys, "jobs", "--watch", "--interval", "0.2", "--database-url", fresh_database_url
    )
    finisher.join()
    assert (code, err) == (0, "")
    assert time.monotonic() - started < 30
    assert "complete" in out and "8/8" in out and "1.250" in out
    assert "trsm_small/m64n64" in out  # the shape bucket, as the plain listing shows it
    code, plain, err = _run(capsys, "jobs", "--database-url", fresh_database_url)
    assert (code, err) == (0, "")
    beat = re.compile(r"(?<= )\d+[smhd](?= )")  # the heartbeat's age grows meanwhile
    assert beat.sub("?", out) == beat.sub("?", plain)


def test_jobs_watch_of_no_jobs_says_so(
    capsys: pytest.CaptureFixture[str], fresh_database_url: str
) -> None:
    code, out, err = _run(capsys, "jobs", "--watch", "--database-url", fresh_database_url)
    assert (code, out, err) == (0, "no jobs\n", "")


# --- worker refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compile-only", "--gpus", "0"], "--compile-only runs on no GPU: leave out --gpus"),
        (["--gpus", "0,0"], "--gpus names a device twice: 0,0"),
        (
            ["--compile-only", "--grace-s", "2", "--heartbeat-s", "1"],
            "the grace period (2 s) must hold 3 heartbeats (1 s each)",
        ),
        (["--gpus", "0,x"], "argument --gpus: expected a device index, not 'x'"),
        (["--gpus", "1024"], "argument --gpus: a device index must be 0..1023, not 1024"),
        (["--compile-only", "--poll-s", "0"], "argument --poll-s: seconds must be 0.1..3600"),
    ],
)
def test_worker_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", *argv])
    assert exited.value.code == 2
    assert message in _one_line(capsys.readouterr().err)


def test_worker_refuses_what_sqlite_cannot_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from evolver.worker import check_database

    url = f"sqlite:///{tmp_path / 'q.db'}"
    with check_database(url, 1):  # a first worker holds the file
        code, _, err = _run(capsys, "worker", "--compile-only", "--database-url", url)
    assert code == 1
    assert _one_line(err).startswith("kernevo: another kernevo worker (pid ")
    assert err.rstrip().endswith(
        f"already serves the SQLite database {url}: concurrent workers need PostgreSQL "
        "(set KERNEVO_DATABASE_URL=postgresql+psycopg://user@host/db)"
    )
    # Options contradicting the database: a usage error, refused before anything runs.
    with pytest.raises(SystemExit) as stop:
        main(["worker", "--gpus", "0,1", "--database-url", url])
    assert (stop.value.code, _one_line(capsys.readouterr().err)) == (
        2,
        "kernevo worker: error: SQLite has no row locks: 2 jobs at once (--gpus) "
        "need PostgreSQL (set KERNEVO_DATABASE_URL=postgresql+psycopg://user@host/db); on "
        "SQLite a worker runs one GPU (see kernevo worker --help)",
    )
    uri = f"sqlite:///file:{tmp_path / 'q.db'}?uri=true"  # in-memory: test_cli_memory_db.py
    code, _, err = _run(capsys, "worker", "--compile-only", "--database-url", uri)
    assert code == 1 and "cannot share an in-memory or URI SQLite database" in _one_line(err)


def test_worker_on_a_device_that_does_not_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    code, _, err = _run(capsys, "worker", "--gpus", "1023", "--database-url", url)
    assert code == 1
    assert _one_line(err).startswith("kernevo: no CUDA GPU found: ")
    # Refused before the database's lock: no empty q.db, no q.db.worker.lock (they were left,
    # and every later command called the empty file "not a kernevo database").
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("link", ["symlink", "hardlink", "dotted", "symlinked_folder"])
def test_one_worker_per_sqlite_file_whatever_its_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, link: str
) -> None:
    """The tester started a second worker on a symlink (and a hard link) to the first one's
    database: each got a lock of its own. The lock is the real file's (and its inode's)."""
    import os

    from evolver.worker import check_database

    real = tmp_path / "data" / "q.db"
    real.parent.mkdir()
    real.touch()
    other = tmp_path / "elsewhere"
    other.mkdir()
    alias = {
        "symlink": other / "alias.db",
        "hardlink": other / "alias.db",
        "dotted": tmp_path / "data" / "." / ".." / "data" / "q.db",
        "symlinked_folder": other / "linked" / "q.db",
    }[link]
    if link == "symlink":
        alias.symlink_to(real)
    elif link == "hardlink":
        os.link(real, alias)
    elif link == "symlinked_folder":
        alias.parent.symlink_to(real.parent)
    with check_database(f"sqlite:///{real}", 1):
        code, _, err = _run(capsys, "worker", "--compile-only", "--database-url",
                            f"sqlite:///{alias}")  # fmt: skip
    assert code == 1
    line = _one_line(err)
    assert line.startswith("kernevo: another kernevo worker (")
    hint = "(set KERNEVO_DATABASE_URL=postgresql+psycopg://user@host/db)"
    assert line.endswith(f"concurrent workers need PostgreSQL {hint}")
    if link == "hardlink":  # no name in common: the inode's lock refused it
        assert f"through another name of the file {alias}" in line
    else:
        assert "(pid " in line
    # Released with the first worker: the alias serves now.
    with check_database(f"sqlite:///{alias}", 1):
        pass


def test_the_worker_lock_leaves_sqlite_its_own_locks(tmp_path: Path) -> None:
    """A held worker lock on the database file does not block SQLite's writers and readers (its
    byte is far from SQLite's lock bytes), in this process or another."""
    import subprocess
    import sys

    from evolver.worker import check_database

    url = f"sqlite:///{tmp_path / 'q.db'}"
    with check_database(url, 1):
        engine = make_engine(url)
        try:
            from db.migrate import upgrade

            upgrade(url)
            job_id = _enqueue(engine)
            with session_scope(engine) as s:
                assert repo.get_job(s, job_id).state == "waiting"
        finally:
            engine.dispose()
        code = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0);"
            "c.execute('BEGIN IMMEDIATE'); c.execute('UPDATE job SET iteration = 3');"
            "c.commit(); print(c.execute('SELECT iteration FROM job').fetchone()[0])"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "q.db")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout.strip()) == (0, "3"), done.stderr


def test_the_stale_hint_tells_queued_jobs_from_hand_run_ones(
    capsys: pytest.CaptureFixture[str], engine: Engine, fresh_database_url: str
) -> None:
    """The hint said 'kernevo evolve --resume ID' for a worker's job too, which a worker
    requeues and resumes by itself."""
    from datetime import timedelta

    from sqlalchemy import update

    from db.heartbeat import database_now
    from db.models import Job

    queued = _enqueue(engine)
    with session_scope(engine) as s:
        queue.claim_job(s, worker="w", accepts=(queue.NO_GPU,), gpu_key="none", gpu_index=None)
        by_hand = repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu="none",
            shape_bucket="m64n64",
            config={"iterations": 10},
            backend="offline",
            model=None,
        ).id
    with session_scope(engine) as s:
        then = database_now(s) - timedelta(seconds=600)
        s.execute(
            update(Job)
            .where(Job.id.in_([queued, by_hand]))
            .values(state="running", heartbeat_at=then)
        )
    code, out, _ = _run(capsys, "jobs", "--database-url", fresh_database_url)
    assert code == 0
    hand_hint, queued_hint = [line for line in out.splitlines() if line.startswith("stale")]
    assert hand_hint == (
        "stale: running, but no heartbeat for over 90 s: its process is gone; 'kernevo evolve "
        f"--resume ID' continues it (job {by_hand})"
    )
    assert queued_hint == (
        f"stale (queued job {queued}): a worker returns it to the queue once its heartbeat is "
        "older than the worker's --grace-s, and a worker resumes it; nothing to do while a "
        "worker runs"
    )
    # Only the queued one stale: its line alone, with the head.
    with session_scope(engine) as s:
        repo.update_job_progress(s, by_hand, state="failed")
    code, out, _ = _run(capsys, "jobs", "--database-url", fresh_database_url)
    [line] = [line for line in out.splitlines() if line.startswith("stale")]
    assert line.startswith(
        f"stale: running, but no heartbeat for over 90 s: its process is gone (queued job "
        f"{queued}): a worker returns it to the queue"
    )
