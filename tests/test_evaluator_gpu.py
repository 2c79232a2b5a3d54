"""The evaluator on a real GPU: the seed passes in every dtype, lying or racy kernels do not.

Each adversarial candidate edits only the EVOLVE-BLOCK, as an LLM would, so it gets past the
screen and compiles; the check named in the assertion is the one that must catch it.
"""

from __future__ import annotations

import pytest
from test_evaluator_device_state import REPLAY_MEMO

from evaluator.champion import verify_champion
from evaluator.inputs import make_problem
from evaluator.screen import screen
from seeds.registry import get_path

pytestmark = pytest.mark.gpu
SEED = get_path("trsm_small").seed_source()
STORE = "if (row < m && col < n) B[(long)col * ldb + row] = b[c][s];"


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_seed_is_verified_and_timed_in_every_dtype(evaluators, dtype):
    report = evaluators(dtype).evaluate(SEED)
    assert report.status == "ok", report.failure
    spec = get_path("trsm_small")
    assert set(spec.verify_shapes) <= set(report.verified_shapes)
    assert [(t.m, t.n) for t in report.timings] == list(spec.timed_shapes)
    for t in report.timings:
        assert 0 < t.candidate_us < 1000 and 0 < t.baseline_us < 1000
    assert report.combined_score > 0
    assert report.metrics()["combined_score"] == report.combined_score


def _variant(old: str, new: str) -> str:
    assert old in SEED
    return SEED.replace(old, new, 1)


@pytest.mark.parametrize(
    ("source", "status", "check"),
    [
        # Skips the last row: a kernel that "mostly" solves.
        (
            _variant(STORE, "if (row < m - 1 && col < n) B[(long)col * ldb + row] = b[c][s];"),
            "wrong",
            "scaled_residual",
        ),
        # Writes one element past B.
        (
            _variant(STORE, STORE + " if (row == 0 && col == n - 1) B[(long)n * ldb] = b[c][s];"),
            "wrong",
            "out_of_bounds_write",
        ),
        # Uses the upper triangle (NaN in every test input) instead of ignoring it.
        (
            _variant("if (r >= c) sA[c * m + r]", "sA[c * m + r]")
            .replace("(row > k && row < m) ? sA", "(row != k && row < m) ? sA")
            .replace("if (lane + KV_WARP * s > k) b[c][s] = kv_fms", "b[c][s] = kv_fms"),
            "wrong",
            "non_finite_output",
        ),
        # Reads one element past each column of B: past the last one is a NaN guard band.
        (
            _variant(
                "B[(long)col * ldb + row] : kv_zero()", "B[(long)col * ldb + row + 1] : kv_zero()"
            ),
            "wrong",
            "non_finite_output",
        ),
        # Computes in float32 whatever the dtype: fast and wrong in float64.
        (
            _variant(
                "b[c][s] = kv_fms(b[c][s], a_k[s], x);",
                "b[c][s] = (scalar_t)(float)kv_fms(b[c][s], a_k[s], x);",
            ),
            "wrong",
            "scaled_residual",
        ),
        # Asks for more shared memory than any block may have.
        (
            _variant("cfg[6] = (m * m + m) * (int)sizeof(scalar_t);", "cfg[6] = 1 << 30;"),
            "wrong",
            "launch_geometry",
        ),
        # Never returns.
        (
            _variant("if (col0 >= n) return;", "while (col0 >= 0) { __nanosleep(1000); }"),
            "timeout",
            "hard_timeout",
        ),
        # Dereferences a wild pointer.
        (
            _variant(
                "if (col0 >= n) return;",
                "if (col0 >= n) return; if (lane == 0) B[-(1L << 40)] = b[0][0];",
            ),
            "fault",
            "cuda_error",
        ),
    ],
    ids=[
        "skip_row",
        "oob_write",
        "reads_upper",
        "reads_past_b",
        "float32_inside",
        "huge_smem",
        "hang",
        "fault",
    ],
)
def test_bad_candidates_are_caught(evaluators, monkeypatch, source, status, check):
    import evaluator.pipeline as pipeline

    monkeypatch.setattr(pipeline, "QUICK_TIMEOUT_S", 20.0)
    ev = evaluators("float64")
    report = ev.evaluate(source)
    assert (report.status, report.failure.check) == (status, check), report.failure
    assert report.combined_score == 0 and report.metrics()["combined_score"] == 0
    # The worker was replaced where needed: the seed still evaluates right after.
    assert ev.evaluate(SEED).status == "ok"


