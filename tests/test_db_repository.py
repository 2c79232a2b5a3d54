"""db.repository on SQLite and PostgreSQL, each test in a transaction rolled back afterwards."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db import queue
from db import repository as repo
from db.models import Champion, ChampionPromotion, Evaluation, ImmutableRowError, Job, Program
from db.states import JOB_FAILURE_KINDS

H200 = "nvidia-h200"
GPU = {"gpu_key": H200, "gpu_name": "NVIDIA H200", "arch": "sm_90"}
VERSIONS = {"driver_version": "580.65", "nvrtc_version": "13.0"}
LAUNCH = {"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"}
OPTIONS = ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"]
KEY = {"path": "trsm_small", "dtype": "float64", "gpu_key": H200, "shape_bucket": "m64n64"}
SOURCE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32 64\n// EVOLVE-BLOCK-END\n"


def _job(s: Session, **overrides: object) -> Job:
    fields: dict[str, object] = {
        "path": "trsm_small",
        "dtype": "float64",
        "gpu": H200,
        "shape_bucket": "m64n64",
        "config": {"iterations": 100, "islands": 2},
        "backend": "offline",
        "model": None,
    }
    fields.update(overrides)
    return repo.create_job(s, **fields)  # type: ignore[arg-type]


def _program(
    s: Session, job: Job, uid: str, parent_uid: str | None = None, source: str | None = None
) -> tuple[Program, bool]:
    return repo.record_program(
        s,
        job_id=job.id,
        uid=uid,
        source=source if source is not None else f"{SOURCE}// {uid}\n",
        parent_uid=parent_uid,
        island=1,
        generation=0 if parent_uid is None else 1,
        iteration=3,
        diff=None if parent_uid is None else "-NB 32\n+NB 64",
        backend="offline",
        model=None,
    )


def _evaluation(
    s: Session, program: Program, report: str, *, state: str, score: float = 1.5
) -> Evaluation:
    return repo.record_evaluation(
        s,
        program_id=program.id,
        report_json=report,
        score=score,
        state=state,
        error_kind="wrong" if state == "failed" else None,
        **GPU,
        **VERSIONS,
    )


def _promote(s: Session, evaluation: Evaluation, cubin: bytes, **overrides: object) -> Champion:
    fields: dict[str, object] = {
        **KEY,
        "cubin": cubin,
        "launch": LAUNCH,
        "envelope": {"m_max": 64, "n_max": 64},
        "compile_options": OPTIONS,
    }
    fields.update(overrides)
    return repo.promote_champion(s, evaluation_id=evaluation.id, **fields)  # type: ignore[arg-type]


# --- jobs -------------------------------------------------------------------------------------


def test_create_job_starts_waiting_with_database_timestamp(db_session: Session) -> None:
    job = _job(db_session)
    assert job.id is not None
    assert (job.path, job.dtype, job.gpu_key, job.shape_bucket) == (
        "trsm_small",
        "float64",
        H200,
        "m64n64",
    )
    assert job.config == {"iterations": 100, "islands": 2}
    assert job.state == "waiting"
    assert job.iteration == 0
    assert job.heartbeat_at is None
    assert job.created_at.tzinfo == UTC
    assert abs(job.created_at - datetime.now(UTC)) < timedelta(minutes=5)
    assert repo.get_job(db_session, job.id) is job


def test_update_job_progress_sets_fields_and_heartbeat(db_session: Session) -> None:
    job = _job(db_session)
    updated = repo.update_job_progress(
        db_session,
        job.id,
        state="running",
        iteration=7,
        best_score=1.8,
        best_speedup=2.25,
        last_failure_kind="compile_error",
    )
    assert updated.state == "running"
    assert (updated.iteration, updated.best_score, updated.best_speedup) == (7, 1.8, 2.25)
    assert updated.last_failure_kind == "compile_error"
    assert updated.heartbeat_at is not None and updated.heartbeat_at.tzinfo == UTC
    assert abs(updated.heartbeat_at - datetime.now(UTC)) < timedelta(minutes=5)
    # None leaves stored values alone.
    again = repo.update_job_progress(db_session, job.id, iteration=8)
    assert (again.state, again.iteration, again.best_score) == ("running", 8, 1.8)
    assert again.last_failure_kind == "compile_error"


def test_job_state_machine_refuses_leaving_final_states(db_session: Session) -> None:
    job = _job(db_session)
    repo.update_job_progress(db_session, job.id, state="running")
    repo.set_job_state(db_session, job.id, "cancelled")
    with pytest.raises(repo.InvalidTransitionError, match="is cancelled; cannot become running"):
        repo.update_job_progress(db_session, job.id, state="running", iteration=9)
    assert repo.get_job(db_session, job.id).iteration == 0
    # Progress without a state change is still recorded; cancelling twice is a no-op.
    assert repo.update_job_progress(db_session, job.id, iteration=9).state == "cancelled"
    assert repo.set_job_state(db_session, job.id, "cancelled").state == "cancelled"

    done = _job(db_session)
    repo.update_job_progress(db_session, done.id, state="running")
    repo.update_job_progress(db_session, done.id, state="complete")
    with pytest.raises(repo.InvalidTransitionError):
        repo.set_job_state(db_session, done.id, "cancelled")
    # A crashed (failed) job may resume.
    crashed = _job(db_session)
    repo.update_job_progress(db_session, crashed.id, state="failed")
    assert repo.update_job_progress(db_session, crashed.id, state="running").state == "running"


@pytest.mark.parametrize("kind", sorted(JOB_FAILURE_KINDS))
@pytest.mark.parametrize("again", ["running", "waiting"])
def test_the_jobs_own_failure_kind_clears_when_it_runs_or_waits_again(
    db_session: Session, kind: str, again: str
) -> None:
    # A job stopped (interrupted), crashed or lost its worker, then resumed or requeued and
    # completed: its row must not keep saying how it once failed.
    job = _job(db_session)
    repo.update_job_progress(db_session, job.id, state="running")
    repo.update_job_progress(
        db_session, job.id, state="failed", last_failure_kind=kind, failure_reason="stopped"
    )
    assert repo.get_job(db_session, job.id).last_failure_kind == kind
    moved = repo.update_job_progress(db_session, job.id, state=again)
    assert (moved.last_failure_kind, moved.failure_reason) == (None, None)
    repo.update_job_progress(db_session, job.id, state="running")
    done = repo.update_job_progress(db_session, job.id, state="complete")
    assert (done.state, done.last_failure_kind) == ("complete", None)


def test_a_candidates_failure_kind_outlives_state_changes(db_session: Session) -> None:
    job = _job(db_session)
    repo.update_job_progress(db_session, job.id, state="running", last_failure_kind="wrong")
    repo.update_job_progress(db_session, job.id, state="failed")
    assert repo.update_job_progress(db_session, job.id, state="running").last_failure_kind == (
        "wrong"
    )
    # A cancel leaves a failed job's own kind: the failure is still the last thing it did.
    stopped = _job(db_session)
    repo.update_job_progress(db_session, stopped.id, state="failed", last_failure_kind="error")
    cancelled = repo.set_job_state(db_session, stopped.id, "cancelled")
    assert cancelled.last_failure_kind == "error"


def test_the_queues_lost_worker_kind_is_a_jobs_own() -> None:
    assert queue.WORKER_LOST in JOB_FAILURE_KINDS


def test_job_errors(db_session: Session) -> None:
    with pytest.raises(repo.NotFoundError, match="job 999999 not found"):
        repo.get_job(db_session, 999_999)
    with pytest.raises(repo.NotFoundError):
        repo.update_job_progress(db_session, 999_999, iteration=1)
    job = _job(db_session)
    with pytest.raises(repo.InvalidValueError, match="unknown job state 'paused'"):
        repo.set_job_state(db_session, job.id, "paused")


def test_list_jobs_newest_first_filtered_with_program_counts(db_session: Session) -> None:
    first, second, third = _job(db_session), _job(db_session), _job(db_session)
    repo.update_job_progress(db_session, second.id, state="running")
    _program(db_session, second, "a")
    _program(db_session, second, "b", parent_uid="a")
    listed = [j.id for j in repo.list_jobs(db_session) if j.id in {first.id, second.id, third.id}]
    assert listed == [third.id, second.id, first.id]
    running = repo.list_jobs(db_session, state="running")
    assert second.id in [j.id for j in running]
    assert all(j.state == "running" for j in running)
    assert len(repo.list_jobs(db_session, limit=2)) == 2
    counts = repo.count_programs(db_session, [first.id, second.id])
    assert counts == {first.id: 0, second.id: 2}


# --- programs ---------------------------------------------------------------------------------


def test_record_program_stores_source_hash_and_parent(db_session: Session) -> None:
    job = _job(db_session)
    seed, created = _program(db_session, job, "seed-uid")
    assert created is True
    assert seed.parent_id is None
    assert seed.source_sha256 == hashlib.sha256(seed.source.encode()).hexdigest()
    assert seed.created_at.tzinfo == UTC
    child, created = _program(db_session, job, "child-uid", parent_uid="seed-uid")
    assert created is True
    assert child.parent_id == seed.id
    assert (child.island, child.generation, child.iteration) == (1, 1, 3)
    assert child.diff == "-NB 32\n+NB 64"


def test_record_program_is_idempotent_on_uid(db_session: Session) -> None:
    job = _job(db_session)
    first, created_first = _program(db_session, job, "same-uid")
    again, created_again = _program(db_session, job, "same-uid")
    assert (created_first, created_again) == (True, False)
    assert again.id == first.id
    same_uid = select(func.count()).select_from(Program).where(Program.uid == "same-uid")
    assert db_session.scalar(same_uid) == 1
    with pytest.raises(repo.ProgramConflictError, match="already recorded"):
        _program(db_session, job, "same-uid", source="// a different kernel\n")


def test_record_program_unknown_parent_is_an_error(db_session: Session) -> None:
    job = _job(db_session)
    with pytest.raises(repo.UnknownParentError, match="parent uid 'ghost' is not recorded"):
        _program(db_session, job, "orphan", parent_uid="ghost")
    assert db_session.scalar(select(Program).where(Program.uid == "orphan")) is None
    with pytest.raises(repo.NotFoundError, match="job 999999 not found"):
        repo.record_program(
            db_session,
            job_id=999_999,
            uid="x",
            source=SOURCE,
            parent_uid=None,
            island=0,
            generation=0,
            iteration=0,
            diff=None,
            backend=None,
            model=None,
        )


def test_programs_are_immutable(db_session: Session) -> None:
    program, _ = _program(db_session, _job(db_session), "frozen")
    program.source = "// changed\n"
    with pytest.raises(ImmutableRowError, match=f"Program {program.id} is immutable"):
        db_session.flush()


def test_lineage_runs_from_program_back_to_seed(db_session: Session) -> None:
    job = _job(db_session)
    seed, _ = _program(db_session, job, "g0")
    g1, _ = _program(db_session, job, "g1", parent_uid="g0")
    sibling, _ = _program(db_session, job, "g1-sibling", parent_uid="g0")
    g2, _ = _program(db_session, job, "g2", parent_uid="g1")
    g3, _ = _program(db_session, job, "g3", parent_uid="g2")
    assert [p.id for p in repo.lineage(db_session, g3.id)] == [g3.id, g2.id, g1.id, seed.id]
    assert [p.uid for p in repo.lineage(db_session, sibling.id)] == ["g1-sibling", "g0"]
    assert [p.id for p in repo.lineage(db_session, seed.id)] == [seed.id]
    with pytest.raises(repo.NotFoundError, match="program 999999 not found"):
        repo.lineage(db_session, 999_999)


# --- evaluations ------------------------------------------------------------------------------


def test_record_evaluation_keeps_report_and_gpu_identity(
    db_session: Session, report_json: Callable[..., str]
) -> None:
    program, _ = _program(db_session, _job(db_session), "p")
    report = report_json(1.75)
    ev = _evaluation(db_session, program, report, state="scored", score=1.75)
    assert ev.report == json.loads(report)
    assert ev.report["timings"][0]["speedup"] == 2.01
    assert (ev.gpu_key, ev.gpu_name, ev.arch) == (H200, "NVIDIA H200", "sm_90")
    assert (ev.driver_version, ev.nvrtc_version, ev.score, ev.state) == (
        "580.65",
        "13.0",
        1.75,
        "scored",
    )
    # A decoded mapping is accepted as well as the JSON string.
    from_dict = repo.record_evaluation(
        db_session,
        program_id=program.id,
        report_json={"status": "compile_error", "combined_score": 0.0},
        score=0.0,
        state="failed",
        error_kind="compile_error",
        **GPU,
        **VERSIONS,
    )
    assert from_dict.report == {"status": "compile_error", "combined_score": 0.0}
    assert [e.id for e in program.evaluations] == [ev.id, from_dict.id]


def test_record_evaluation_validates(db_session: Session, report_json: Callable[..., str]) -> None:
    program, _ = _program(db_session, _job(db_session), "p")
    common = {"program_id": program.id, "report_json": report_json(0.0), "score": 0.0, **GPU}
    with pytest.raises(repo.InvalidValueError, match="unknown evaluation state 'great'"):
        repo.record_evaluation(db_session, state="great", error_kind=None, **common, **VERSIONS)
    with pytest.raises(repo.InvalidValueError, match="needs an error_kind"):
        repo.record_evaluation(db_session, state="failed", error_kind=None, **common, **VERSIONS)
    with pytest.raises(repo.InvalidValueError, match="JSON object"):
        repo.record_evaluation(
            db_session,
            **{**common, "report_json": "[1, 2]"},
            state="scored",
            error_kind=None,
            **VERSIONS,
        )
    with pytest.raises(repo.NotFoundError, match="program 999999 not found"):
        repo.record_evaluation(
            db_session,
            **{**common, "program_id": 999_999},
            state="scored",
            error_kind=None,
            **VERSIONS,
        )


def test_non_finite_numbers_in_a_report_are_stored_as_strings(db_session: Session) -> None:
    """A wrong kernel's residual is NaN: the row must still be written on both backends."""
    program, _ = _program(db_session, _job(db_session), "nan")
    report = '{"status": "wrong", "failure": {"check": "residual", "value": NaN, "bound": 30.0},'
    report += ' "timings": [{"speedup": Infinity}, {"speedup": -Infinity}]}'
    ev = repo.record_evaluation(
        db_session,
        program_id=program.id,
        report_json=report,
        score=0.0,
        state="failed",
        error_kind="wrong",
        **GPU,
        **VERSIONS,
    )
    db_session.expire(ev)
    assert ev.report["failure"] == {"check": "residual", "value": "NaN", "bound": 30.0}
    assert [t["speedup"] for t in ev.report["timings"]] == ["Infinity", "-Infinity"]
    with pytest.raises(repo.InvalidValueError, match="score must be a finite number"):
        repo.record_evaluation(
            db_session,
            program_id=program.id,
            report_json="{}",
            score=float("nan"),
            state="scored",
            error_kind=None,
            **GPU,
            **VERSIONS,
        )
    with pytest.raises(repo.InvalidValueError, match="best_speedup must be a finite number"):
        repo.update_job_progress(db_session, program.job_id, best_speedup=float("inf"))


