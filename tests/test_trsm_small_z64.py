"""The `trsm_small_z64` path (issue 7, Build item 2): complex128 TRSM at m = 64, n ≤ 64, seeded
with the HSMA-TRSM paper's shared-memory-partitioned two-group pipeline.

CPU: the seed passes the screen, compiles with NVRTC within the paper's budget and holds no
state that outlives a launch; the spec and the registry agree; a NumPy emulation of the
kernel's blocked algorithm and phase schedule solves as SciPy does, keeps a non-finite input
where the evaluator's containment check wants it, and never lets the two thread groups touch
one shared-memory region in the same phase. GPU (``gpu``-marked): the evaluator and the
champion verification pass the seed, sanitizers included.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from evaluator.checks import accuracy
from evaluator.checks.containment import check_containment
from evaluator.checks.device_state import device_state_failure
from evaluator.checks.replay import issue_pair
from evaluator.compile import compile_cubin
from evaluator.inputs import SWEEP_SHAPE, containment_cases, make_problem
from evaluator.screen import screen
from seeds import registry
from seeds.spec import resolve
from seeds.trsm_small.baseline import CublasTrsm
from seeds.trsm_small.driver import TrsmSmallDriver
from seeds.trsm_small_z64.spec import TRSM_SMALL_Z64
from seeds.tunables import parse_tunables

SEED = TRSM_SMALL_Z64.seed_source()
HALF = 32  # rows of a diagonal block of A, columns of a B block (TZ_HALF)
REGION_BYTES = HALF * HALF * 16  # one 32 x 32 complex128 block: 16 KB
BUDGET = 64 * 1024  # the paper's per-block shared memory


# ---- the spec and the registry ------------------------------------------------------------


def test_registry_holds_the_path_with_its_parts():
    assert registry.get_path("trsm_small_z64") is TRSM_SMALL_Z64
    assert TRSM_SMALL_Z64.dtypes == ("complex128",) and TRSM_SMALL_Z64.op == "trsm"
    assert resolve(TRSM_SMALL_Z64.driver_factory) is TrsmSmallDriver
    assert resolve(TRSM_SMALL_Z64.baseline_factory) is CublasTrsm
    assert accuracy.solution_check(TRSM_SMALL_Z64.reference_check) is accuracy.check_solution
    other_buckets = {s.shape_bucket for s in registry.PATHS.values() if s is not TRSM_SMALL_Z64}
    assert TRSM_SMALL_Z64.shape_bucket not in other_buckets


def test_envelope_is_m_64_and_n_up_to_64():
    serves = TRSM_SMALL_Z64.serves
    assert all(serves(64, n) for n in range(1, 65))
    assert not any(serves(m, n) for m, n in [(63, 5), (1, 1), (33, 31), (65, 1), (64, 65), (64, 0)])


def test_every_shape_set_is_inside_the_envelope_and_held_out_is_apart():
    spec = TRSM_SMALL_Z64
    sets = (spec.quick_shapes, spec.verify_shapes, spec.timed_shapes, spec.held_out_shapes)
    assert all(spec.serves(m, n) for shapes in sets for m, n in shapes)
    assert {n for _, n in spec.verify_shapes} >= {1, 2, 7, 31, 33, 63, 64}
    assert spec.timed_shapes == ((64, 16), (64, 48), (64, 64))
    scored = set(spec.quick_shapes) | set(spec.verify_shapes) | set(spec.timed_shapes)
    assert not set(spec.held_out_shapes) & scored


def test_seed_declares_its_tunables_inside_the_block():
    tunables = {t.name: t for t in parse_tunables(SEED)}
    assert set(tunables) == {"TZ_CB_PER_CTA", "TZ_UNROLL", "TZ_INV_DIAG"}
    for t in tunables.values():
        assert t.value in t.choices and len(t.choices) >= 2


# ---- the seed through the screen, NVRTC and the device-state check ----------------------


def test_seed_passes_the_screen():
    assert screen(SEED, SEED) is None


def _compiled(source: str, tmp_path: pathlib.Path):
    result = compile_cubin(
        source, TRSM_SMALL_Z64.compile_options("complex128", "sm_90"), "sm_90", cache_dir=tmp_path
    )
    assert result.ok, result.log
    return result


def test_seed_compiles_within_the_register_and_shared_memory_budget(tmp_path):
    result = _compiled(SEED, tmp_path)
    kernel = result.resources[TRSM_SMALL_Z64.kernel_name]
    assert 0 < kernel.registers <= 255 and kernel.spill_store_bytes == 0
    # All shared memory is the dynamic 64 KB the launch config asks for (checked on the GPU).
    assert kernel.static_shared_bytes == 0
    assert device_state_failure(result.cubin) is None


def test_heaviest_tunable_setting_compiles_without_spills(tmp_path):
    """Unroll 8 with a division per step: the most registers of the tunables' product."""
    source = SEED
    for t in parse_tunables(SEED):
        value = {"TZ_UNROLL": "8", "TZ_INV_DIAG": "0", "TZ_CB_PER_CTA": "2"}[t.name]
        source = source.replace(t.line, t.with_value(value))
    kernel = _compiled(source, tmp_path).resources[TRSM_SMALL_Z64.kernel_name]
    assert kernel.registers <= 255 and kernel.spill_store_bytes == 0


