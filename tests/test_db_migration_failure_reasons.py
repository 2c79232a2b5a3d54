"""Migration ``7b2d4f6a8c13`` makes the failure reasons older versions stored bare, as
``evolver.runner.stored_reason`` stores them now: ``kernevo jobs`` showed a row of theirs as
``job 3 failed: job 3 failed: …``. Upgrade rewrites them (only a leading mention of the row's
own job, in the forms those versions wrote), a second upgrade changes nothing, the downgrade
leaves the bare reasons, and a re-upgrade changes nothing either: on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, create_engine, text

from db.migrate import current_revision, downgrade, head_revision, upgrade
from kernevo.cli import main

BEFORE = "3c8e5b1d9a27"  # the revision before the data migration
RESUME = "resume with 'kernevo evolve --resume {id}'"

# (job id, reason as an older version stored it, the bare reason after the upgrade)
ROWS: list[tuple[int, str | None, str | None]] = [
    # the trial's row: the runner's summary line, itself naming the job
    (3, "job 3 failed: job 3 failed: Evolution failed: 0/1 iterations produced a child",
     "Evolution failed: 0/1 iterations produced a child"),
    (4, "job 4 failed: Evolution failed: no diff in the answer",
     "Evolution failed: no diff in the answer"),
    (5, "job 5: its seed trsm_small.cu fails the screen",
     "its seed trsm_small.cu fails the screen"),
    (6, f"job 6 (trsm_small float64) failed: RuntimeError: boom; {RESUME.format(id=6)}",
     f"RuntimeError: boom; {RESUME.format(id=6)}"),
    (7, f"job 7 stopped by SIGTERM at iteration 2 of 5; {RESUME.format(id=7)}",
     f"stopped by SIGTERM at iteration 2 of 5; {RESUME.format(id=7)}"),
    (8, f"job 8 stopped by SIGINT in its setup; {RESUME.format(id=8)}",
     f"stopped by SIGINT in its setup; {RESUME.format(id=8)}"),
    (9, "job 9: job 9 failed: LLMEndpointError", "LLMEndpointError"),
    # kept: another job's id (a prefix of its own, too), nothing left, not a leading mention,
    # a sentence about the job, bare already, no reason
    (10, "job 1 failed: Evolution failed", "job 1 failed: Evolution failed"),
    (11, "job 110: x", "job 110: x"),
    (12, "job 12 failed: ", "job 12 failed: "),
    (13, "Evolution failed: job 13 failed: y", "Evolution failed: job 13 failed: y"),
    (14, "job 14 is running in another process", "job 14 is running in another process"),
    (15, "its workers died 3 times (max attempts 3): worker_lost",
     "its workers died 3 times (max attempts 3): worker_lost"),
    (16, None, None),
]  # fmt: skip


def _insert(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for job_id, reason, _ in ROWS:
                connection.execute(
                    text(
                        "INSERT INTO job (id, path, dtype, gpu_key, shape_bucket, config, "
                        "backend, state, iteration, attempts, failure_reason, work_key) VALUES "
                        "(:id, 'trsm_small', 'float64', 'none', 'm64n64', '{}', 'offline', "
                        ":state, 0, 0, :reason, :key)"
                    ),
                    {
                        "id": job_id,
                        "state": "failed" if reason is not None else "complete",
                        "reason": reason,
                        "key": f"{job_id:032x}",
                    },
                )
    finally:
        engine.dispose()


def _reasons(url: str) -> dict[int, str | None]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT id, failure_reason FROM job WHERE id IN :ids").bindparams(
                    bindparam("ids", expanding=True)
                ),
                {"ids": [job_id for job_id, _, _ in ROWS]},
            ).all()
    finally:
        engine.dispose()
    return dict(rows)  # type: ignore[arg-type]


def test_the_upgrade_makes_old_reasons_bare_and_every_later_step_keeps_them(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    upgrade(url, BEFORE)
    _insert(url)
    assert _reasons(url) == {job_id: old for job_id, old, _ in ROWS}

    bare = {job_id: new for job_id, _, new in ROWS}
    upgrade(url)
    assert current_revision(url) == head_revision()
    assert _reasons(url) == bare
    upgrade(url)  # at head already: nothing runs
    assert _reasons(url) == bare

    downgrade(url, BEFORE)
    assert current_revision(url) == BEFORE
    assert _reasons(url) == bare  # nothing to undo: the older code shows them right too

    upgrade(url)  # the data migration again, on bare reasons: idempotent
    assert current_revision(url) == head_revision()
    assert _reasons(url) == bare


def test_kernevo_jobs_says_a_migrated_rows_job_once(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = empty_database_url
    upgrade(url, BEFORE)
    _insert(url)
    upgrade(url)
    assert main(["jobs", "--database-url", url, "--state", "failed"]) == 0
    out = capsys.readouterr().out
    assert "job 3 failed: Evolution failed: 0/1 iterations produced a child\n" in out
    assert f"job 7 failed: stopped by SIGTERM at iteration 2 of 5; {RESUME.format(id=7)}" in out
    assert "job 3 failed: job 3" not in out and "job 9 failed: job 9" not in out
