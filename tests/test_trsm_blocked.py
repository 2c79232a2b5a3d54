"""The `trsm_blocked` path (issue 7, Build item 3): TRSM for 128 ≤ m ≤ 16384 by the HSMA-TRSM
paper's decoupled diagonal-block inversion and block-row GEMMs.

CPU: a NumPy emulation of the kernel (column-wise substitution on identity columns, the
direct solve at m ≤ NB) and of the driver's block-row loop solves as SciPy does for ragged m in
every dtype and several NB, IB; the direct solve keeps a non-finite entry of A out of the rows
that do not depend on it; the seed passes the screen, compiles with NVRTC in every dtype and
holds no state that outlives a launch; the spec, its two shape buckets, the registry and routing
agree (each shape routed to the bucket holding it). GPU (``gpu``-marked): the evaluator passes
the seed in float32 and float64 (default bucket, timed), and the large bucket's quick check and
full verification in every dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from evaluator.checks import accuracy
from evaluator.checks.device_state import device_state_failure
from evaluator.compile import compile_cubin
from evaluator.screen import screen
from seeds import registry
from seeds.cublas import VendorTrsm
from seeds.spec import DTYPES, UnknownBucketError, resolve
from seeds.trsm_blocked.driver import TrsmBlockedDriver
from seeds.trsm_blocked.spec import BUCKETS, ENVELOPE, TRSM_BLOCKED
from seeds.tunables import parse_tunables

SEED = TRSM_BLOCKED.seed_source()
NP_DTYPES = {"float32": np.float32, "float64": np.float64,
             "complex64": np.complex64, "complex128": np.complex128}  # fmt: skip


# ---- a NumPy emulation of kernel.cu and driver.py ------------------------------------------


def diag_kernel(d: np.ndarray, rhs: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The kernel's column-wise forward substitution on an mb×mb lower block ``d`` for the
    columns of ``rhs``, column j starting at row ``first[j]`` (its 1 for an identity column, 0
    for B's): step k divides row k by d_kk, then updates only rows below k, only in columns that
    have started (so 0·x never meets a non-finite entry)."""
    y = rhs.copy()
    for k in range(d.shape[0]):
        started = first <= k
        y[k, started] = y[k, started] / d[k, k]
        y[k + 1 :, started] -= np.outer(d[k + 1 :, k], y[k, started])
    return y


def blocked_solve(a: np.ndarray, b: np.ndarray, nb: int, ib: int) -> np.ndarray:
    """X for lower ``a`` (m×m) and ``b`` (m×n) as the seed computes it: m ≤ nb solves directly;
    otherwise every diagonal block is inverted (``ib`` identity columns at a time, the
    WARPS·COLS columns thread block (t, j) owns, into an nb×nb slot with zeros outside the
    block), then
    X_i = inv(D_i)·(B_i − A_i,0:i·X_0:i)."""
    m, n = b.shape
    if m <= nb:
        return diag_kernel(a, b, np.zeros(n, dtype=int))
    x = b.copy()
    inverses = []
    for r0 in range(0, m, nb):
        mb = min(nb, m - r0)
        slot = np.zeros((nb, nb), dtype=a.dtype)
        for c0 in range(0, nb, ib):  # thread block (t, j): columns c0 .. c0 + ib - 1
            cols = [c for c in range(c0, c0 + ib) if c < mb]
            if cols:
                slot[:mb, cols] = diag_kernel(
                    a[r0 : r0 + mb, r0 : r0 + mb], np.eye(mb, dtype=a.dtype)[:, cols],
                    np.array(cols),
                )  # fmt: skip
        inverses.append(slot)
    for i, r0 in enumerate(range(0, m, nb)):
        mb = min(nb, m - r0)
        x[r0 : r0 + mb] -= a[r0 : r0 + mb, :r0] @ x[:r0]
        x[r0 : r0 + mb] = inverses[i][:mb, :mb] @ x[r0 : r0 + mb]
    return x