def test_nul_characters_in_a_report_are_removed(db_session: Session) -> None:
    """NVRTC logs can hold a NUL, which PostgreSQL's jsonb refuses (``\\u0000``): every string
    of the report, keys and nested lists included, is stored without it, on both backends."""
    program, _ = _program(db_session, _job(db_session, config={"note\x00": "a\x00b"}), "nul")
    log = "kernel.cu(3): error: expected a ';'\x00\n1 error detected"
    report = {
        "status": "compile_error",
        "compile": {"log": log, "options": ["-arch=sm_90\x00"]},
        "failure": {"check": "compile", "detail\x00": log},
    }
    for report_json in (report, json.dumps(report)):
        ev = repo.record_evaluation(
            db_session,
            program_id=program.id,
            report_json=report_json,
            score=0.0,
            state="failed",
            error_kind="compile_error",
            **GPU,
            **VERSIONS,
        )
        db_session.flush()
        db_session.expire(ev)
        clean = log.replace("\x00", "")
        assert ev.report["compile"] == {"log": clean, "options": ["-arch=sm_90"]}
        assert ev.report["failure"] == {"check": "compile", "detail": clean}
    job = db_session.get(Job, program.job_id)
    assert job is not None
    db_session.expire(job)
    assert job.config == {"note": "ab"}


