"""Writers that race or crash, committing for real on a fresh database per test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, func, select

from db import repository as repo
from db.models import Champion, ChampionPromotion, Job, Program
from db.session import session_scope

H200 = "nvidia-h200"
KEY = {"path": "trsm_small", "dtype": "float64", "gpu_key": H200, "shape_bucket": "m64n64"}
SOURCE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32 64\n// EVOLVE-BLOCK-END\n"
WRITERS = 8


def _new_job(engine: Engine, shape_bucket: str = "m64n64") -> int:
    with session_scope(engine) as s:
        return repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu=H200,
            shape_bucket=shape_bucket,
            config={},
            backend="offline",
            model=None,
        ).id


def _race(worker: Callable[[], object], n: int = WRITERS) -> list[object]:
    """Run ``worker`` in ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            result = worker()
            with lock:
                results.append(result)
        except BaseException as exc:  # collected and re-raised in the test thread
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def test_concurrent_record_program_creates_one_row(engine: Engine) -> None:
    job_id = _new_job(engine)

    def record() -> tuple[int, bool]:
        with session_scope(engine) as s:
            program, created = repo.record_program(
                s,
                job_id=job_id,
                uid="raced-uid",
                source=SOURCE,
                parent_uid=None,
                island=0,
                generation=0,
                iteration=0,
                diff=None,
                backend="offline",
                model=None,
            )
            return program.id, created

    results = _race(record)
    assert len(results) == WRITERS
    assert sorted(created for _, created in results) == [False] * (WRITERS - 1) + [True]
    assert len({program_id for program_id, _ in results}) == 1
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Program)) == 1


def _verified(engine: Engine, job_id: int, uid: str, score: float, report: str) -> int:
    """A program ``uid`` with a verified evaluation scoring ``score`` (``report``: its JSON);
    returns the evaluation id."""
    with session_scope(engine) as s:
        program, _ = repo.record_program(
            s,
            job_id=job_id,
            uid=uid,
            source=f"{SOURCE}// {uid}\n",
            parent_uid=None,
            island=0,
            generation=0,
            iteration=0,
            diff=None,
            backend="offline",
            model=None,
        )
        return repo.record_evaluation(
            s,
            program_id=program.id,
            report_json=report,
            gpu_key=H200,
            gpu_name="NVIDIA H200",
            arch="sm_90",
            driver_version="580.65",
            nvrtc_version="13.0",
            score=score,
            state="verified",
            error_kind=None,
        ).id


def _promote(engine: Engine, evaluation_id: int, cubin: bytes, shape_bucket: str) -> str:
    """Promote in a session of its own; "promoted", or the check that refused it."""
    try:
        with session_scope(engine) as s:
            repo.promote_champion(
                s,
                evaluation_id=evaluation_id,
                **{**KEY, "shape_bucket": shape_bucket},
                cubin=cubin,
                launch={"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
                envelope={"m_max": 64, "n_max": 64},
                compile_options=["-arch=sm_90"],
            )
    except repo.PromotionRefusedError as refusal:
        return refusal.check
    return "promoted"


def test_concurrent_promotions_of_one_evaluation_promote_once(
    engine: Engine, report_json: Callable[..., str]
) -> None:
    job_id = _new_job(engine)
    cubin = b"\x7fELF raced"
    evaluation_id = _verified(engine, job_id, "p", 2.0, report_json(2.0, cubin=cubin))

    outcomes = _race(lambda: _promote(engine, evaluation_id, cubin, "m64n64"))
    # The first promotion wins; the others find a champion that already scores 2.0.
    assert sorted(outcomes) == ["beats_champion"] * (WRITERS - 1) + ["promoted"]
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Champion)) == 1
        assert s.scalar(select(func.count()).select_from(ChampionPromotion)) == 1


def _race_promoters(
    engine: Engine, racers: list[tuple[float, int, bytes]], shape_bucket: str
) -> dict[float, str]:
    """Promote each (score, evaluation id, cubin) in a thread of its own, released together by a
    barrier; each thread's outcome by score. Re-raises a thread's failure."""
    barrier = threading.Barrier(len(racers))
    outcomes: dict[float, str] = {}
    errors: list[BaseException] = []

    def race(score: float, evaluation_id: int, cubin: bytes) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[score] = _promote(engine, evaluation_id, cubin, shape_bucket)
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=race, args=racer) for racer in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return outcomes


