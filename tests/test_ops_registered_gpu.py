"""solve_tri and band_bidiag registered, on a GPU (``gpu``-marked: skipped without a CUDA device;
written without one, so the lead's H200 run is their first):

- the seed of each passes its op's suite through the whole pipeline (quick check, full
  verification, timing against its baseline at every timed shape, re-check) and is timed by
  shape; a kernel with one of issue 8's faults is refused by the check named;
- a short evolution of each (3 iterations, offline mutator) promotes a champion with a v3
  certificate, and ``kernevo.load`` serves it from the job's database through the service:
  the kernel route, its result within the op's bound.

Each evolution verifies the champion too (held-out shapes, determinism, compute-sanitizer's
four tools): minutes per path (band_bidiag's LAPACK reference and baseline run on the host).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ops_service import Service
from sqlalchemy import select

import kernevo
from db.models import Champion
from db.session import make_engine, session_scope
from evaluator.op_suites import suite_for
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from evolver.job_config import JobConfig
from evolver.runner import start_job
from evolver.settings import EvolverSettings
from kernevo.certificate import CERTIFICATE_V3
from seeds import registry
from seeds.band_bidiag.inputs import random_band
from seeds.band_bidiag.reference import check_bidiagonal
from seeds.solve_tri.inputs import draw_matrices
from seeds.solve_tri.reference import forward_substitution, row_error_bounds, row_relative_errors

pytestmark = pytest.mark.gpu

NEW_PATHS = [("solve_tri", "float32"), ("band_bidiag", "float32"), ("band_bidiag", "float64")]


def evaluate(path_id: str, dtype: str, source: str) -> EvaluationReport:
    evaluator = Evaluator(path_id, dtype, gpu_index=0)
    try:
        return evaluator.evaluate(source)
    finally:
        evaluator.close()


@pytest.mark.parametrize(("path_id", "dtype"), NEW_PATHS)
def test_the_seed_passes_its_suite_and_is_timed_at_every_timed_shape(path_id, dtype):
    spec = registry.get_path(path_id)
    report = evaluate(path_id, dtype, spec.seed_source())
    assert report.passed, report.failure and report.failure.describe()
    assert [t.problem for t in report.timings] == list(spec.timed_shapes)
    assert report.checks_run == list(suite_for(spec.op).added_checks)
    assert all(t.candidate_us > 0 and t.baseline_us > 0 for t in report.timings)
    assert all(t.candidate_us >= t.plausibility_floor_us > 0 for t in report.timings)
    rows = ", ".join(
        f"{t.problem}: {t.candidate_us:.1f} us vs {t.baseline_us:.1f} us ({t.speedup:.2f}x, "
        f"noise {t.noise_floor:.1%})"
        for t in report.timings
    )
    print(f"\nRESULTS {path_id} {dtype} seed: score {report.combined_score:.2f}; {rows}")


def test_a_solve_tri_kernel_that_reads_one_batchs_a_is_refused():
    seed = registry.get_path("solve_tri").seed_source()
    line = "const float* a = (const float*)((const char*)A + i2 * nb_a2 + i3 * nb_a3);"
    assert line in seed
    report = evaluate("solve_tri", "float32", seed.replace(line, "const float* a = A;"))
    assert report.status == "wrong" and report.failure is not None
    assert report.failure.check == "row_relative_error"
    assert "batch (i2, i3) = (1, 0)" in report.failure.detail  # the quick check's 2 x 2 batches


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_band_kernel_that_skips_the_last_sweep_is_refused(dtype):
    seed = registry.get_path("band_bidiag").seed_source()
    marker = "past their last step too\n"
    assert marker in seed
    faulty = seed.replace(marker, marker + "    if (R == last && b - t == 1) continue;\n")
    report = evaluate("band_bidiag", dtype, faulty)
    assert report.status == "wrong" and report.failure is not None
    assert report.failure.check.endswith("singular_values"), report.failure.describe()
    assert "m=" not in report.failure.describe()


# --- a short evolution, promoted and served ------------------------------------------------------


@pytest.fixture
def evolved(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A 3-iteration job of (path, dtype) = ``request.param`` on a fresh SQLite database (the
    seed promoted at once, the job's best again at its end when it is another program); its
    champion row and the service on its database."""
    path_id, dtype = request.param
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    settings = EvolverSettings(
        work_dir=tmp_path / "runs", llm_base_url=None, key_dir=tmp_path / "keys"
    )
    job = JobConfig(path=path_id, dtype=dtype, iterations=3, checkpoint_interval=1, promote_every=3)
    lines: list[str] = []
    outcome = start_job(job, settings=settings, database_url=url, write=lines.append)
    print("\n".join(lines))
    assert outcome.state == "complete", lines[-5:]
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            champions = list(s.scalars(select(Champion).where(Champion.path == path_id)))
            assert len(champions) == 1, [line for line in lines if "champion" in line]
            row = champions[0]
            found = {"certificate": row.certificate, "dtype": row.dtype, "envelope": row.envelope}
    finally:
        engine.dispose()
    service = Service(url)
    try:
        yield {**found, "path": path_id, "url": service.url, "keys": tmp_path / "keys",
               "cache": tmp_path / "cache"}  # fmt: skip
    finally:
        service.stop()


@pytest.mark.parametrize("evolved", [("solve_tri", "float32")], indirect=True)
def test_a_short_solve_tri_evolution_promotes_a_champion_the_loader_runs(evolved):
    import cupy

    assert evolved["certificate"]["format"] == CERTIFICATE_V3
    assert evolved["certificate"]["op"] == "solve_tri"
    solver = kernevo.load(
        "solve_tri", "float32", api_url=evolved["url"], cache_dir=evolved["cache"],
        key_dir=evolved["keys"],
    )  # fmt: skip
    n, k, b2, b3 = shape = (64, 6, 4, 2)
    decision = solver.explain(*shape)
    assert decision.route == "kernel", decision.reason
    a_host, b_host = draw_matrices(shape, 3)  # A's strict upper triangle NaN: never read
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    x = solver(a, b)
    assert x is b  # in place, as ggml's op
    x_ref = forward_substitution(a_host, b_host)
    lower = np.tril(np.nan_to_num(a_host.astype(np.float64)))
    inverse = forward_substitution(lower, np.broadcast_to(np.eye(n), lower.shape))
    growth = np.abs(inverse) @ (np.abs(lower) @ np.abs(x_ref))
    errors = row_relative_errors(x.get(), x_ref)
    assert (errors <= row_error_bounds(n, x_ref, growth)).all()


@pytest.mark.parametrize("evolved", [("band_bidiag", "float64")], indirect=True)
def test_a_short_band_bidiag_evolution_promotes_a_champion_the_loader_runs(evolved):
    import cupy

    assert evolved["certificate"]["format"] == CERTIFICATE_V3
    assert evolved["certificate"]["op"] == "band_bidiag"
    solver = kernevo.load(
        "band_bidiag", "float64", api_url=evolved["url"], cache_dir=evolved["cache"],
        key_dir=evolved["keys"],
    )  # fmt: skip
    decision = solver.explain(1024, 32)
    assert decision.route == "kernel", decision.reason
    band = random_band(1024, 32, np.float64, np.random.default_rng(5))
    device_band = cupy.asfortranarray(cupy.asarray(band))
    d, e = solver(device_band)
    assert check_bidiagonal(band, d.get(), e.get()) is None
    assert cupy.array_equal(device_band, cupy.asarray(band))  # the band is never written
    assert solver.explain(4096, 1024).route == "lapack"  # outside the envelope: the fallback