CHEAT_WHEN_TIMED = (
    _variant(
        'extern "C" __global__ void __launch_bounds__',
        '__device__ unsigned int kv_calls;\nextern "C" __global__ void __launch_bounds__',
    )
    .replace(
        "const int tid = warp * KV_WARP + lane;",
        "const int tid = warp * KV_WARP + lane;\n"
        "  if (tid == 0 && blockIdx.x == 0) atomicAdd(&kv_calls, 1u);",
    )
    .replace(STORE, "if (*(volatile unsigned int*)&kv_calls > 300) return; " + STORE)
)


def test_kernel_that_skips_work_only_while_timed_is_caught(evaluators, monkeypatch):
    """Correct for its first 300 launches (all of verification: about 130 launches since issue
    6's scaled, trap, containment and metamorphic inputs), then it stops storing X. Its
    launch counter is a ``__device__`` global, which the contract refuses on the cubin before
    anything runs; with that check off, the timed-output checks still catch it (a second line
    of defence for what a kernel could learn without global state, e.g. from the clock)."""
    import evaluator.pipeline as pipeline

    assert CHEAT_WHEN_TIMED.count("kv_calls") == 3 and screen(CHEAT_WHEN_TIMED, SEED) is None
    ev = evaluators("float64")
    report = ev.evaluate(CHEAT_WHEN_TIMED)
    assert (report.status, report.failure.check) == ("contract_error", "device_global_state")
    assert "kv_calls" in report.failure.detail
    monkeypatch.setattr(pipeline, "device_state_failure", lambda cubin: None)
    report = ev.evaluate(CHEAT_WHEN_TIMED)
    assert report.status == "wrong" and report.failure.check.startswith("timed_output_")
    assert report.combined_score == 0


def test_champion_checks_pass_for_the_seed():
    report = verify_champion(SEED, "trsm_small", "complex128", 0)
    assert report.status == "ok", report.failure
    spec = get_path("trsm_small")
    assert set(spec.held_out_shapes) <= set(report.verified_shapes)
    assert any("compute-sanitizer" in note for note in report.notes)


def test_replay_memo_is_refused_on_the_cubin_before_it_runs(evaluators):
    """Issue 6: a kernel that keeps each column's X in ``__device__`` memory, keyed on m, n and
    every entry of A's lower triangle and of the column of B, and replays it when the key comes
    again (16 ways per column, more than the 8 input sets the timed graphs rotated through
    then). Refused on the cubin
    compiled for this GPU: ``contract_error``, stage ``compile``, nothing run (no input drawn,
    no shape verified, nothing timed); the seed passes right after."""
    ev = evaluators("float64")
    report = ev.evaluate(REPLAY_MEMO)
    assert (report.status, report.failure.check) == ("contract_error", "device_global_state")
    assert "kv_memo" in report.failure.detail and ".nv.global" in report.failure.detail
    assert report.stage == "compile" and report.gpu is not None
    assert report.compile is not None and report.compile.arch == report.gpu.arch
    assert report.input_seeds == [] and report.verified_shapes == [] and report.timings == []
    assert report.combined_score == 0 and report.metrics()["combined_score"] == 0
    assert ev.evaluate(SEED).status == "ok"


def test_replay_memo_passes_every_run_time_check_without_the_cubin_check(evaluators, monkeypatch):
    """Why the contract is checked on the binary: with that check off, the replay memo passes.
    It replays only on an exact match of the whole problem (its key hashes every entry it
    reads), so every input it has not seen it solves right, and where inputs repeat it replays
    exact results. (Keyed on six elements, as issue 6's memo was, it false-hits between the
    containment cases, which share A's border and zero B's columns, and ``nonfinite_containment``
    refuses it: measured on the H200, docs/RESULTS.md section 16.) Should a run-time defence
    later catch the exact replay, assert that check here instead."""
    import evaluator.pipeline as pipeline

    monkeypatch.setattr(pipeline, "device_state_failure", lambda cubin: None)
    report = evaluators("float64").evaluate(REPLAY_MEMO)
    assert report.status == "ok", report.failure


def test_champion_verification_refuses_the_replay_memo():
    """The champion checks run the same pipeline first: no path around the cubin check."""
    report = verify_champion(REPLAY_MEMO, "trsm_small", "float64", 0)
    assert (report.status, report.failure.check) == ("contract_error", "device_global_state")


