"""trsm_batched on a GPU (``gpu``-marked: skipped without a CUDA device; written without one,
so the lead's H200 run is their first):

- the seed of ``trsm_small_batched`` passes its suite through the whole pipeline (quick check,
  full verification, timing against cuBLAS ``?trsmBatched`` at every timed shape, re-check) in
  all four dtypes;
- the two red-team kernels are refused by the check named: one that solves every batch index
  with batch 0's A (``row_relative_error``), one with a per-block batch tile and no bound on its
  last tile (``out_of_bounds_write`` at the quick check's batch of 3);
- the loader's callable gives right results at batch 1000: the seed promoted as the champion
  and served by the service (the kernel route, its prepared launch), and cuBLAS's fallback.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from ops_service import Service
from test_ops_registered import SIGNER, promote_seed

import kernevo
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from evaluator.trsm_batched_inputs import make_problem
from kernevo.keys import public_raw_of
from seeds.solve_tri.reference import reference, row_error_bounds, row_relative_errors
from seeds.spec import DTYPES
from seeds.trsm_small_batched.spec import TRSM_SMALL_BATCHED

pytestmark = pytest.mark.gpu

SPEC = TRSM_SMALL_BATCHED


def evaluate(dtype: str, source: str) -> EvaluationReport:
    evaluator = Evaluator(SPEC.path_id, dtype, gpu_index=0)
    try:
        return evaluator.evaluate(source)
    finally:
        evaluator.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_seed_passes_its_suite_and_is_timed_at_every_timed_shape(dtype):
    report = evaluate(dtype, SPEC.seed_source())
    assert report.passed, report.failure and report.failure.describe()
    assert [t.problem for t in report.timings] == list(SPEC.timed_shapes)
    assert all(t.candidate_us >= t.plausibility_floor_us > 0 for t in report.timings)
    rows = ", ".join(
        f"{t.problem}: {t.candidate_us:.1f} us vs cuBLAS {t.baseline_us:.1f} us "
        f"({t.speedup:.2f}x, noise {t.noise_floor:.1%})"
        for t in report.timings
    )
    print(f"\nRESULTS trsm_small_batched {dtype} seed: score {report.combined_score:.2f}; {rows}")


def test_a_kernel_that_uses_batch_0s_a_for_every_batch_is_refused():
    seed = SPEC.seed_source()
    block = "const scalar_t* A_block = A + first * mm;"
    slot = "const int slot = slot_raw < slots ? slot_raw : 0;"
    assert block in seed and slot in seed
    faulty = seed.replace(block, "const scalar_t* A_block = A;").replace(
        slot, "const int slot = 0;"
    )
    report = evaluate("float32", faulty)
    assert report.status == "wrong" and report.failure is not None
    assert report.failure.check == "row_relative_error", report.failure.describe()
    assert "batch index 1" in report.failure.detail  # the quick check's batch of 3


def test_a_kernel_right_only_for_batches_its_tile_divides_is_refused():
    # Without the batch bound, the spare slots of the last block (25 slots of 5 columns at
    # (7, 5, 3)) solve and store past the last matrix.
    seed = SPEC.seed_source()
    bound = "const bool active = slot_raw < slots && i < batch;"
    assert bound in seed
    faulty = seed.replace(bound, "const bool active = slot_raw < slots;")
    report = evaluate("float64", faulty)
    assert report.status == "wrong" and report.failure is not None
    assert report.failure.check == "out_of_bounds_write", report.failure.describe()
    assert report.failure.shape == (7, 5, 3)


def _check_solution(problem, x: np.ndarray) -> None:
    x_ref, growth = reference(problem.a, problem.b)
    u = float(np.finfo(problem.a.dtype).eps) / 2
    m = problem.shape[0]
    assert (row_relative_errors(x, x_ref) <= row_error_bounds(m, x_ref, growth, u)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_loaders_callable_solves_a_batch_of_1000(dtype, tmp_path: Path):
    import cupy

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    promote_seed(url, SPEC, dtype, tmp_path)
    service = Service(url)
    try:
        solver = kernevo.load(
            "trsm_batched", dtype, api_url=service.url, cache_dir=tmp_path / "cache",
            trusted_keys=[base64.b64encode(public_raw_of(SIGNER)).decode()],
            key_dir=tmp_path / "no-local-key",
        )  # fmt: skip
        for shape in [(64, 16, 1000), (33, 7, 1000)]:
            assert solver.explain(*shape).route == "kernel", solver.explain(*shape).reason
            problem = make_problem(shape, dtype, 21)
            a, b = cupy.asarray(problem.a), cupy.asarray(problem.b)
            for _ in range(2):  # the first call and the prepared launch after it
                b[...] = cupy.asarray(problem.b)
                assert solver(a, b) is b
                _check_solution(problem, b.get())
        # A strided B goes to cuBLAS's batched TRSM, and is right too.
        problem = make_problem((16, 16, 1000), dtype, 22)
        a = cupy.asarray(problem.a)
        b = cupy.asfortranarray(cupy.asarray(problem.b))
        assert solver(a, b) is b
        _check_solution(problem, b.get())
    finally:
        service.stop()
