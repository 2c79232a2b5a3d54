"""Shape buckets (issue 7): a path may have several (``PathSpec.buckets``; ``trsm_blocked``:
``m128_2048`` and ``m2049_16384``), a job targets one (``JobConfig.bucket``, ``kernevo evolve
--bucket``), and its spec carries that bucket's shape sets while the envelope stays the path's.
Routing and the API are tested in tests/test_routing.py and tests/test_trsm_blocked.py; the
evaluator's use of a bucket in tests/test_path_parts.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import evolver.runner
from evolver.errors import ResumeError
from evolver.job_config import JobConfig, JobConfigError, validate_job_config
from evolver.llm import LLMBackend
from evolver.settings import EvolverSettings
from kernevo.cli import main
from seeds import registry
from seeds.spec import ShapeBucket
from seeds.trsm_blocked.spec import M128_2048, M2049_16384, TRSM_BLOCKED
from seeds.trsm_small.spec import TRSM_SMALL


def bucket(name: str, envelope: dict[str, int], sanitizer: tuple[int, int] = (300, 40)) -> Any:
    return ShapeBucket(name, envelope, ((300, 17),), ((300, 17),), ((300, 17),), ((400, 3),),
                       sanitizer)  # fmt: skip


# ---- the spec ---------------------------------------------------------------------------------


def test_a_path_without_buckets_has_one():
    assert TRSM_SMALL.bucket_names == ("m64n64",) and TRSM_SMALL.buckets == ()
    assert TRSM_SMALL.for_bucket("m64n64") is TRSM_SMALL
    assert TRSM_SMALL.bucket_of(64, 64) == "m64n64" and TRSM_SMALL.bucket_of(65, 1) is None
    assert registry.buckets("trsm_small") == ("m64n64",)


def test_bucket_of_follows_the_bucket_envelopes():
    assert TRSM_BLOCKED.bucket_of(128, 1) == TRSM_BLOCKED.bucket_of(2048, 16384) == "m128_2048"
    assert (
        TRSM_BLOCKED.bucket_of(2049, 1) == TRSM_BLOCKED.bucket_of(16384, 16384) == ("m2049_16384")
    )
    assert TRSM_BLOCKED.bucket_of(127, 1) is None and TRSM_BLOCKED.bucket_of(16385, 1) is None
    assert M128_2048.serves(2048, 1) and not M2049_16384.serves(2048, 1)


def test_for_bucket_swaps_the_shape_sets_and_keeps_the_rest():
    large = TRSM_BLOCKED.for_bucket("m2049_16384")
    for name in ("quick_shapes", "verify_shapes", "timed_shapes", "held_out_shapes"):
        assert getattr(large, name) == getattr(M2049_16384, name)
    assert large.sanitizer_shape == M2049_16384.sanitizer_shape
    kept = ("path_id", "envelope", "kernel_name", "driver_factory", "baseline_factory",
            "reference_check", "verify_kinds", "buckets", "dtypes")  # fmt: skip
    assert all(getattr(large, name) == getattr(TRSM_BLOCKED, name) for name in kept)
    assert large.for_bucket("m128_2048") == TRSM_BLOCKED


@pytest.mark.parametrize(
    ("buckets", "error"),
    [
        ((M128_2048, M128_2048), "bucket names repeat"),
        ((M128_2048, bucket("wide", {"m_min": 2000, "m_max": 4000, "n_max": 8})), "overlap"),
        ((M128_2048, bucket("huge", {"m_min": 2049, "m_max": 32768, "n_max": 8})), "leaves"),
    ],
)
def test_buckets_that_overlap_or_leave_the_envelope_are_refused(buckets, error):
    with pytest.raises(ValueError, match=error):
        dataclasses.replace(TRSM_BLOCKED, buckets=buckets)


def test_the_specs_own_shapes_must_be_one_of_its_buckets():
    with pytest.raises(ValueError, match="not those of one of its buckets"):
        dataclasses.replace(TRSM_BLOCKED, timed_shapes=((512, 512),))
    with pytest.raises(ValueError, match="not those of one of its buckets"):
        dataclasses.replace(TRSM_BLOCKED, shape_bucket="m128_16384")


# ---- the job ----------------------------------------------------------------------------------


def test_a_job_names_a_bucket_of_its_path():
    job = JobConfig(path="trsm_blocked", bucket="m2049_16384", dtype="float64")
    assert job.bucket == "m2049_16384"
    assert JobConfig(path="trsm_blocked", dtype="float64").bucket is None
    with pytest.raises(JobConfigError, match="its buckets: m128_2048, m2049_16384"):
        validate_job_config({"path": "trsm_blocked", "bucket": "m1", "dtype": "float64"}, "job")
    with pytest.raises(JobConfigError, match="of path trsm_small; its buckets: m64n64"):
        validate_job_config({"path": "trsm_small", "bucket": "m128_2048", "dtype": "float64"}, "j")


def test_kernevo_evolve_takes_the_bucket(monkeypatch, tmp_path):
    started: list[JobConfig] = []

    def start_job(job: JobConfig, **kwargs: Any) -> Any:
        started.append(job)
        return evolver.runner.JobOutcome(1, "complete", 0, 0.0, 0.0, 0, "done")

    monkeypatch.setattr(evolver.runner, "start_job", start_job)
    argv = ["evolve", "--path", "trsm_blocked", "--bucket", "m2049_16384", "--dtype", "float32",
            "--compile-only", "--work-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert [(j.path, j.bucket, j.dtype) for j in started] == [
        ("trsm_blocked", "m2049_16384", "float32")
    ]
    assert registry.get_path(started[0].path, started[0].bucket).timed_shapes == (
        M2049_16384.timed_shapes
    )


def test_kernevo_evolve_refuses_an_unknown_bucket_as_a_usage_error(capsys, tmp_path):
    argv = ["evolve", "--path", "trsm_blocked", "--bucket", "m1", "--dtype", "float32",
            "--compile-only", "--work-dir", str(tmp_path)]  # fmt: skip
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kernevo evolve: error: argument --bucket: unknown shape bucket 'm1'")
    assert not (tmp_path / "runs").exists()


def test_the_jobs_first_line_names_its_bucket():
    job = JobConfig(path="trsm_blocked", bucket="m2049_16384", dtype="float64", compile_only=True)
    backend = LLMBackend("offline", "mutator")
    line = evolver.runner._header(7, job, None, backend, 30, None, False, Path("w"))
    assert line.startswith("job 7: trsm_blocked (shape bucket m2049_16384) float64 on no GPU")
    small = JobConfig(path="trsm_small", dtype="float64", compile_only=True)
    line = evolver.runner._header(7, small, None, backend, 30, None, False, Path("w"))
    assert line.startswith("job 7: trsm_small float64 on no GPU")


def test_a_resume_on_another_bucket_is_refused(fresh_database_url, tmp_path):
    from db import repository
    from db.session import make_engine, session_scope

    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            job = repository.create_job(
                s, path="trsm_blocked", dtype="float64", gpu="none", shape_bucket="m128_2048",
                config={"path": "trsm_blocked", "dtype": "float64"}, backend="offline",
                model=None,
            )  # fmt: skip
            repository.update_job_progress(s, job.id, state="failed", iteration=0)
            job_id = job.id
    finally:
        engine.dispose()
    settings = EvolverSettings(work_dir=tmp_path)
    with pytest.raises(ResumeError, match="is on shape bucket m128_2048, not m2049_16384"):
        evolver.runner.resume_job(
            job_id, overrides={"bucket": "m2049_16384"}, settings=settings,
            database_url=fresh_database_url, write=lambda line: None,
        )  # fmt: skip
    with pytest.raises(ResumeError, match="no unfinished trsm_blocked float64 job"):
        evolver.runner.resume_job(
            None, overrides={"path": "trsm_blocked", "dtype": "float64", "bucket": "m2049_16384"},
            settings=settings, database_url=fresh_database_url, write=lambda line: None,
        )  # fmt: skip


@pytest.mark.parametrize(("bucket", "passed"), [("m2049_16384", "m2049_16384"), (None, None)])
def test_a_promotion_verifies_at_the_jobs_bucket(bucket, passed, fresh_database_url, monkeypatch):
    """trsm_blocked's champion of a bucket is verified (held-out, timed, sanitized) at that
    bucket's shapes; a path of one bucket is verified as before (no bucket argument)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    import evaluator.champion
    from evolver.champion import promote_best
    from evolver.store import open_store
    from kernevo.keys import SigningKey

    seen: list[dict[str, Any]] = []

    def verify_champion(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        raise RuntimeError("verification reached")

    monkeypatch.setattr(evaluator.champion, "verify_champion", verify_champion)
    key = SigningKey(Ed25519PrivateKey.generate(), "id", b"", Path("key"))
    spec = registry.get_path("trsm_blocked", bucket) if bucket else registry.get_path("trsm_small")
    engine = open_store(fresh_database_url)
    try:
        with pytest.raises(RuntimeError, match="verification reached"):
            promote_best(
                engine, spec=spec, dtype="float64", gpu_index=0, gpu_key="nvidia-h200",
                uid="u1", source="kernel", signing_key=key,
            )  # fmt: skip
    finally:
        engine.dispose()
    assert seen == [{"bucket": passed} if passed else {}]


@pytest.mark.parametrize(
    ("bucket", "recorded"), [("m2049_16384", "m2049_16384"), (None, "m128_2048")]
)
def test_a_queued_job_is_recorded_at_its_bucket(bucket, recorded, api_client, api_token):
    """``POST /v1/jobs`` takes the job configuration, bucket included: the queued row's shape
    bucket is the job's (a promotion checks the two agree)."""
    from conftest import bearer

    body = {"path": "trsm_blocked", "dtype": "float32", "compile_only": True}
    response = api_client.post(
        "/v1/jobs", json={**body, **({"bucket": bucket} if bucket else {})},
        headers=bearer(api_token),
    )  # fmt: skip
    assert response.status_code == 201, response.text
    assert response.json()["shape_bucket"] == recorded
    refused = api_client.post("/v1/jobs", json={**body, "bucket": "m1"}, headers=bearer(api_token))
    assert refused.status_code == 422 and "its buckets: m128_2048" in refused.text


def test_export_writes_one_folder_per_bucket(fresh_database_url, tmp_path):
    """``kernevo export`` of a path with two bucket champions writes both, each in a folder of
    its bucket (one folder per path would have let the second overwrite the first)."""
    from conftest import H200
    from test_routing import BLOCKED_LARGE, BLOCKED_SMALL, promote, timing

    from db.session import read_scope
    from evolver.export import export_champions
    from evolver.store import open_existing_store

    small = promote(fresh_database_url, BLOCKED_SMALL, 1.3, [timing(1024, 1024, 300.0)])
    large = promote(fresh_database_url, BLOCKED_LARGE, 1.2, [timing(8192, 1024, 1500.0)])
    engine = open_existing_store(fresh_database_url)
    try:
        with read_scope(engine) as s:
            written = export_champions(
                s, op="trsm", dtype="float64", gpu_key=H200, out_dir=tmp_path,
                path="trsm_blocked",
            )  # fmt: skip
    finally:
        engine.dispose()
    assert [(e.shape_bucket, e.program_id, e.folder) for e in written] == [
        ("m128_2048", small, tmp_path / "trsm_blocked" / "m128_2048"),
        ("m2049_16384", large, tmp_path / "trsm_blocked" / "m2049_16384"),
    ]
    for exported in written:
        champion = json.loads((exported.folder / "champion.json").read_text())
        assert (champion["shape_bucket"], champion["program_id"]) == (
            exported.shape_bucket, exported.program_id,
        )  # fmt: skip


def test_bench_takes_the_bucket(monkeypatch, capsys):
    """``python -m evaluator.bench --bucket``: an unknown bucket is a usage error (exit 2),
    a known one reaches the evaluator."""
    import evaluator.bench as bench
    from evaluator.report import EvaluationReport

    with pytest.raises(SystemExit) as caught:
        bench.main(["--path", "trsm_blocked", "--bucket", "m1", "--dtype", "float64"])
    assert caught.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "argument --bucket: unknown shape bucket 'm1' of path trsm_blocked; its buckets: "
            "m128_2048, m2049_16384"
        )
    )
    made: list[tuple[Any, ...]] = []

    class Evaluator:
        def __init__(self, path_id, dtype, gpu_index, bucket=None):
            made.append((path_id, dtype, bucket))

        def evaluate(self, source):
            return EvaluationReport("trsm_blocked", "float64")

        def close(self):
            pass

    monkeypatch.setattr(bench, "Evaluator", Evaluator)
    bench.main(["--path", "trsm_blocked", "--bucket", "m2049_16384", "--dtype", "float64"])
    assert made == [("trsm_blocked", "float64", "m2049_16384")]