def test_a_float_build_is_refused_by_the_prelude(tmp_path):
    options = [o.replace("KERNEVO_DTYPE=3", "KERNEVO_DTYPE=1") for o in
               TRSM_SMALL_Z64.compile_options("complex128", "sm_90")]  # fmt: skip
    result = compile_cubin(SEED, options, "sm_90", cache_dir=tmp_path)
    assert not result.ok and "complex128 path" in result.log


# ---- a NumPy emulation of the kernel's algorithm and schedule ----------------------------


class Regions:
    """The four 16 KB shared-memory regions, NaN where nothing was stored (a read of an
    unloaded slot shows in the result), and who touched which region in the current phase."""

    def __init__(self) -> None:
        self.data = {name: np.full((HALF, HALF), np.nan, np.complex128)
                     for name in ("A11", "A21", "A22", "B")}  # fmt: skip
        self.touched: dict[str, set[str]] = {"load": set(), "compute": set()}
        self.phases = 0

    def use(self, group: str, name: str) -> np.ndarray:
        self.touched[group].add(name)
        return self.data[name]

    def load_block(self, name: str, src: np.ndarray, r0: int, c0: int, rows: int) -> None:
        """Loading group: ``rows`` rows from r0 and up to 32 columns from c0 of ``src``, zero
        outside (tz_load_block)."""
        dst = self.use("load", name)
        dst[:] = 0
        part = src[r0 : r0 + rows, c0 : c0 + HALF]
        dst[: part.shape[0], : part.shape[1]] = part

    def load_triangle(self, name: str, a: np.ndarray, off: int, rows: int) -> None:
        """Loading group: the lower triangle of A's diagonal block at (off, off), ``rows`` rows;
        the strict upper part of the region stays unloaded (tz_load_triangle)."""
        lower = np.tril_indices(rows)
        self.use("load", name)[lower] = a[off : off + rows, off : off + rows][lower]

    def barrier(self) -> None:
        """End of a phase: the groups must not have shared a region (a race without it)."""
        shared = self.touched["load"] & self.touched["compute"]
        assert not shared, f"phase {self.phases}: both groups touch {sorted(shared)}"
        self.touched = {"load": set(), "compute": set()}
        self.phases += 1


def _substitute(lower: np.ndarray, v: np.ndarray, rows: int) -> None:
    """Right-looking forward substitution on rows 0..rows-1 of v in place: step k updates only
    the rows below k (the kernel's tz_solve)."""
    for k in range(rows):
        v[k] = v[k] / lower[k, k]
        v[k + 1 : rows] -= np.outer(lower[k + 1 : rows, k], v[k])