def problem(m: int, n: int, dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A well-conditioned lower A (dominant diagonal) with NaN above it, and a random B."""
    rng = np.random.default_rng(seed)
    t = NP_DTYPES[dtype]

    def draw(*shape: int) -> np.ndarray:
        z = rng.standard_normal(shape)
        return z + 1j * rng.standard_normal(shape) if np.iscomplexobj(t(0)) else z

    a = np.tril(draw(m, m)) / np.sqrt(m) + np.diag(2.0 + rng.random(m))
    a[np.triu_indices(m, 1)] = np.nan
    return a.astype(t), draw(m, n).astype(t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n", "nb", "ib"), [
    (129, 5, 32, 4), (200, 33, 64, 8), (300, 17, 128, 16), (97, 3, 16, 2), (256, 7, 64, 8),
    (100, 9, 128, 16),
])  # fmt: skip
def test_the_blocked_algorithm_solves_as_scipy_for_ragged_m(dtype, m, n, nb, ib):
    a, b = problem(m, n, dtype, seed=m * n)
    x = blocked_solve(a, b, nb, ib)
    ref = solve_triangular(np.tril(np.nan_to_num(a)).astype(np.complex128), b, lower=True)
    eps = np.finfo(a.dtype).eps
    assert np.all(np.isfinite(x))
    assert np.max(np.abs(x - ref)) / np.max(np.abs(ref)) < 50 * m * eps


def test_the_inverse_slots_hold_zeros_outside_a_ragged_block():
    a, _ = problem(40, 1, "float64")
    d = np.tril(np.nan_to_num(a))
    inv = diag_kernel(d, np.eye(40), np.arange(40))
    assert np.allclose(inv @ d, np.eye(40)) and np.all(np.triu(inv, 1) == 0)


def test_the_direct_solve_keeps_a_non_finite_a_out_of_rows_above_it():
    """The evaluator's 64×8 containment case: A[40, 3] = +Inf, B's column 0 zero; rows above 40
    do not depend on it and stay as without it."""
    a, b = problem(64, 8, "float64", seed=3)
    b[:, 0] = 0
    clean = blocked_solve(a, b, 256, 32)
    a[40, 3] = np.inf
    x = blocked_solve(a, b, 256, 32)
    assert np.array_equal(x[:40], clean[:40])
    assert not np.all(np.isfinite(x[40:, 1:]))


# ---- the seed through the screen, NVRTC and the device-state check ------------------------


def test_seed_passes_the_screen():
    assert screen(SEED, SEED) is None


def test_seed_declares_its_block_size_and_work_split_as_tunables():
    tunables = {t.name: t for t in parse_tunables(SEED)}
    assert set(tunables) == {"TB_NB", "TB_WARPS", "TB_COLS", "TB_PANEL", "TB_UNROLL"}
    assert all(t.value in t.choices and len(t.choices) >= 2 for t in tunables.values())
    # A panel never straddles two register slots (32 rows each): it must divide 32.
    assert all(32 % int(p) == 0 for p in tunables["TB_PANEL"].choices)


@pytest.mark.parametrize("dtype", DTYPES)
def test_seed_compiles_in_every_dtype_without_spills_or_device_state(dtype, tmp_path):
    options = TRSM_BLOCKED.compile_options(dtype, "sm_90")
    result = compile_cubin(SEED, options, "sm_90", cache_dir=tmp_path)
    assert result.ok, result.log
    kernel = result.resources[TRSM_BLOCKED.kernel_name]
    assert 0 < kernel.registers <= 255 and kernel.spill_store_bytes == 0
    assert {"kernevo_launch_config", "kernevo_block_size"} <= set(result.resources)
    assert device_state_failure(result.cubin) is None


# ---- the spec, the registry and routing ----------------------------------------------------


def test_registry_holds_the_path_with_its_parts():
    assert registry.get_path("trsm_blocked") is TRSM_BLOCKED
    assert resolve(TRSM_BLOCKED.driver_factory) is TrsmBlockedDriver
    assert resolve(TRSM_BLOCKED.baseline_factory) is VendorTrsm
    check = accuracy.solution_check(TRSM_BLOCKED.reference_check)
    assert check is accuracy.check_solution_lapack
    assert accuracy.added_check_names(TRSM_BLOCKED.reference_check) == ("lapack_ratio",)
    assert TRSM_BLOCKED.verify_kinds == ("growth", "trap", "ill_conditioned", "graded")
    others = {b for s in registry.PATHS.values() if s is not TRSM_BLOCKED for b in s.bucket_names}
    assert not set(TRSM_BLOCKED.bucket_names) & others


def test_two_buckets_by_m_the_first_being_the_registrys():
    assert registry.buckets("trsm_blocked") == ("m128_2048", "m2049_16384")
    assert TRSM_BLOCKED.shape_bucket == "m128_2048" and TRSM_BLOCKED.buckets == BUCKETS
    large = registry.get_path("trsm_blocked", "m2049_16384")
    assert large.shape_bucket == "m2049_16384" and large.path_id == "trsm_blocked"
    assert large.timed_shapes == ((8192, 1024), (4096, 17))
    assert large.envelope == TRSM_BLOCKED.envelope == ENVELOPE  # the path's, in every bucket
    assert large.reference_check == "lapack_ratio"
    assert large.verify_kinds == TRSM_BLOCKED.verify_kinds
    assert registry.get_path("trsm_blocked", "m128_2048") is TRSM_BLOCKED
    assert TRSM_BLOCKED.timed_shapes == ((256, 256), (1024, 1024), (129, 8192))
    with pytest.raises(UnknownBucketError, match="its buckets: m128_2048, m2049_16384"):
        registry.get_path("trsm_blocked", "m128_16384")


@pytest.mark.parametrize("bucket", BUCKETS, ids=lambda b: b.name)
def test_every_shape_set_is_inside_the_path_and_held_out_is_apart(bucket):
    """Shape sets lie inside the path's envelope (small verify shapes in the large bucket
    too: the host reference checks every row there); the timed and quick shapes that decide
    the bucket's NB lie in the bucket itself, and held-out shapes are never scored."""
    spec = registry.get_path("trsm_blocked", bucket.name)
    sets = (spec.quick_shapes, spec.verify_shapes, spec.timed_shapes, spec.held_out_shapes)
    assert all(spec.serves(m, n) for shapes in sets for m, n in shapes)
    assert spec.serves(*spec.sanitizer_shape)
    assert all(bucket.serves(m, n) for m, n in spec.timed_shapes)
    assert bucket.serves(*spec.quick_shapes[0])
    assert {(129, 64), (300, 17), (777, 1), (1000, 96)} <= set(spec.verify_shapes)
    scored = set(spec.quick_shapes) | set(spec.verify_shapes) | set(spec.timed_shapes)
    assert not set(spec.held_out_shapes) & scored
    # Two or more block rows, the last ragged, at every NB the seed declares.
    nbs = [int(v) for v in next(t for t in parse_tunables(SEED) if t.name == "TB_NB").choices]
    m = spec.sanitizer_shape[0]
    assert all(m > nb and m % nb for nb in nbs)