# --- champions --------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["scored", "failed"])
def test_promote_refuses_unverified_evaluations(
    db_session: Session, report_json: Callable[..., str], state: str
) -> None:
    program, _ = _program(db_session, _job(db_session), "candidate")
    cubin = b"cubin-bytes"
    ev = _evaluation(db_session, program, report_json(1.5, cubin=cubin), state=state)
    with pytest.raises(repo.NotVerifiedError, match=f"is {state}, not verified") as refused:
        _promote(db_session, ev, cubin)
    assert refused.value.check == "verified"
    assert db_session.scalar(select(func.count()).select_from(Champion)) == 0
    assert db_session.scalar(select(func.count()).select_from(ChampionPromotion)) == 0
    assert repo.best_champion(db_session, **KEY) is None


def test_promote_upserts_champion_and_keeps_history(
    db_session: Session, report_json: Callable[..., str]
) -> None:
    job = _job(db_session)
    first, _ = _program(db_session, job, "first")
    better, _ = _program(db_session, job, "better", parent_uid="first")
    cubin_a, cubin_b = b"\x7fELF-a" * 100, b"\x7fELF-b" * 120
    ev_a = _evaluation(db_session, first, report_json(1.5, cubin=cubin_a), state="verified")
    ev_b = _evaluation(
        db_session, better, report_json(2.5, cubin=cubin_b), state="verified", score=2.5
    )

    champion = _promote(db_session, ev_a, cubin_a)
    assert champion.cubin == cubin_a
    assert champion.cubin_sha256 == hashlib.sha256(cubin_a).hexdigest()
    assert (champion.program_id, champion.evaluation_id) == (first.id, ev_a.id)
    assert (champion.arch, champion.nvrtc_version) == ("sm_90", "13.0")
    assert champion.compile_options == OPTIONS
    assert champion.launch == LAUNCH
    assert champion.envelope == {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]}
    assert champion.metrics["score"] == 1.5
    assert champion.metrics["combined_score"] == 1.5
    assert champion.metrics["timings"][0]["baseline_us"] == 20.1
    assert champion.metrics["compile"]["registers"] == 40
    assert "log" not in champion.metrics["compile"]
    first_id = champion.id

    replaced = _promote(db_session, ev_b, cubin_b)
    assert replaced.id == first_id
    assert (replaced.program_id, replaced.evaluation_id) == (better.id, ev_b.id)
    assert replaced.cubin_sha256 == hashlib.sha256(cubin_b).hexdigest()
    assert replaced.metrics["score"] == 2.5
    assert db_session.scalar(select(func.count()).select_from(Champion)) == 1
    history = db_session.scalars(select(ChampionPromotion).order_by(ChampionPromotion.id)).all()
    assert [(h.program_id, h.evaluation_id, h.score) for h in history] == [
        (first.id, ev_a.id, 1.5),
        (better.id, ev_b.id, 2.5),
    ]
    assert [h.cubin_sha256 for h in history] == [
        hashlib.sha256(cubin_a).hexdigest(),
        hashlib.sha256(cubin_b).hexdigest(),
    ]
    assert all((h.path, h.dtype, h.gpu_key, h.shape_bucket) == tuple(KEY.values()) for h in history)