def emulate(a: np.ndarray, b: np.ndarray, cb_per_cta: int = 2) -> tuple[np.ndarray, int]:
    """X = A⁻¹·B as the seed computes it: per thread block (``cb_per_cta`` 32-column blocks),
    A11, A21, A22 and one B block in 32×32 regions; per column block X_top = A11⁻¹ B_top,
    B_bot −= A21 X_top, X_bot = A22⁻¹ B_bot, in the kernel's phases. ``a`` m×m, ``b`` m×n
    complex128, 1 ≤ m ≤ 64. Returns X and the barriers the last thread block passed."""
    m, n = b.shape
    mt, mb = min(m, HALF), m - HALF
    out = b.copy(order="F")
    regions = Regions()
    with np.errstate(all="ignore"):
        for cta_col0 in range(0, n, HALF * cb_per_cta):
            regions = Regions()
            blocks = min(cb_per_cta, -(-(n - cta_col0) // HALF))

            regions.load_triangle("A11", a, 0, mt)
            regions.load_block("B", out, 0, cta_col0, mt)
            regions.barrier()
            for cb in range(blocks):
                col0 = cta_col0 + cb * HALF
                cols = min(HALF, n - col0)
                x = regions.use("compute", "B").copy()  # phase 2
                if cb == 0 and mb > 0:
                    regions.load_block("A21", a, HALF, 0, mb)
                regions.barrier()
                _substitute(regions.use("compute", "A11"), x, mt)  # phase 3
                out[:mt, col0 : col0 + cols] = x[:mt, :cols]
                if mb > 0:
                    regions.load_block("B", out, HALF, col0, mb)
                    if cb == 0:
                        regions.load_triangle("A22", a, HALF, mb)
                regions.barrier()
                if mb > 0:
                    bot = regions.use("compute", "B").copy()  # phase 4
                    regions.barrier()
                    a21 = regions.use("compute", "A21")  # phase 5
                    for k in range(HALF):
                        bot[:mb] -= np.outer(a21[:mb, k], x[k])
                    _substitute(regions.use("compute", "A22"), bot, mb)
                    out[HALF:m, col0 : col0 + cols] = bot[:mb, :cols]
                if cb + 1 < blocks:
                    regions.load_block("B", out, 0, col0 + HALF, mt)
                    regions.barrier()
    return out, regions.phases


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("shape", TRSM_SMALL_Z64.verify_shapes + TRSM_SMALL_Z64.held_out_shapes)
def test_emulation_solves_as_scipy_and_passes_the_evaluators_checks(shape, seed):
    problem = make_problem(*shape, "complex128", seed)
    assert np.isnan(problem.a[0, -1])  # the strict upper triangle holds NaN
    x, _ = emulate(problem.a, problem.b)
    expected = solve_triangular(np.tril(np.nan_to_num(problem.a)), problem.b, lower=True)
    np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)
    assert accuracy.check_solution(problem, x) is None


@pytest.mark.parametrize("cb_per_cta", [1, 2])
def test_emulation_at_the_evaluators_fixed_shapes_below_m_64(cb_per_cta):
    """The 4×4 audit pair, the scale sweep's and the sanitizers' shapes have m < 64: the
    kernel must stay right there although the path serves m = 64 only."""
    problems = [*issue_pair("complex128")]
    shapes = (SWEEP_SHAPE, (33, 31), (64, 33))
    problems += [make_problem(*shape, "complex128", 5) for shape in shapes]
    for problem in problems:
        x, _ = emulate(problem.a, problem.b, cb_per_cta)
        assert accuracy.check_solution(problem, x) is None, problem.shape


@pytest.mark.parametrize("seed", [7, 8])
def test_emulation_contains_non_finite_inputs(seed):
    for case in containment_cases("complex128", seed):
        x, _ = emulate(case.problem.a, case.problem.b)
        assert check_containment(case.problem, case.entry, x, case.matrix) is None, case.where()


@pytest.mark.parametrize(
    ("n", "cb_per_cta", "phases"), [(16, 2, 4), (33, 2, 8), (64, 2, 8), (64, 1, 4), (32, 1, 4)]
)
def test_schedule_has_the_kernels_phase_count(n, cb_per_cta, phases):
    """Barriers of one thread block: after phase 1, then after phases 2-4 of each column block
    and after its phase 5 unless it is the last (the next block's top is loaded there)."""
    problem = make_problem(64, n, "complex128", 11)
    assert emulate(problem.a, problem.b, cb_per_cta)[1] == phases


def test_regions_fill_the_papers_budget():
    assert 4 * REGION_BYTES == BUDGET
    assert "cfg[6] = 4 * TZ_TILE * (int)sizeof(scalar_t);" in SEED


# ---- on the GPU ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def z64_evaluator():
    from evaluator.pipeline import Evaluator

    ev = Evaluator("trsm_small_z64", "complex128", gpu_index=0)
    yield ev
    ev.close()


@pytest.mark.gpu
def test_seed_is_verified_and_timed(z64_evaluator):
    report = z64_evaluator.evaluate(SEED)
    assert report.status == "ok", report.failure
    assert set(TRSM_SMALL_Z64.verify_shapes) <= set(report.verified_shapes)
    assert [(t.m, t.n) for t in report.timings] == list(TRSM_SMALL_Z64.timed_shapes)
    for t in report.timings:
        assert 0 < t.candidate_us < 1000 and 0 < t.baseline_us < 1000
    assert report.combined_score > 0


@pytest.mark.gpu
def test_launch_geometry_is_two_groups_in_the_papers_budget(tmp_path):
    import cupy

    from seeds.driver import GeometryError

    driver = TRSM_SMALL_Z64.driver(_compiled(SEED, tmp_path).cubin, "complex128")
    for n, grid in [(1, 1), (64, 1), (65, 2)]:
        geometry = driver.geometry(64, n)
        assert geometry.block == (128, 1, 1) and geometry.grid == (grid, 1, 1)
        assert geometry.shared_bytes == BUDGET
    with pytest.raises(GeometryError):
        driver.geometry(65, 1)
    problem = make_problem(64, 64, "complex128", 3)
    a, b = cupy.asarray(problem.a, order="F"), cupy.asarray(problem.b, order="F")
    x = driver.solve(a, b).get()
    assert accuracy.check_solution(problem, x) is None


@pytest.mark.gpu
def test_champion_checks_pass_for_the_seed():
    from evaluator.champion import verify_champion

    report = verify_champion(SEED, "trsm_small_z64", "complex128", 0)
    assert report.status == "ok", report.failure
    assert set(TRSM_SMALL_Z64.held_out_shapes) <= set(report.verified_shapes)
    assert {"racecheck", "synccheck"} <= set(report.sanitizer_shapes)


def test_the_sanitizers_run_where_every_hand_over_of_the_pipeline_is_crossed():
    """33x31 (trsm_small's ragged shape) would give this path one column block and a bottom
    half of one row: racecheck would never see the barriers between column blocks."""
    from types import SimpleNamespace

    from evaluator.champion import sanitizer_plan
    from evaluator.new_best import memcheck_shapes

    spec = registry.get_path("trsm_small_z64")
    assert spec.sanitizer_shape == (64, 33) and spec.serves(*spec.sanitizer_shape)
    assert memcheck_shapes(spec) == [(64, 33), (64, 64)]
    plan = sanitizer_plan(SimpleNamespace(spec=spec))  # type: ignore[arg-type]
    assert {shape for tool, shape in plan if tool != "memcheck"} == {(64, 33)}
    assert registry.get_path("trsm_small").sanitizer_shape == (33, 31)