# Issue 6: results kept between launches, keyed on A[0] and B's first and last rows (per block:
# the block's first column), in 32 slots picked by B[0, c0]'s low bits, with a hit counter.
MEMO_DEVICE = r"""#define KV_SLOTS 32
__device__ scalar_t kv_memo_x[KV_SLOTS][KV_MAX_M * KV_MAX_M];
__device__ scalar_t kv_memo_key[KV_SLOTS][KV_MAX_M][3];
__device__ int kv_memo_mn[KV_SLOTS][KV_MAX_M][2];
__device__ unsigned int kv_hits;
__device__ __forceinline__ bool kv_same(scalar_t a, scalar_t b) {
  const real_t* p = reinterpret_cast<const real_t*>(&a);
  const real_t* q = reinterpret_cast<const real_t*>(&b);
  for (int i = 0; i < (int)(sizeof(scalar_t) / sizeof(real_t)); ++i)
    if (p[i] != q[i]) return false;
  return true;
}
extern "C" __global__ void __launch_bounds__"""
MEMO_LOOKUP = r"""const int tid = warp * KV_WARP + lane;
  const int kv_c0 = blockIdx.x * TRSM_WARPS * TRSM_COLS_PER_WARP;
  const scalar_t kv_k[3] = {A[0], B[(long)kv_c0 * ldb], B[(long)kv_c0 * ldb + m - 1]};
  const int kv_slot = (int)(reinterpret_cast<const unsigned int*>(&kv_k[1])[0] % KV_SLOTS);
  __syncthreads();  // every thread has its key before any writes B
  if (kv_memo_mn[kv_slot][blockIdx.x][0] == m && kv_memo_mn[kv_slot][blockIdx.x][1] == n &&
      kv_same(kv_memo_key[kv_slot][blockIdx.x][0], kv_k[0]) &&
      kv_same(kv_memo_key[kv_slot][blockIdx.x][1], kv_k[1]) &&
      kv_same(kv_memo_key[kv_slot][blockIdx.x][2], kv_k[2])) {
    for (int idx = tid; idx < m * TRSM_WARPS * TRSM_COLS_PER_WARP; idx += KV_WARP * TRSM_WARPS) {
      const int col = kv_c0 + idx / m;
      if (col < n) B[(long)col * ldb + idx % m] = kv_memo_x[kv_slot][col * KV_MAX_M + idx % m];
    }
    if (tid == 0) atomicAdd(&kv_hits, 1u);
    return;
  }"""
MEMO_STORE = (
    "if (row < m && col < n) { B[(long)col * ldb + row] = b[c][s]; "
    "kv_memo_x[kv_slot][col * KV_MAX_M + row] = b[c][s]; }"
)
MEMO_KEY = r"""  }
  if (tid == 0) {
    for (int i = 0; i < 3; ++i) kv_memo_key[kv_slot][blockIdx.x][i] = kv_k[i];
    kv_memo_mn[kv_slot][blockIdx.x][0] = m;
    kv_memo_mn[kv_slot][blockIdx.x][1] = n;
  }
}
// EVOLVE-BLOCK-END"""
MEMOIZING = (
    _variant('extern "C" __global__ void __launch_bounds__', MEMO_DEVICE)
    .replace("const int tid = warp * KV_WARP + lane;", MEMO_LOOKUP)
    .replace(STORE, MEMO_STORE)
    .replace("  }\n}\n// EVOLVE-BLOCK-END", MEMO_KEY)
)


def _memoizing_cubin(dtype: str) -> bytes:
    from evaluator.compile import compile_cubin

    spec = get_path("trsm_small")
    result = compile_cubin(MEMOIZING, spec.compile_options(dtype, "sm_90"), "sm_90")
    assert result.ok, result.log
    return result.cubin


def test_kernel_that_replays_kept_results_is_refused_by_the_audit_pairs(evaluators):
    """The dynamic defence alone: stage 2 is run on the compiled cubin directly, past any
    static check of the cubin (such as one refusing ``__device__`` globals) that stage 1 has."""
    from evaluator.report import EvaluationReport

    assert MEMOIZING.count("kv_memo_key") == 5 and screen(MEMOIZING, SEED) is None
    ev = evaluators("float64")
    report = ev.stage2(EvaluationReport("trsm_small", "float64"), _memoizing_cubin("float64"))
    assert (report.status, report.failure.check) == ("wrong", "replayed_result"), report.failure
    assert "audit pair" in report.failure.detail and report.combined_score == 0
    seed = ev.evaluate(SEED)
    assert seed.status == "ok" and seed.combined_score > 0, seed.failure