# Rounds of the 2.0-versus-1.5 race; each round uses a key of its own (the shape bucket).
PROMOTION_ROUNDS = 30


def test_two_racing_promoters_leave_the_better_champion_every_round(
    engine: Engine, report_json: Callable[..., str]
) -> None:
    """Promoters of 2.0 and 1.5 released together, in separate sessions and connections: 2.0
    stays whatever the order. Odd rounds race to insert the key's first champion, even rounds
    race to replace a 1.2 champion (the row-lock path)."""
    cubins = {2.0: b"\x7fELF two", 1.5: b"\x7fELF one-five", 1.2: b"\x7fELF one-two"}
    for round_no in range(PROMOTION_ROUNDS):
        bucket = f"race{round_no}"
        # A champion of a bucket comes from a job of that bucket (promote_champion checks it).
        job_id = _new_job(engine, bucket)
        evaluations = {
            score: _verified(
                engine, job_id, f"r{round_no}-{score}", score, report_json(score, cubin=cubin)
            )
            for score, cubin in cubins.items()
        }
        if round_no % 2 == 0:
            assert _promote(engine, evaluations[1.2], cubins[1.2], bucket) == "promoted"
        racers = [2.0, 1.5] if round_no % 4 < 2 else [1.5, 2.0]  # thread start order varies
        outcomes = _race_promoters(
            engine, [(score, evaluations[score], cubins[score]) for score in racers], bucket
        )
        assert outcomes[2.0] == "promoted", (round_no, outcomes)
        assert outcomes[1.5] in ("promoted", "beats_champion"), (round_no, outcomes)
        with session_scope(engine) as s:
            champion = s.scalar(select(Champion).filter_by(**{**KEY, "shape_bucket": bucket}))
            assert champion is not None
            assert champion.evaluation_id == evaluations[2.0], (round_no, outcomes)
            assert champion.metrics["score"] == 2.0
            history = s.scalars(
                select(ChampionPromotion.score)
                .filter_by(shape_bucket=bucket)
                .order_by(ChampionPromotion.id)
            ).all()
            assert history[-1] == 2.0 and sorted(history) == history, (round_no, history)


def test_concurrent_progress_and_cancel_never_resurrect_a_cancelled_job(engine: Engine) -> None:
    job_id = _new_job(engine)
    with session_scope(engine) as s:
        repo.update_job_progress(s, job_id, state="running")
    outcomes: list[str] = []

    def worker_progress() -> None:
        for iteration in range(1, 30):
            try:
                with session_scope(engine) as s:
                    repo.update_job_progress(s, job_id, state="running", iteration=iteration)
            except repo.InvalidTransitionError:
                outcomes.append("stopped")
                return

    def cancel() -> None:
        with session_scope(engine) as s:
            repo.set_job_state(s, job_id, "cancelled")

    worker = threading.Thread(target=worker_progress)
    worker.start()
    cancel()
    worker.join(timeout=120)
    with session_scope(engine) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state == "cancelled"
    # The worker either finished all its iterations before the cancel or was told to stop.
    assert outcomes in ([], ["stopped"])


def test_session_scope_rolls_back_when_the_block_raises(engine: Engine) -> None:
    with pytest.raises(RuntimeError, match="boom"), session_scope(engine) as s:
        repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu=H200,
            shape_bucket="m64n64",
            config={},
            backend="offline",
            model=None,
        )
        raise RuntimeError("boom")
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0


def test_a_writer_killed_mid_transaction_leaves_no_trace_and_no_lock(
    engine: Engine, fresh_database_url: str
) -> None:
    """A worker process dying with an open write transaction (os._exit: no rollback, no close)
    must not leave a half-written row or a held lock behind."""
    script = textwrap.dedent(
        f"""
        import os
        from db import repository as repo
        from db.session import make_engine, session_scope

        engine = make_engine({fresh_database_url!r})
        with session_scope(engine) as s:
            repo.create_job(s, path="trsm_small", dtype="float64", gpu="nvidia-h200",
                            shape_bucket="m64n64", config={{}}, backend="offline", model=None)
            s.flush()
            print("flushed", flush=True)
            os._exit(3)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "flushed"
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    # The next writer gets the lock at once and commits.
    job_id = _new_job(engine)
    with session_scope(engine) as s:
        assert s.scalar(select(Job.id)) == job_id
