"""The `trsm_small_z64` path (issue 7, Build item 2): complex128 TRSM at m = 64, n ≤ 64, seeded
with the HSMA-TRSM paper's shared-memory-partitioned two-group pipeline.

CPU: the seed passes the screen, compiles with NVRTC within the paper's budget (at its
defaults and at the tunables' extremes) and holds no state that outlives a launch; the spec and
the registry agree; a NumPy emulation of the kernel's blocked algorithm, its phase schedule and
its split of B's columns over thread blocks and compute warps solves as SciPy does for every
geometry the tunables allow, writes each column of X exactly once, keeps a non-finite input
where the evaluator's containment check wants it, and never lets the two thread groups touch
one shared-memory region in the same phase. GPU (``gpu``-marked): the evaluator and the
champion verification pass the seed, sanitizers included.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from itertools import product

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
TUNABLES = {t.name: t for t in parse_tunables(SEED)}
HALF = 32  # rows of a diagonal block of A and of a B block, most columns of a B block (TZ_HALF)
SCALAR_BYTES = 16  # complex128
REGION_BYTES = HALF * HALF * SCALAR_BYTES  # one 32 x 32 complex128 block of A: 16 KB
BUDGET = 64 * 1024  # the paper's per-block shared memory


def _choices(name: str) -> list[int]:
    return [int(v) for v in TUNABLES[name].choices]


def _variant(**values: int) -> str:
    """The seed with the named tunables set (the others at their defaults)."""
    source = SEED
    for name, value in values.items():
        source = source.replace(TUNABLES[name].line, TUNABLES[name].with_value(str(value)))
    return source


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
    assert set(TUNABLES) == {
        "TZ_COMPUTE_WARPS", "TZ_CTA_COLS", "TZ_LOAD_WARPS", "TZ_LOAD_BATCH", "TZ_UNROLL",
        "TZ_INV_DIAG",
    }  # fmt: skip
    for t in TUNABLES.values():
        assert t.value in t.choices and len(t.choices) >= 2
    # The most warps a block can have stay within CUDA's 1,024 threads per block.
    most = max(_choices("TZ_COMPUTE_WARPS")) + max(_choices("TZ_LOAD_WARPS"))
    assert 32 * most <= 1024
    # Defaults for parallelism: a few columns per compute warp, several thread blocks at n = 64,
    # one reciprocal per diagonal entry instead of a division per step and column.
    assert DEFAULT.cols <= 4 and DEFAULT.grid(64) >= 4 and TUNABLES["TZ_INV_DIAG"].value == "1"


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
    # The defaults keep a thread's arrays small: no spill, well under trsm_small's 128.
    assert 0 < kernel.registers <= 128 and kernel.spill_store_bytes == 0
    # All shared memory is the dynamic one the launch config asks for (checked on the GPU).
    assert kernel.static_shared_bytes == 0
    assert device_state_failure(result.cubin) is None


# The tunables' extremes: the most registers (2 compute warps x 16 columns, one loader warp with
# 16 loads in flight, unrolled 8 times; and with a division per step, unrolled twice: unrolled 8
# times it compiles in about NVRTC's 30 s sandbox limit on a loaded machine, as the first seed's
# did) and the most threads (16 + 4 warps, 640 threads: at most 102 registers a thread fit the
# register file; at 8 columns per thread block, 8 of the 16 compute warps idle).
EXTREMES = (
    {"TZ_COMPUTE_WARPS": 2, "TZ_CTA_COLS": 64, "TZ_LOAD_WARPS": 1, "TZ_LOAD_BATCH": 16,
     "TZ_UNROLL": 8, "TZ_INV_DIAG": 1},
    {"TZ_COMPUTE_WARPS": 2, "TZ_CTA_COLS": 32, "TZ_LOAD_WARPS": 1, "TZ_LOAD_BATCH": 16,
     "TZ_UNROLL": 2, "TZ_INV_DIAG": 0},
    {"TZ_COMPUTE_WARPS": 16, "TZ_CTA_COLS": 32, "TZ_LOAD_WARPS": 4, "TZ_LOAD_BATCH": 16,
     "TZ_UNROLL": 8, "TZ_INV_DIAG": 1},
    {"TZ_COMPUTE_WARPS": 16, "TZ_CTA_COLS": 8, "TZ_LOAD_WARPS": 4, "TZ_LOAD_BATCH": 16,
     "TZ_UNROLL": 8, "TZ_INV_DIAG": 0},
)  # fmt: skip


@pytest.mark.parametrize("values", EXTREMES, ids=lambda v: "-".join(map(str, v.values())))
def test_the_tunables_extremes_compile_without_spills(values, tmp_path):
    kernel = _compiled(_variant(**values), tmp_path).resources[TRSM_SMALL_Z64.kernel_name]
    threads = 32 * (values["TZ_COMPUTE_WARPS"] + values["TZ_LOAD_WARPS"])
    assert kernel.registers <= 255 and kernel.registers * threads <= 65536
    assert kernel.spill_store_bytes == 0


def test_a_float_build_is_refused_by_the_prelude(tmp_path):
    options = [o.replace("KERNEVO_DTYPE=3", "KERNEVO_DTYPE=1") for o in
               TRSM_SMALL_Z64.compile_options("complex128", "sm_90")]  # fmt: skip
    result = compile_cubin(SEED, options, "sm_90", cache_dir=tmp_path)
    assert not result.ok and "complex128 path" in result.log


# ---- a NumPy emulation of the kernel's algorithm, schedule and geometry ---------------------


@dataclass(frozen=True)
class Geometry:
    """How the kernel splits B: ``cta_cols`` columns per thread block (TZ_CTA_COLS), streamed
    in blocks of ``bw`` columns (TZ_BW), ``cols`` consecutive ones per compute warp (TZ_COLS)."""

    compute_warps: int
    cta_cols: int

    @property
    def bw(self) -> int:
        return min(self.cta_cols, HALF)

    @property
    def cb_per_cta(self) -> int:
        return self.cta_cols // self.bw

    @property
    def cols(self) -> int:
        return self.bw // self.compute_warps if self.bw > self.compute_warps else 1

    def grid(self, n: int) -> int:
        """Thread blocks for n columns (cfg[0])."""
        return -(-n // self.cta_cols)

    def warp_columns(self) -> list[range]:
        """Per compute warp, its columns within a B block; warps past the block's ``bw``
        columns hold none (the kernel's ``computes`` is false there)."""
        starts = (w * self.cols for w in range(self.compute_warps))
        return [range(wc, wc + self.cols) if wc < self.bw else range(0) for wc in starts]

    def shared_bytes(self) -> int:
        """A11, A21, A22 and the 32 x bw B region (cfg[6])."""
        return (3 * HALF * HALF + HALF * self.bw) * SCALAR_BYTES


# The kernel's macros that Geometry models, word for word.
GEOMETRY_MACROS = (
    "#define TZ_BW (TZ_CTA_COLS < TZ_HALF ? TZ_CTA_COLS : TZ_HALF)",
    "#define TZ_CB_PER_CTA (TZ_CTA_COLS / TZ_BW)",
    "#define TZ_COLS (TZ_BW > TZ_COMPUTE_WARPS ? TZ_BW / TZ_COMPUTE_WARPS : 1)",
    "cfg[0] = (m >= 1 && m <= KV_MAX_M) ? (n + TZ_CTA_COLS - 1) / TZ_CTA_COLS : 0;",
    "const bool computes = !loader && wc < TZ_BW;",
)
DEFAULT = Geometry(int(TUNABLES["TZ_COMPUTE_WARPS"].value), int(TUNABLES["TZ_CTA_COLS"].value))
GEOMETRIES = [Geometry(w, c) for w, c in product(_choices("TZ_COMPUTE_WARPS"),
                                                 _choices("TZ_CTA_COLS"))]  # fmt: skip


class Regions:
    """The four shared-memory regions (A11, A21, A22: 32 x 32; B: 32 x ``bw``), NaN where
    nothing was stored (a read of an unloaded slot shows in the result), and who touched which
    region in the current phase."""

    def __init__(self, bw: int) -> None:
        widths = {"A11": HALF, "A21": HALF, "A22": HALF, "B": bw}
        self.data = {name: np.full((HALF, w), np.nan, np.complex128) for name, w in widths.items()}
        self.touched: dict[str, set[str]] = {"load": set(), "compute": set()}
        self.phases = 0

    def use(self, group: str, name: str) -> np.ndarray:
        self.touched[group].add(name)
        return self.data[name]

    def load_block(self, name: str, src: np.ndarray, r0: int, c0: int, rows: int) -> None:
        """Loading group: ``rows`` rows from r0 and up to the region's width of columns from c0
        of ``src``, zero outside (tz_load, not TRIANGLE)."""
        dst = self.use("load", name)
        dst[:] = 0
        part = src[r0 : r0 + rows, c0 : c0 + dst.shape[1]]
        dst[: part.shape[0], : part.shape[1]] = part

    def load_triangle(self, name: str, a: np.ndarray, off: int, rows: int, inv_diag: bool) -> None:
        """Loading group: the lower triangle of A's diagonal block at (off, off), ``rows`` rows,
        with 1/a_kk on the diagonal under ``inv_diag``; the strict upper part of the region stays
        unloaded (tz_load, TRIANGLE)."""
        lower = np.tril_indices(rows)
        dst = self.use("load", name)
        dst[lower] = a[off : off + rows, off : off + rows][lower]
        if inv_diag:
            diag = np.arange(rows)
            dst[diag, diag] = 1 / dst[diag, diag]

    def barrier(self) -> None:
        """End of a phase: the groups must not have shared a region (a race without it)."""
        shared = self.touched["load"] & self.touched["compute"]
        assert not shared, f"phase {self.phases}: both groups touch {sorted(shared)}"
        self.touched = {"load": set(), "compute": set()}
        self.phases += 1


def _substitute(lower: np.ndarray, v: np.ndarray, rows: int, inv_diag: bool) -> None:
    """Right-looking forward substitution on rows 0..rows-1 of v in place: step k scales row k
    by the diagonal slot (1/a_kk under ``inv_diag``, else a_kk divides), then updates only the
    rows below k (the kernel's tz_solve)."""
    for k in range(rows):
        v[k] = v[k] * lower[k, k] if inv_diag else v[k] / lower[k, k]
        v[k + 1 : rows] -= np.outer(lower[k + 1 : rows, k], v[k])


@dataclass
class Run:
    """What :func:`emulate` leaves: X, the barriers each thread block passed, and how often
    each column's top and bottom rows were stored."""

    x: np.ndarray
    phases: list[int]
    top_stores: np.ndarray
    bottom_stores: np.ndarray


def emulate(
    a: np.ndarray, b: np.ndarray, geometry: Geometry = DEFAULT, inv_diag: bool = True
) -> Run:
    """X = A⁻¹·B as the seed computes it: per thread block, A11, A21, A22 and one B block in
    their regions; per column block X_top = A11⁻¹ B_top, B_bot −= A21 X_top, X_bot = A22⁻¹
    B_bot, in the kernel's phases, each compute warp storing only its own columns. ``a`` m×m,
    ``b`` m×n complex128, 1 ≤ m ≤ 64."""
    m, n = b.shape
    mt, mb = min(m, HALF), m - HALF
    bw = geometry.bw
    out = b.copy(order="F")
    run = Run(out, [], np.zeros(n, int), np.zeros(n, int))

    def store(rows: slice, col0: int, v: np.ndarray, count: np.ndarray) -> None:
        for owned in geometry.warp_columns():
            for c in owned:
                if col0 + c < n:
                    out[rows, col0 + c] = v[: rows.stop - rows.start, c]
                    count[col0 + c] += 1

    with np.errstate(all="ignore"):
        for cta in range(geometry.grid(n)):
            cta_col0 = cta * geometry.cta_cols
            regions = Regions(bw)
            blocks = min(geometry.cb_per_cta, -(-(n - cta_col0) // bw))

            regions.load_triangle("A11", a, 0, mt, inv_diag)  # phase 1
            regions.load_block("B", out, 0, cta_col0, mt)
            regions.barrier()
            for cb in range(blocks):
                col0 = cta_col0 + cb * bw
                x = regions.use("compute", "B").copy()  # phase 2
                regions.barrier()
                _substitute(regions.use("compute", "A11"), x, mt, inv_diag)  # phase 3
                store(slice(0, mt), col0, x, run.top_stores)
                if mb > 0:
                    regions.load_block("B", out, HALF, col0, mb)
                    if cb == 0:
                        regions.load_block("A21", a, HALF, 0, mb)
                        regions.load_triangle("A22", a, HALF, mb, inv_diag)
                regions.barrier()
                if mb > 0:
                    bot = regions.use("compute", "B").copy()  # phase 4
                    regions.barrier()
                    a21 = regions.use("compute", "A21")  # phase 5
                    for k in range(HALF):
                        bot -= np.outer(a21[:, k], x[k])
                    _substitute(regions.use("compute", "A22"), bot, mb, inv_diag)
                    store(slice(HALF, m), col0, bot, run.bottom_stores)
                if cb + 1 < blocks:
                    regions.load_block("B", out, 0, col0 + bw, mt)
                    regions.barrier()
            run.phases.append(regions.phases)
    return run


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("shape", TRSM_SMALL_Z64.verify_shapes + TRSM_SMALL_Z64.held_out_shapes)
def test_emulation_solves_as_scipy_and_passes_the_evaluators_checks(shape, seed):
    problem = make_problem(*shape, "complex128", seed)
    assert np.isnan(problem.a[0, -1])  # the strict upper triangle holds NaN
    x = emulate(problem.a, problem.b).x
    expected = solve_triangular(np.tril(np.nan_to_num(problem.a)), problem.b, lower=True)
    np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)
    assert accuracy.check_solution(problem, x) is None


def test_the_emulations_geometry_is_the_kernels():
    missing = [macro for macro in GEOMETRY_MACROS if macro not in SEED]
    assert not missing


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=repr)
def test_every_geometry_stores_each_column_once_and_solves(geometry):
    """Every pair of TZ_COMPUTE_WARPS and TZ_CTA_COLS (the offline mutator moves each alone):
    at every n each column's top and bottom rows are stored by exactly one warp of one thread
    block (none outside B, idle warps none), and X is right at a ragged and a full n."""
    for n in range(1, 65):
        run = emulate(np.eye(64, dtype=np.complex128), np.ones((64, n), np.complex128), geometry)
        assert (run.top_stores == 1).all() and (run.bottom_stores == 1).all(), n
    for n, inv_diag in [(37, True), (64, False)]:
        problem = make_problem(64, n, "complex128", 4)
        x = emulate(problem.a, problem.b, geometry, inv_diag).x
        assert accuracy.check_solution(problem, x) is None, (n, inv_diag)


@pytest.mark.parametrize("geometry", [DEFAULT, Geometry(2, 64), Geometry(16, 8)], ids=repr)
def test_emulation_at_the_evaluators_fixed_shapes_below_m_64(geometry):
    """The 4×4 audit pair, the scale sweep's and the sanitizers' shapes have m < 64: the
    kernel must stay right there although the path serves m = 64 only."""
    problems = [*issue_pair("complex128")]
    shapes = (SWEEP_SHAPE, (33, 31), (64, 33))
    problems += [make_problem(*shape, "complex128", 5) for shape in shapes]
    for problem in problems:
        x = emulate(problem.a, problem.b, geometry).x
        assert accuracy.check_solution(problem, x) is None, problem.shape


@pytest.mark.parametrize("inv_diag", [True, False])
@pytest.mark.parametrize("seed", [7, 8])
def test_emulation_contains_non_finite_inputs(seed, inv_diag):
    for case in containment_cases("complex128", seed):
        x = emulate(case.problem.a, case.problem.b, inv_diag=inv_diag).x
        assert check_containment(case.problem, case.entry, x, case.matrix) is None, case.where()


@pytest.mark.parametrize(
    ("m", "n", "cta_cols", "phases"),
    [(64, 16, 8, [4, 4]), (64, 33, 64, [8]), (64, 64, 64, [8]), (64, 64, 32, [4, 4]),
     (64, 33, 32, [4, 4]), (32, 40, 64, [6]), (20, 9, 8, [3, 3])],
)  # fmt: skip
def test_schedule_has_the_kernels_phase_count(m, n, cta_cols, phases):
    """Barriers per thread block: after phase 1, then after phases 2-4 of each column block
    (phase 4 only with a bottom half, m > 32) and after its phase 5 unless it is the last (the
    next block's top is loaded there)."""
    problem = make_problem(m, n, "complex128", 11)
    assert emulate(problem.a, problem.b, Geometry(4, cta_cols)).phases == phases


def test_regions_stay_within_the_papers_budget():
    """A11, A21, A22 take 48 KB; the B region 32 x TZ_BW, at most 16 KB: 52-64 KB."""
    assert 4 * REGION_BYTES == BUDGET
    assert all(3 * REGION_BYTES < g.shared_bytes() <= BUDGET for g in GEOMETRIES)
    assert "cfg[6] = (3 * TZ_TILE + TZ_B_TILE) * (int)sizeof(scalar_t);" in SEED


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
def test_launch_geometry_is_the_tunables_and_within_the_papers_budget(tmp_path):
    import cupy

    from seeds.driver import GeometryError

    driver = TRSM_SMALL_Z64.driver(_compiled(SEED, tmp_path).cubin, "complex128")
    threads = 32 * (DEFAULT.compute_warps + int(TUNABLES["TZ_LOAD_WARPS"].value))
    for n in (1, 16, 33, 64):
        geometry = driver.geometry(64, n)
        assert geometry.block == (threads, 1, 1) and geometry.grid == (DEFAULT.grid(n), 1, 1)
        assert geometry.shared_bytes == DEFAULT.shared_bytes() <= BUDGET
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
    half of one row: racecheck would never see the barriers between column blocks. (64, 33)
    has both halves and, at every TZ_CTA_COLS, a ragged last thread block; at 64 columns per
    thread block, two column blocks in one."""
    from types import SimpleNamespace

    from evaluator.champion import sanitizer_plan
    from evaluator.new_best import memcheck_shapes

    spec = registry.get_path("trsm_small_z64")
    assert spec.sanitizer_shape == (64, 33) and spec.serves(*spec.sanitizer_shape)
    assert memcheck_shapes(spec) == [(64, 33), (64, 64)]
    plan = sanitizer_plan(SimpleNamespace(spec=spec))  # type: ignore[arg-type]
    assert {shape for tool, shape in plan if tool != "memcheck"} == {(64, 33)}
    assert registry.get_path("trsm_small").sanitizer_shape == (33, 31)
    m, n = spec.sanitizer_shape
    assert m > HALF and all(n % cta_cols for cta_cols in _choices("TZ_CTA_COLS"))
    identity, ones = np.eye(m, dtype=np.complex128), np.ones((m, n), np.complex128)
    assert emulate(identity, ones, Geometry(4, 64)).phases == [8]