def test_timed_replays_never_see_the_same_inputs_twice():
    """The memoizing kernel timed on its own: it never finds a kept result (no hit in 65
    replays × 32 calls and the single calls, where the old 8 rotating sets let it hit on most
    calls), so what is timed is its real work, and its timed outputs pass the audit."""
    import cupy

    from evaluator.checks.accuracy import check_solution
    from evaluator.timing import time_shape
    from seeds.trsm_small.baseline import CublasTrsm
    from seeds.trsm_small.driver import TrsmSmallDriver

    driver = TrsmSmallDriver(_memoizing_cubin("float64"), "float64")
    module = driver.compiled.module
    found = module.get_global_var("kv_hits")  # a device address (or a MemoryPointer)
    memptr = (
        found
        if isinstance(found, cupy.cuda.MemoryPointer)
        else cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(int(found), 4, module), 0)
    )
    hits = cupy.ndarray((1,), cupy.uint32, memptr=memptr)
    baseline = CublasTrsm("float64")
    try:
        timing, _, failure = time_shape(
            64, 64, "float64", driver.solve_raw, baseline, check_solution
        )
        assert int(hits.get()[0]) == 0 and failure is None, failure
        # The same kernel on one repeated input does hit: the counter works.
        a = cupy.asarray(make_problem(64, 64, "float64", 1).a.ravel(order="F"))
        for _ in range(2):
            b = cupy.asarray(make_problem(64, 64, "float64", 1).b.ravel(order="F"))
            driver.solve_raw(a.data.ptr, b.data.ptr, 64, 64, 64, 64)
        assert int(hits.get()[0]) > 0
    finally:
        baseline.close()
    assert 0 < timing.candidate_us < 1000 and 0 < timing.baseline_us < 1000


# -- issue 6 part 3: numerics across the range ----------------------------------------------

LAUNCH_CONFIG = 'extern "C" __global__ void kernevo_launch_config'
# The complex division the prelude had before issue 6, by |a|^2, as a candidate would write it
# inside the block (the prelude itself is outside it: the screen refuses edits there).
TEXTBOOK_DIVISION = _variant(
    LAUNCH_CONFIG,
    """__device__ __forceinline__ scalar_t kv_div_textbook(scalar_t b, scalar_t a) {
  real_t d = a.re * a.re + a.im * a.im;
  return {(b.re * a.re + b.im * a.im) / d, (b.im * a.re - b.re * a.im) / d};
}
"""
    + LAUNCH_CONFIG,
).replace("x = kv_div(x, d);", "x = kv_div_textbook(x, d);")
# The seed before issue 6 updated every row at each step, the solved ones with a_ik = 0.
MASKING = _variant("if (lane + KV_WARP * s > k) b[c][s] = kv_fms", "b[c][s] = kv_fms")
# A float64 candidate that solves in float32 and refines once: X0 = solve32(B), then
# X = X0 + solve32(B - A X0), the residual in float64.
SOLVE_F32 = """__device__ __forceinline__ void kv_solve_f32(
    scalar_t (&v)[TRSM_COLS_PER_WARP][KV_ROWS_PER_LANE], const scalar_t* sA,
    const scalar_t* sDiag, int m, int lane) {
  for (int k = 0; k < m; ++k) {
    const float d = (float)sDiag[k];
    for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
      const float x = (float)kv_shfl(k >= KV_WARP ? v[c][1] : v[c][0], k & (KV_WARP - 1)) / d;
      if (lane == (k & (KV_WARP - 1))) v[c][k >= KV_WARP ? 1 : 0] = x;
      for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
        const int row = lane + KV_WARP * s;
        if (row > k && row < m) v[c][s] = (float)v[c][s] - (float)sA[k * m + row] * x;
      }
    }
  }
}
"""
REFINE_ONCE = """  scalar_t x0[TRSM_COLS_PER_WARP][KV_ROWS_PER_LANE];
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c)
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) x0[c][s] = b[c][s];
  kv_solve_f32(x0, sA, sDiag, m, lane);
  for (int k = 0; k < m; ++k) {
    for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
      const scalar_t xk = kv_shfl(k >= KV_WARP ? x0[c][1] : x0[c][0], k & (KV_WARP - 1));
      for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
        const int row = lane + KV_WARP * s;
        if (row >= k && row < m) b[c][s] -= sA[k * m + row] * xk;
      }
    }
  }
  kv_solve_f32(b, sA, sDiag, m, lane);
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c)
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) b[c][s] += x0[c][s];

"""
_SOLVE_START = SEED.index("  KV_UNROLL(TRSM_UNROLL)\n")
_SOLVE_END = SEED.rindex("#pragma unroll\n  for (int c", 0, SEED.index(STORE))
REFINED = (SEED[:_SOLVE_START] + REFINE_ONCE + SEED[_SOLVE_END:]).replace(
    LAUNCH_CONFIG, SOLVE_F32 + LAUNCH_CONFIG, 1
)