@pytest.mark.parametrize("score", [1.0, 0.999, 0.5, 0.0])
def test_promote_refuses_a_score_not_above_the_vendor_library(
    db_session: Session, report_json: Callable[..., str], score: float
) -> None:
    program, _ = _program(db_session, _job(db_session), "slow")
    cubin = b"slow cubin"
    ev = _evaluation(
        db_session, program, report_json(score, cubin=cubin), state="verified", score=score
    )
    with pytest.raises(repo.BelowMinimumScoreError, match="not above 1.0") as refused:
        _promote(db_session, ev, cubin)
    assert (refused.value.check, refused.value.score) == ("min_score", score)
    assert repo.best_champion(db_session, **KEY) is None
    assert db_session.scalar(select(func.count()).select_from(ChampionPromotion)) == 0


@pytest.mark.parametrize("challenger", [2.0, 1.999, 1.5, 1.01])
def test_promote_refuses_a_score_not_above_the_champion(
    db_session: Session, report_json: Callable[..., str], challenger: float
) -> None:
    job = _job(db_session)
    holder, _ = _program(db_session, job, "holder")
    other, _ = _program(db_session, job, "challenger")
    cubin_a, cubin_b = b"cubin-a", b"cubin-b"
    ev_a = _evaluation(
        db_session, holder, report_json(2.0, cubin=cubin_a), state="verified", score=2.0
    )
    ev_b = _evaluation(
        db_session,
        other,
        report_json(challenger, cubin=cubin_b),
        state="verified",
        score=challenger,
    )
    _promote(db_session, ev_a, cubin_a)
    with pytest.raises(
        repo.NotBetterThanChampionError, match="not above the champion's 2.000"
    ) as refused:
        _promote(db_session, ev_b, cubin_b)
    assert (refused.value.check, refused.value.score) == ("beats_champion", challenger)
    assert refused.value.champion_score == 2.0
    champion = repo.best_champion(db_session, **KEY)
    assert champion is not None and champion.evaluation_id == ev_a.id
    assert champion.cubin == cubin_a and champion.metrics["score"] == 2.0
    history = db_session.scalars(select(ChampionPromotion.evaluation_id)).all()
    assert history == [ev_a.id]