def test_the_large_bucket_verifies_past_m_2048_and_times_the_issues_shapes():
    large = registry.get_path("trsm_blocked", "m2049_16384")
    assert [s for s in large.verify_shapes if s[0] > accuracy.HOST_REFERENCE_MAX_M] == [
        (2049, 16), (3001, 5), (4100, 33),
    ]  # fmt: skip
    assert (4096, 17) in large.timed_shapes and (129, 8192) in TRSM_BLOCKED.timed_shapes
    # The largest timed shape (memcheck before a new best) first; determinism at the last.
    largest = max(large.timed_shapes, key=lambda s: s[0] * s[1])
    assert largest == large.timed_shapes[0] == (8192, 1024)


@pytest.mark.parametrize("dtype", DTYPES)
def test_routing_sends_large_shapes_here_and_small_ones_to_trsm_small(dtype):
    def paths(m: int, n: int) -> set[str]:
        return {r.path_id for r in registry.route("trsm", dtype, m, n)}

    assert paths(4096, 17) == {"trsm_blocked"} and paths(129, 8192) == {"trsm_blocked"}
    assert paths(16384, 16384) == {"trsm_blocked"} and paths(128, 1) == {"trsm_blocked"}
    assert "trsm_small" in paths(64, 64) and "trsm_blocked" not in paths(127, 5)
    assert paths(16385, 1) == set() and paths(128, 16385) == set()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "bucket"),
    [
        (128, 1, "m128_2048"), (129, 8192, "m128_2048"), (1024, 1024, "m128_2048"),
        (2048, 16384, "m128_2048"), (2049, 1, "m2049_16384"), (4096, 17, "m2049_16384"),
        (8192, 8192, "m2049_16384"), (16384, 16384, "m2049_16384"),
    ],
)  # fmt: skip
def test_routing_answers_with_the_bucket_that_holds_the_shape(dtype, m, n, bucket):
    routes = [r for r in registry.route("trsm", dtype, m, n) if r.path_id == "trsm_blocked"]
    assert routes == [registry.Route("trsm_blocked", bucket)]
    assert TRSM_BLOCKED.bucket_of(m, n) == bucket