def _cubin(source: str, dtype: str) -> bytes:
    from evaluator.compile import compile_cubin

    spec = get_path("trsm_small")
    result = compile_cubin(source, spec.compile_options(dtype, "sm_90"), "sm_90")
    assert result.ok, result.log
    return result.cubin


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_textbook_complex_division_fails_scale_invariance(evaluators, dtype):
    """Right on the drawn inputs (it passes the quick check), NaN at A, B scaled by 2^67
    (complex64) or 2^532 (complex128), where |a|^2 overflows: refused at the first shape."""
    assert TEXTBOOK_DIVISION.count("kv_div_textbook") == 2
    assert screen(TEXTBOOK_DIVISION, SEED) is None
    report = evaluators(dtype).evaluate(TEXTBOOK_DIVISION)
    assert (report.status, report.failure.check) == ("wrong", "scale_invariance"), report.failure
    assert report.failure.detail.startswith("non_finite_output on A = s·A0, B = s·B0")
    assert "[scaled_up inputs, s = 2^" in report.failure.detail
    assert report.failure.shape == (1, 1) and report.combined_score == 0


def test_masking_by_zeros_fails_nonfinite_containment(evaluators):
    """The old seed's update (0·x into solved rows) passes every finite input and spreads
    A[40, 3] = +Inf into rows 0-39 of issue 6's 64×8 case."""
    assert screen(MASKING, SEED) is None
    report = evaluators("float64").evaluate(MASKING)
    assert (report.status, report.failure.check) == ("wrong", "nonfinite_containment"), (
        report.failure
    )
    assert report.failure.detail.startswith(
        "rows 0-39 do not depend on A[40, 3] = inf but fail non_finite_output"
    )
    assert "[containment inputs, A[40, 3] = inf" in report.failure.detail


def test_solving_in_float32_and_refining_once_fails_the_trap_and_the_scaled_inputs():
    """In-process, on fixed inputs, for exact assertions (through the pipeline the drawn
    bounded inputs may catch it first: they put it at ~1-3 times the bound). The trap (rows at
    2^-135, 1 and 2^100) puts it far outside the forward-error bound, named ``forward_error``;
    the scaled inputs at 2^±900 leave float32's range, ``scale_invariance``."""
    from evaluator.gpu_tasks import check_scaled, solve_checked
    from seeds.trsm_small.driver import TrsmSmallDriver

    assert screen(REFINED, SEED) is None and REFINED.count("kv_solve_f32") == 3
    driver = TrsmSmallDriver(_cubin(REFINED, "float64"), "float64")
    for m, n in [(16, 16), (64, 64)]:
        failure, x = solve_checked(driver, make_problem(m, n, "float64", 1, kind="trap"))
        assert failure is not None and failure.check == "forward_error", failure
        assert failure.value > 1e6 * failure.bound
    failure = check_scaled(driver, make_problem(33, 31, "float64", 2))
    assert failure is not None and failure.check == "scale_invariance", failure
    assert "s = 2^900" in failure.detail


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_cublas_passes_the_numerics_checks(dtype):
    """The reference library against the new checks: scaled inputs, the trap, both containment
    cases (non-finite exactly in the rows that depend on the entry) and every relation."""
    import numpy as np

    from evaluator.gpu_tasks import (
        check_containment_cases,
        check_relations,
        check_scaled,
        run_candidate,
        solve_checked,
    )
    from evaluator.inputs import containment_problem
    from seeds.trsm_small.baseline import CublasTrsm

    baseline = CublasTrsm(dtype)
    try:
        for m, n in [(1, 1), (33, 31), (64, 63)]:
            assert check_scaled(baseline, make_problem(m, n, dtype, 21)) is None
            assert check_relations(baseline, dtype, (m, n), 21) is None
        assert solve_checked(baseline, make_problem(64, 64, dtype, 21, kind="trap"))[0] is None
        assert check_containment_cases(baseline, dtype, 21) is None
        failure, x = run_candidate(baseline, containment_problem(dtype, 21))
        assert failure is None and np.isfinite(x[:40]).all()
        assert not np.isfinite(x[40:, 0]).any()
    finally:
        baseline.close()