def test_a_champion_loaded_before_the_promotion_is_compared_as_committed(
    db_session: Session, report_json: Callable[..., str]
) -> None:
    """A session that read the champion earlier (as promote_best does) still compares against
    the row as it is when locked, not its stale copy."""
    job = _job(db_session)
    first, _ = _program(db_session, job, "first")
    better, _ = _program(db_session, job, "better")
    ev_first = _evaluation(
        db_session, first, report_json(1.5, cubin=b"c1"), state="verified", score=1.5
    )
    ev_better = _evaluation(
        db_session, better, report_json(3.0, cubin=b"c3"), state="verified", score=3.0
    )
    _promote(db_session, ev_first, b"c1")
    stale = repo.best_champion(db_session, **KEY)
    assert stale is not None
    # Another writer replaces the champion behind this session's back (a raw UPDATE: the
    # session's identity map still holds the 1.5 copy).
    db_session.execute(
        Champion.__table__.update()
        .where(Champion.id == stale.id)
        .values(evaluation_id=ev_better.id, program_id=better.id)
    )
    assert stale.evaluation_id == ev_first.id
    with pytest.raises(repo.NotBetterThanChampionError, match="champion's 3.000"):
        _promote(
            db_session,
            _evaluation(
                db_session, first, report_json(2.0, cubin=b"c1"), state="verified", score=2.0
            ),
            b"c1",
        )