# ---- on the GPU ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed_is_verified_and_timed(dtype):
    from evaluator.pipeline import Evaluator

    ev = Evaluator("trsm_blocked", dtype, gpu_index=0)
    try:
        report = ev.evaluate(SEED)
    finally:
        ev.close()
    assert report.status == "ok", report.failure
    assert set(TRSM_BLOCKED.verify_shapes) <= set(report.verified_shapes)
    assert [(t.m, t.n) for t in report.timings] == list(TRSM_BLOCKED.timed_shapes)
    assert all(t.candidate_us > 0 and t.baseline_us > 0 for t in report.timings)
    assert "lapack_ratio" in report.checks_run


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_large_buckets_verification_passes_the_seed(dtype):
    """The m2049_16384 bucket's quick check and full verification (every kind, ill-conditioned
    ones included, at m up to 4100, judged by LAPACK's ratio on the device) without timing:
    timing at (8192, 1024) waits for evaluator.timing to size its input sets by bytes."""
    from evaluator.pipeline import Evaluator

    large = registry.get_path("trsm_blocked", "m2049_16384")
    ev = Evaluator("trsm_blocked", dtype, gpu_index=0, bucket="m2049_16384")
    try:
        assert ev.spec.verify_shapes == large.verify_shapes
        report, cubin = ev.stage1(SEED)
        assert report.passed, report.failure
        task = {
            "kind": "check", "cubin": cubin, "path_id": "trsm_blocked", "dtype": dtype,
            "shapes": list(large.verify_shapes), "seeds": [11, 12, 13], "growth": True,
        }  # fmt: skip
        assert ev.worker is not None
        result = ev.worker.run(task, 600.0)
    finally:
        ev.close()
    assert result["failure"] is None, result["failure"]
    assert [tuple(s) for s in result["verified_shapes"]] == list(large.verify_shapes)


@pytest.mark.gpu
def test_the_driver_solves_in_place_on_a_stream_as_scipy_does():
    import cupy

    from evaluator.compile import compile_cubin as compile_

    result = compile_(SEED, TRSM_BLOCKED.compile_options("float64", "sm_90"), "sm_90")
    assert result.ok, result.log
    driver = TRSM_BLOCKED.driver(result.cubin, "float64")
    a, b = problem(1000, 40, "float64", seed=7)
    ref = solve_triangular(np.tril(np.nan_to_num(a)), b, lower=True)
    a_dev, b_dev = cupy.array(a, order="F"), cupy.array(b, order="F")
    # A non-blocking stream does not wait for the legacy stream the copies were made on.
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    x = driver.solve(a_dev, b_dev, stream)
    stream.synchronize()
    assert np.max(np.abs(x.get() - ref)) / np.max(np.abs(ref)) < 1e-10
