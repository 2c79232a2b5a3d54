"""A job's work folder belongs to one job of one database (``evolver.work_folder``).

Job ids restart at 1 in every database, and work folders were ``job-<id>`` alone. A fresh user's
trial found both faces of it: a new database's job 1 took the old job 1's ``initial_program.cu``
as its seed (every iteration failed ``edit_outside_evolve_block``, the job ended ``complete``),
and a resume of job 1 of one database called job 1 of another's checkpoints broken and deleted
them. These tests run both reproductions, and the same kind of thing: two databases resuming
equal ids, a folder marked for another job, a folder left by a deleted database, a job created
before work keys taking over its old folder, and a seed that fails its own screen.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _postgres_schema
from job_store import job_row, offline_settings, set_job_state, small_job
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from db.models import Evaluation, Program
from evolver.checkpoints import latest_checkpoint
from evolver.errors import SeedScreenError
from evolver.runner import resume_job, start_job
from evolver.work_folder import (
    MARKER_FORMAT,
    FolderOwner,
    WorkFolderError,
    holding_work_folder,
    legacy_folder,
    legacy_ownership,
    work_folder,
)
from seeds.registry import get_path

# --- helpers ------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    # The offline mutator: no LLM endpoint from the caller's environment.
    return {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}


def _kernevo(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path → sha256 of its bytes)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _folder(url: str, root: Path, job_id: int = 1) -> Path:
    return work_folder(root, job_id, job_row(url, job_id).work_key)


@pytest.fixture
def other_database_url(
    fresh_database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[str]:
    """A second database of ``fresh_database_url``'s backend (another SQLite file, another
    PostgreSQL schema), migrated: its job ids start at 1 too."""
    from db.migrate import upgrade

    if fresh_database_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path_factory.mktemp('other') / 'b.db'}"
        upgrade(url)
        yield url
        return
    with _postgres_schema(request.getfixturevalue("postgres_server_url")) as url:
        upgrade(url)
        yield url


# --- the two reproductions, through the CLI -----------------------------------------------------


def test_a_new_database_job_1_never_takes_the_old_job_1_seed(tmp_path: Path) -> None:
    """``evolve solve_tri; rm kernevo.db; evolve band_bidiag``: the second job 1 ran solve_tri's
    source as band_bidiag's seed. Now each job 1 has its own folder, the band_bidiag job's seed
    is band_bidiag's and passes the screen, and the first folder is left as it was."""
    first = _kernevo(
        "evolve", "--path", "solve_tri", "--dtype", "float32", "--compile-only",
        "--iterations", "2", cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    (old,) = (tmp_path / "runs").iterdir()
    before = _tree(old)
    (tmp_path / "kernevo.db").unlink()

    second = _kernevo(
        "evolve", "--path", "band_bidiag", "--dtype", "float64", "--compile-only",
        "--iterations", "2", cwd=tmp_path,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    new = _folder(url, tmp_path / "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([old.name, new.name])
    assert old.name.startswith("job-1-") and new.name.startswith("job-1-") and old != new
    assert f"work folder {new}" in second.stdout.splitlines()[0]
    assert _tree(old) == before  # nothing of the old job read into or written over

    marker = json.loads((new / "job.json").read_text())
    assert (marker["format"], marker["job_id"], marker["path"]) == (
        MARKER_FORMAT,
        1,
        "band_bidiag",
    )
    assert marker["work_key"] == job_row(url).work_key
    assert json.loads((old / "job.json").read_text())["path"] == "solve_tri"
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            (seed,) = s.scalars(select(Program).where(Program.parent_id.is_(None)))
            assert seed.source == get_path("band_bidiag").seed_source()
            statuses = {e.report["status"] for e in s.scalars(select(Evaluation))}
    finally:
        engine.dispose()
    assert statuses == {"compiled"}  # no screen_error: the seed and its children are band_bidiag's
    assert "screen_error" not in second.stdout


def _run_until_checkpoint(args: list[str], url: str, cwd: Path, signum: int) -> int:
    """Run ``kernevo evolve ARGS`` in ``cwd`` until its job (job 1 of ``url``) has a complete
    checkpoint, then stop it with ``signum`` (SIGINT as Ctrl-C does: to the process group);
    returns the job's iteration afterwards."""
    job = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", "evolve", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before it could be stopped"
            try:
                folder = _folder(url, cwd / "runs")
            except Exception:  # no database, schema or row yet
                folder = None
            if folder is not None and latest_checkpoint(folder / "openevolve") is not None:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the job wrote no checkpoint in time")
        if signum == signal.SIGINT:
            os.killpg(job.pid, signal.SIGINT)
        else:
            job.send_signal(signum)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 128 + signum, out[-2000:] + err
    assert f"job 1 stopped by {signal.Signals(signum).name} at iteration " in out
    return job_row(url).iteration


def test_two_databases_stopped_in_one_folder_keep_their_checkpoints(tmp_path: Path) -> None:
    """A solve_tri job in kernevo.db stopped by SIGTERM, another in b.db stopped by SIGINT: both
    job 1. The resume of kernevo.db's job 1 called every checkpoint broken and deleted b.db's.
    Now each resumes from its own newest checkpoint, and neither touches the other's folder."""
    common = ["--path", "solve_tri", "--dtype", "float32", "--compile-only"]
    common += ["--iterations", "1000", "--checkpoint-interval", "2"]
    a_url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    b_url = f"sqlite:///{tmp_path / 'b.db'}"
    a_at = _run_until_checkpoint(common, a_url, tmp_path, signal.SIGTERM)
    b_at = _run_until_checkpoint(
        [*common, "--database-url", "sqlite:///./b.db"], b_url, tmp_path, signal.SIGINT
    )
    a_folder, b_folder = _folder(a_url, tmp_path / "runs"), _folder(b_url, tmp_path / "runs")
    assert a_folder != b_folder
    a_checkpoint = latest_checkpoint(a_folder / "openevolve")
    b_checkpoint = latest_checkpoint(b_folder / "openevolve")
    assert a_checkpoint is not None and b_checkpoint is not None
    b_before = _tree(b_folder)

    resumed = _kernevo("evolve", "--resume", "1", "--iterations", str(a_at + 2), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "is broken" not in resumed.stdout
    assert f"from checkpoint at iteration {a_checkpoint.iteration}" in resumed.stdout
    assert f"work folder {a_folder}" in resumed.stdout
    assert _tree(b_folder) == b_before  # b.db's checkpoints intact, none deleted

    a_after = _tree(a_folder)
    resumed = _kernevo(
        "evolve", "--resume", "1", "--iterations", str(b_at + 2),
        "--database-url", "sqlite:///./b.db", cwd=tmp_path,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "is broken" not in resumed.stdout
    assert f"from checkpoint at iteration {b_checkpoint.iteration}" in resumed.stdout
    assert _tree(a_folder) == a_after
    assert (job_row(a_url).state, job_row(b_url).state) == ("complete", "complete")


# --- the same kind, in process, on SQLite and PostgreSQL ----------------------------------------


def test_equal_job_ids_of_two_databases_resume_from_their_own_checkpoints(
    fresh_database_url: str, other_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    a = start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    b = start_job(
        small_job(path="trsm_small", dtype="float64"),
        settings=offline_settings(root),
        database_url=other_database_url,
        write=print,
    )
    assert a.job_id == b.job_id == 1 and a.state == b.state == "complete"
    assert a.work_folder is not None and b.work_folder is not None
    assert a.work_folder != b.work_folder
    assert a.work_folder == _folder(fresh_database_url, root)

    for url, mine, theirs in [
        (fresh_database_url, a.work_folder, b.work_folder),
        (other_database_url, b.work_folder, a.work_folder),
    ]:
        set_job_state(url, "failed")
        before = _tree(theirs)
        lines: list[str] = []
        again = resume_job(
            1,
            overrides={"iterations": 4},
            settings=offline_settings(root),
            database_url=url,
            write=lines.append,
        )
        assert (again.state, again.iteration, again.work_folder) == ("complete", 4, mine)
        assert "2 iterations from checkpoint at iteration 2" in lines[0]
        assert not any("broken" in line for line in lines)
        assert _tree(theirs) == before


def test_a_folder_marked_for_another_job_is_refused_and_left(
    fresh_database_url: str, other_database_url: str, tmp_path: Path
) -> None:
    """Were two jobs' keys ever to name one folder (a copied key, a clash of the 12 digits), the
    marker tells them apart: the second is refused in one line, the folder left as it is."""
    root = tmp_path / "runs"
    a = start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    assert a.work_folder is not None
    a_key = job_row(fresh_database_url).work_key
    b = start_job(
        small_job(), settings=offline_settings(root), database_url=other_database_url, write=print
    )
    b_key = job_row(other_database_url).work_key
    # Job 1 of the other database now names job 1 of the first's folder, its marker aside.
    set_job_state(other_database_url, "failed", work_key=a_key[:12] + b_key[12:])
    before = _tree(a.work_folder)
    with pytest.raises(WorkFolderError) as refused:
        resume_job(
            1,
            overrides={"iterations": 4},
            settings=offline_settings(root),
            database_url=other_database_url,
            write=print,
        )
    database = json.loads((a.work_folder / "job.json").read_text())["database"]
    assert str(refused.value) == (
        f"job 1: work folder {a.work_folder} belongs to job 1 of database {database} (work key "
        f"{a_key[:12]}), not to this job (work key {a_key[:12]}): left as it is; move it away "
        "to run job 1"
    )
    assert _tree(a.work_folder) == before
    row = job_row(other_database_url)
    assert (row.state, row.last_failure_kind, row.failure_reason) == (
        "failed",
        "error",
        str(refused.value).removeprefix("job 1: "),  # stored bare: its views say "job 1"
    )
    assert b.work_folder is not None and b.work_folder.is_dir()  # its own, untouched too


def test_the_cli_refuses_another_jobs_folder_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    a_url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    b_url = f"sqlite:///{tmp_path / 'b.db'}"
    a = start_job(small_job(), settings=offline_settings(root), database_url=a_url, write=print)
    start_job(small_job(), settings=offline_settings(root), database_url=b_url, write=print)
    assert a.work_folder is not None
    a_key, b_key = job_row(a_url).work_key, job_row(b_url).work_key
    set_job_state(b_url, "failed", work_key=a_key[:12] + b_key[12:])  # one folder name, two jobs
    before = _tree(a.work_folder)
    done = _kernevo(
        "evolve", "--resume", "1", "--iterations", "4", "--database-url", "sqlite:///./b.db",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    key = a.work_folder.name.removeprefix("job-1-")
    assert done.stderr == (
        f"kernevo: job 1: work folder {a.work_folder} belongs to job 1 of database "
        f"sqlite:///{tmp_path.resolve() / 'kernevo.db'} (work key {key}), not to this job (work "
        f"key {key}): left as it is; move it away to run job 1\n"
    )
    assert _tree(a.work_folder) == before


def test_an_unmarked_folder_holding_files_is_refused(tmp_path: Path) -> None:
    owner = FolderOwner(1, "ab" * 16, "trsm_small", "float32", "m64n64", "sqlite:///x.db")
    folder = work_folder(tmp_path, 1, owner.work_key)
    folder.mkdir()
    (folder / "initial_program.cu").write_text("someone else's\n")
    with (
        pytest.raises(WorkFolderError) as refused,
        holding_work_folder(tmp_path, owner, write=print),
    ):
        pytest.fail("an unmarked folder with files was taken")
    assert str(refused.value) == (
        f"job 1: work folder {folder} holds files (initial_program.cu) but no job.json, so it is "
        "not provably this job's: left as it is; move it away to run job 1"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["initial_program.cu"]  # no lock written


def _to_legacy(folder: Path) -> Path:
    """Lay ``folder`` out as kernevo did before work keys: ``job-<id>``, no marker."""
    legacy = folder.parent / folder.name.rsplit("-", 1)[0]
    (folder / "job.json").unlink()
    folder.rename(legacy)
    return legacy


def test_a_job_from_before_work_keys_takes_its_old_folder_over(
    fresh_database_url: str, tmp_path: Path
) -> None:
    """A job whose folder is still ``job-<id>`` (no marker): its resume finds every checkpoint
    program in its lineage, marks the folder and renames it; the resume starts from its
    checkpoint, as before the change."""
    root = tmp_path / "runs"
    first = start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    assert first.work_folder is not None
    legacy = _to_legacy(first.work_folder)
    assert legacy == legacy_folder(root, 1)
    files = _tree(legacy)
    set_job_state(fresh_database_url, "running")  # killed: nobody marked it

    lines: list[str] = []
    again = resume_job(
        1,
        overrides={"iterations": 4},
        settings=offline_settings(root),
        database_url=fresh_database_url,
        write=lines.append,
    )
    assert lines[0] == (
        f"job 1 | work folder {legacy} (named before work folders carried their job's key) "
        f"holds this job's checkpoints: moved to {first.work_folder}"
    )
    assert "2 iterations from checkpoint at iteration 2" in lines[1]
    assert (again.state, again.work_folder) == ("complete", first.work_folder)
    assert not legacy.exists()
    marker = json.loads((first.work_folder / "job.json").read_text())
    assert marker["work_key"] == job_row(fresh_database_url).work_key
    # The checkpoints of iteration 1 and 2 it resumed from moved with the folder, unchanged.
    kept = {k: v for k, v in files.items() if k.startswith("openevolve/checkpoints/checkpoint_2/")}
    assert kept and {k: _tree(first.work_folder)[k] for k in kept} == kept


def test_an_old_folder_left_by_a_deleted_database_is_never_taken(tmp_path: Path) -> None:
    """``runs/job-1`` of a database since deleted (kernevo before work keys): a new database's
    job 1 runs in a folder of its own, and its resume leaves the old folder as it is."""
    root = tmp_path / "runs"
    old_url = f"sqlite:///{tmp_path / 'old.db'}"
    old = start_job(small_job(), settings=offline_settings(root), database_url=old_url, write=print)
    assert old.work_folder is not None
    legacy = _to_legacy(old.work_folder)
    (tmp_path / "old.db").unlink()
    files = _tree(legacy)

    url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    new = start_job(small_job(), settings=offline_settings(root), database_url=url, write=print)
    assert new.job_id == 1 and new.work_folder is not None and new.work_folder != legacy
    set_job_state(url, "failed")
    lines: list[str] = []
    resume_job(
        1, overrides={"iterations": 3}, settings=offline_settings(root), database_url=url,
        write=lines.append,
    )  # fmt: skip
    # Its own folder exists: the old one is not even looked at.
    assert not any("named before work folders" in line for line in lines)
    assert _tree(legacy) == files

    # Without a folder of its own yet (another host's, say), the old one is looked at, not taken.
    shutil.rmtree(new.work_folder)
    set_job_state(url, "failed")
    lines = []
    again = resume_job(
        1, overrides={"iterations": 4}, settings=offline_settings(root), database_url=url,
        write=lines.append,
    )  # fmt: skip
    assert re.fullmatch(
        rf"job 1 \| work folder {re.escape(str(legacy))} \(named before work folders carried "
        r"their job's key\) is not taken: it holds checkpoints of another job \(program \S+ is "
        rf"not this job's\); left as it is; this job runs in {re.escape(str(new.work_folder))}",
        lines[0],
    )
    assert "from the seed (no complete checkpoint yet)" in lines[1]
    assert again.state == "complete" and again.work_folder == new.work_folder
    assert _tree(legacy) == files


def test_which_old_folders_are_provably_the_jobs(tmp_path: Path) -> None:
    owner = FolderOwner(1, "cd" * 16, "trsm_small", "float32", "m64n64", "sqlite:///x.db")
    folder = tmp_path / "job-1"
    folder.mkdir()
    assert legacy_ownership(folder, owner, {"a"}, set()) == (
        "it holds no checkpoint to resume from"
    )
    programs = folder / "openevolve" / "checkpoints" / "checkpoint_3" / "programs"
    programs.mkdir(parents=True)
    (programs / "a.json").write_text("{}")
    (programs / "b.json").write_text("{}")
    assert legacy_ownership(folder, owner, {"a"}, set()) == (
        "it holds checkpoints of another job (program b is not this job's)"
    )
    assert legacy_ownership(folder, owner, {"a", "b"}, set()) is None
    (folder / "initial_program.cu").write_text("seed\n")
    assert legacy_ownership(folder, owner, {"a", "b"}, set()) == (
        "its initial_program.cu is no program of this job"
    )
    seed = hashlib.sha256(b"seed\n").hexdigest()
    assert legacy_ownership(folder, owner, {"a", "b"}, {seed}) is None
    (folder / "job.json").write_text(json.dumps({"format": MARKER_FORMAT, "job_id": 1}))
    assert legacy_ownership(folder, owner, {"a", "b"}, {seed}) == "it is marked for another job"


# --- a seed that fails its own screen -----------------------------------------------------------


def test_a_seed_that_fails_the_screen_fails_the_job_in_one_line(tmp_path: Path) -> None:
    """The first reproduction's other half: a job whose seed fails the screen ran every iteration
    into ``screen_error`` and ended ``complete``, exit 0. Now the resume is refused before
    OpenEvolve starts: one line, exit 1, the job failed with that line."""
    root = tmp_path / "runs"
    url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    first = start_job(small_job(), settings=offline_settings(root), database_url=url, write=print)
    assert first.work_folder is not None
    initial = first.work_folder / "initial_program.cu"
    initial.write_text(get_path("solve_tri").seed_source())  # another path's seed, as it was
    set_job_state(url, "failed")
    done = _kernevo("evolve", "--resume", "1", "--iterations", "4", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("kernevo: job 1: its seed ")
    assert "fails the screen (edit_outside_evolve_block. only the code between" in done.stderr
    assert done.stderr.rstrip().endswith(
        "(the path's seed changed since job 1 began, or the file is another job's): start a new job"
    )
    row = job_row(url)
    assert (row.state, row.last_failure_kind) == ("failed", "error")
    assert (row.failure_reason or "").startswith(f"its seed {initial} fails the screen")
    assert "iter " not in done.stdout  # no iteration ran


def test_a_path_seed_that_breaks_the_screen_fails_a_new_job(
    fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import evolver.runner as runner

    broken = tmp_path / "kernel.cu"
    broken.write_text(get_path("trsm_small").seed_source().replace("\n", "\n#include <x.h>\n", 1))
    real = runner.get_path

    def with_broken_seed(path: str, bucket: str | None = None):  # type: ignore[no-untyped-def]
        return dataclasses.replace(real(path, bucket), seed_file=broken)

    monkeypatch.setattr(runner, "get_path", with_broken_seed)
    with pytest.raises(SeedScreenError) as refused:
        start_job(
            small_job(),
            settings=offline_settings(tmp_path / "runs"),
            database_url=fresh_database_url,
            write=print,
        )
    line = str(refused.value)
    assert line.startswith("job 1: its seed ") and "fails the screen (include" in line
    assert line.endswith(f"the path's seed {broken} breaks the screen itself: fix it")
    row = job_row(fresh_database_url)
    assert (row.state, row.failure_reason) == ("failed", line.removeprefix("job 1: "))
    engine = create_engine(fresh_database_url)
    try:
        with Session(engine) as s:
            assert s.scalars(select(Program)).first() is None  # nothing ran
    finally:
        engine.dispose()


# --- the migration ------------------------------------------------------------------------------


def test_the_migration_gives_every_existing_job_a_key_of_its_own(empty_database_url: str) -> None:
    from db.migrate import upgrade

    upgrade(empty_database_url, "5f0c2a9d7e41")
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            for _ in range(3):
                connection.execute(
                    text(
                        "INSERT INTO job (path, dtype, gpu_key, shape_bucket, config, backend, "
                        "state, iteration, attempts) VALUES ('trsm_small', 'float32', 'none', "
                        "'m64n64', '{}', 'offline', 'failed', 0, 0)"
                    )
                )
        upgrade(empty_database_url)
        with engine.connect() as connection:
            keys = connection.execute(text("SELECT work_key FROM job ORDER BY id")).scalars().all()
    finally:
        engine.dispose()
    assert len(keys) == len(set(keys)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", key) for key in keys)