def test_best_champion_is_per_key(db_session: Session, report_json: Callable[..., str]) -> None:
    program, _ = _program(db_session, _job(db_session), "champ")
    cubin = b"cubin"
    ev = _evaluation(db_session, program, report_json(2.0, cubin=cubin), state="verified")
    _promote(db_session, ev, cubin)
    found = repo.best_champion(db_session, **KEY)
    assert found is not None and found.program_id == program.id
    assert found.program.source == program.source
    for other in ({"dtype": "float32"}, {"gpu_key": "nvidia-h100"}, {"shape_bucket": "m128"}):
        assert repo.best_champion(db_session, **{**KEY, **other}) is None


def test_promote_refuses_mismatched_key_or_cubin(
    db_session: Session, report_json: Callable[..., str]
) -> None:
    program, _ = _program(db_session, _job(db_session), "champ")
    cubin = b"verified cubin"
    ev = _evaluation(db_session, program, report_json(2.0, cubin=cubin), state="verified")
    with pytest.raises(repo.ChampionMismatchError, match="ran on nvidia-h200, not nvidia-h100"):
        _promote(db_session, ev, cubin, gpu_key="nvidia-h100")
    with pytest.raises(repo.ChampionMismatchError, match="trsm_small/float64/m64n64, not"):
        _promote(db_session, ev, cubin, dtype="float32")
    # Another bucket's champion would dodge that bucket's "beats the champion" rule.
    with pytest.raises(repo.ChampionMismatchError, match="not trsm_small/float64/m128"):
        _promote(db_session, ev, cubin, shape_bucket="m128")
    with pytest.raises(repo.ChampionMismatchError, match="differs from the verified one"):
        _promote(db_session, ev, b"some other cubin")
    with pytest.raises(repo.InvalidValueError, match="config_kernel"):
        _promote(db_session, ev, cubin, launch={"kernel": "trsm_small_kernel"})
    with pytest.raises(repo.InvalidValueError, match="m_max"):
        _promote(db_session, ev, cubin, envelope={"n_max": 64})
    with pytest.raises(repo.NotFoundError, match="evaluation 999999 not found"):
        repo.promote_champion(
            db_session,
            evaluation_id=999_999,
            **KEY,
            cubin=cubin,
            launch=LAUNCH,
            envelope={"m_max": 64, "n_max": 64},
            compile_options=OPTIONS,
        )
    assert repo.best_champion(db_session, **KEY) is None
