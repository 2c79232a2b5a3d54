"""The op ``trsm_batched`` and its path ``trsm_small_batched`` without a GPU (issue 11, item 3):
the op's shapes and operands, the seed compiled by NVRTC in every dtype, the loader's call
adapter on fakes, and the suite's own code (guarded problems, raw pointers, buffers read back
and judged, the timing's audit) run on host memory (``tests/ops_host.py``) with a right driver
and with the two red-team faults, each refused by the check named. On a GPU:
``tests/test_trsm_batched_gpu.py``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest
from ops_host import at_address, host_cupy

from evaluator.checks import accuracy
from evaluator.inputs import CounterRng
from evaluator.op_suites import suite_for
from evaluator.timing import SetLayout
from evaluator.trsm_batched_inputs import draw_sets, make_problem
from evaluator.trsm_batched_suite import TrsmBatchedSuite
from evaluator.trsm_batched_timing import audit_outputs, bytes_moved, timing_plan
from seeds import ops, registry
from seeds.ops import ShapeError
from seeds.ops.trsm_batched import TRSM_BATCHED, TrsmBatchedCall, check_operands
from seeds.solve_tri.reference import forward_substitution
from seeds.spec import DTYPES
from seeds.trsm_small_batched.spec import TRSM_SMALL_BATCHED

CHECK = accuracy.solution_check(TRSM_SMALL_BATCHED.reference_check)
SPEC = TRSM_SMALL_BATCHED

# --- the op --------------------------------------------------------------------------------------


def test_the_op_is_registered_with_its_three_parameters_and_the_path_routes():
    assert ops.get_op("trsm_batched") is TRSM_BATCHED
    assert TRSM_BATCHED.param_names == ("m", "n", "batch")
    assert TRSM_BATCHED.dtypes == DTYPES
    assert "batch" in ops.param_names() and ops.ops_with_param("batch") == ["trsm_batched"]
    assert ops.ops_with_param("m") == ["trsm", "trsm_batched"]
    for dtype in DTYPES:
        assert registry.route("trsm_batched", dtype, 64, 16, 1000) == [
            registry.Route("trsm_small_batched", "m64n64")
        ]
    assert registry.route("trsm", "float32", 64, 64) != []  # trsm's routes are not this path's
    assert all(r.path_id != "trsm_small_batched" for r in registry.route("trsm", "float32", 8, 8))
    assert TRSM_BATCHED.describe((16, 7, 3)) == "3 x (A 16x16, B 16x7)"


@pytest.mark.parametrize(
    ("shape", "param", "kind"),
    [((65, 16, 1), "m", "range"), ((16, 0, 1), "n", "range"), ((16, 16, 0), "batch", "range"),
     ((16, 16, 2**31), "batch", "range"), ((16, 16), None, "relation")],
)  # fmt: skip
def test_shapes_outside_the_small_regime_are_refused_naming_the_parameter(shape, param, kind):
    with pytest.raises(ShapeError) as refused:
        TRSM_BATCHED.check_shape(shape)
    assert (refused.value.param, refused.value.kind) == (param, kind)
    assert TRSM_BATCHED.check_shape((64, 64, 2**31 - 1)) == (64, 64, 2**31 - 1)
    with pytest.raises(ShapeError, match="trsm_batched needs batch"):
        TRSM_BATCHED.shape_from({"m": 4, "n": 4})


def test_the_paths_shapes_are_the_briefs():
    sizes = {1, 7, 16, 33, 48, 64}
    assert all(m in sizes and n in sizes for m, n, _ in SPEC.verify_shapes)
    assert {batch for _, _, batch in SPEC.verify_shapes} == {1, 3, 1000}
    assert SPEC.timed_shapes == ((16, 16, 1000), (32, 32, 1000), (64, 64, 1000), (64, 16, 1000))
    assert all(SPEC.serves(*s) for s in (*SPEC.verify_shapes, *SPEC.held_out_shapes))
    assert not SPEC.serves(65, 1, 1) and not SPEC.serves(1, 65, 1)
    assert SPEC.dtypes == DTYPES and suite_for(SPEC.op).problem_checks[0] == "launch_geometry"


class Device:
    def __init__(self, index: int) -> None:
        self.id = index


class FakeArray:
    """What the op's call reads of a CuPy array: shape, dtype, flags, device."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "float32", *, c: bool = True,
                 device: int = 0) -> None:  # fmt: skip
        self.shape, self.ndim, self.dtype = shape, len(shape), np.dtype(dtype)
        self.flags = types.SimpleNamespace(c_contiguous=c)
        self.device = Device(device)


@pytest.mark.parametrize(
    ("a", "b", "error", "words"),
    [
        (np.zeros((2, 4, 4)), FakeArray((2, 4, 3)), TypeError, "expected CuPy arrays"),
        (FakeArray((2, 4, 4)), FakeArray((2, 4, 3), device=1), TypeError, "device 1"),
        (FakeArray((2, 4, 5)), FakeArray((2, 4, 3)), ValueError, "(batch, m, m)"),
        (FakeArray((2, 4, 4)), FakeArray((3, 4, 3)), ValueError, "(batch, m, n) = (2, 4, n)"),
        (FakeArray((1, 65, 65)), FakeArray((1, 65, 3)), ValueError, "m, n <= 64"),
        (FakeArray((2, 4, 4)), FakeArray((2, 4, 3), "int32"), TypeError, "float32/64"),
        (FakeArray((2, 4, 4), "complex64"), FakeArray((2, 4, 3)), TypeError, "in place"),
    ],
)  # fmt: skip
def test_operands_that_are_no_batch_of_small_systems_are_refused(a, b, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_operands(a, b)


class Recorder:
    """A path driver recording its ``solve`` calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
        self.calls.append((a, b))
        return b


def test_the_loaders_call_dispatches_packed_arrays_of_its_dtype_to_the_kernel():
    call = TrsmBatchedCall()
    a, b = FakeArray((5, 8, 8), "float64"), FakeArray((5, 8, 3), "float64")
    assert call.shape(a, b) == (8, 3, 5)
    assert call.kernel_ready("float64", 0, a, b)
    assert not call.kernel_ready("float32", 0, a, b)  # another dtype: cuBLAS
    assert not call.kernel_ready("float64", 1, a, b)  # another device
    strided = FakeArray((5, 8, 3), "float64", c=False)
    assert not call.kernel_ready("float64", 0, a, strided)  # not packed: cuBLAS
    driver = Recorder()
    assert call.run(driver, a, b) is b and driver.calls == [(a, b)]
    host = np.arange(6.0).reshape(1, 2, 3)
    snapshot = call.snapshot(None, host)
    host[...] = 0
    call.restore(snapshot, None, host)
    assert host.ravel().tolist() == [0, 1, 2, 3, 4, 5]


# --- the seed ------------------------------------------------------------------------------------


# Compiled in every dtype, without spills, by tests/test_evaluator_compile.py (every path's seed).


# --- the suite on the host ---------------------------------------------------------------------


@pytest.fixture
def on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy in CuPy's place for the suite's ``import cupy``."""
    monkeypatch.setitem(sys.modules, "cupy", host_cupy())


class HostTrsmBatched:
    """A trsm_batched driver on host addresses: X_i = A_i⁻¹·B_i in float64 or complex128,
    rounded to the dtype. ``fault``: ``first_batch_a`` (every batch index solved with A_0: a
    kernel that never offsets A by the batch index) or ``batch_tile`` (matrices taken in tiles of
    4 with no bound on the last tile: right only when 4 divides the batch, else it solves and
    writes matrices past the batch, into B's guard band)."""

    def __init__(self, dtype: str, fault: str | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.fault = fault
        self.calls: list[tuple[int, int, int]] = []

    def solve_raw(self, a_ptr: int, b_ptr: int, m: int, n: int, batch: int, stream: Any = None):
        self.calls.append((m, n, batch))
        count = -(-batch // 4) * 4 if self.fault == "batch_tile" else batch
        item = self.dtype.itemsize
        a = at_address(a_ptr, (count, m, m), (m * m * item, m * item, item), self.dtype)
        b = at_address(b_ptr, (count, m, n), (m * n * item, n * item, item), self.dtype)
        if self.fault == "first_batch_a":
            a = np.broadcast_to(a[:1], a.shape)
        # batch_tile solves the matrices past the batch from the guard band's signaling NaNs and
        # stores what the arithmetic makes of them: a quiet NaN, the payload kept (NumPy does
        # what the H200's float64 units do, RESULTS 24), so the band's bytes change.
        with np.errstate(invalid="ignore"):
            b[...] = forward_substitution(a, b).astype(self.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_right_driver_passes_the_suite_at_small_verified_shapes(dtype, on_the_host):
    shapes = [s for s in SPEC.verify_shapes if s[2] <= 3] + [(7, 16, 40)]
    failure, passed = TrsmBatchedSuite().verify(
        HostTrsmBatched(dtype), SPEC, dtype, shapes, [11, 12], True, CHECK
    )
    assert failure is None and passed == shapes
    suite = TrsmBatchedSuite()
    driver = HostTrsmBatched(dtype)
    assert suite.determinism(driver, SPEC, dtype, [(16, 7, 3)], 3) is None
    assert driver.calls == [(16, 7, 3)] * 3


@pytest.mark.parametrize(
    ("fault", "shape", "check", "where"),
    [
        # Red team: batch 0's A for every batch index.
        ("first_batch_a", (7, 5, 3), "row_relative_error", "batch index 1"),
        # Red team: right only when the batch is a multiple of its per-block batch tile (4).
        ("batch_tile", (7, 5, 3), "out_of_bounds_write", "a guard band around B"),
    ],
)  # fmt: skip
def test_the_red_team_kernels_are_refused_by_the_check_named(
    fault, shape, check, where, on_the_host
):
    failure, passed = TrsmBatchedSuite().verify(
        HostTrsmBatched("float64", fault), SPEC, "float64", [shape], [3], False, CHECK
    )
    assert failure is not None and passed == []
    assert (failure.check, failure.shape) == (check, shape)
    assert where in failure.detail and "m=7, n=5, batch=3" in failure.detail
    assert "[bounded inputs, seed 3]" in failure.detail
    # The tiled kernel is right where 4 divides the batch: only the batch of 3 refuses it.
    if fault == "batch_tile":
        assert TrsmBatchedSuite().verify(
            HostTrsmBatched("float64", fault), SPEC, "float64", [(7, 5, 8)], [3], False, CHECK
        ) == (None, [(7, 5, 8)])


def test_problems_differ_in_every_batch_index_and_hide_nan_in_the_upper_triangle():
    problem = make_problem((16, 7, 3), "complex64", 5)
    assert problem.a.dtype == np.complex64 and problem.shape == (16, 7, 3)
    rows = np.arange(16)
    assert np.isnan(problem.a[:, rows[:, None] < rows[None, :]].real).all()
    diagonal = np.abs(problem.a[:, rows, rows])
    assert ((diagonal >= 1 - 1e-6) & (diagonal <= 2 + 1e-6)).all()
    assert not np.array_equal(problem.a[0], problem.a[1])
    assert not np.array_equal(problem.b[1], problem.b[2])
    a_buffer, b_buffer = problem.buffers()
    a_layout, _ = problem.layouts
    assert np.isnan(a_buffer[: a_layout.guard].real).all()  # guard band


def test_a_wrong_row_names_its_batch_index_and_row():
    problem = make_problem((33, 4, 3), "float32", 9)
    x = forward_substitution(problem.a, problem.b).astype(np.float32)
    _, b_layout = problem.layouts
    buffer = problem.buffers()[1]
    x[2, 32] *= 1.01  # the second row a lane holds, last batch index
    b_layout.payload(buffer)[0] = x.ravel()
    failure = CHECK(problem, buffer)
    assert failure.check == "row_relative_error"
    assert "batch index 2: row 32:" in failure.detail
    b_layout.payload(buffer)[0] = (
        forward_substitution(problem.a, problem.b).astype(np.float32).ravel()
    )
    assert CHECK(problem, buffer, problem.buffers()[0]) is None


# --- timing on the host ------------------------------------------------------------------------


def test_the_timing_plan_and_the_timed_sets():
    plan = timing_plan((64, 64, 1000), "complex128")  # 128 MB of A and B per set
    assert plan["calls"] == 2 and plan["single_calls"] == 2
    assert timing_plan((16, 16, 1000), "float32")["calls"] == 16
    assert bytes_moved((64, 16, 1000), 8) == 8 * 1000 * (64 * 65 // 2 + 2 * 64 * 16)
    a, b = draw_sets(CounterRng(np, 3), (7, 5, 4), "float64", 2)
    assert a.shape == (2, 4 * 49) and b.shape == (2, 4 * 35)
    matrices = a.reshape(8, 7, 7)
    rows = np.arange(7)
    assert np.isnan(matrices[:, rows[:, None] < rows[None, :]]).all()
    assert len({matrices[i, 3, 1] for i in range(8)}) == 8  # every matrix its own data


def test_the_timed_outputs_are_audited_set_by_set():
    m, n, batch, calls = 7, 5, 3, 4
    layouts = SetLayout(calls, batch * m * m, 8), SetLayout(calls, batch * m * n, 8)
    a_buf, b_buf = (layout.allocate(np, np.dtype(np.float64)) for layout in layouts)
    a_sets, b_sets = draw_sets(CounterRng(np, 9), (m, n, batch), "float64", calls)
    layouts[0].payload(a_buf)[...] = a_sets
    layouts[1].payload(b_buf)[...] = b_sets
    x_buf = b_buf.copy()
    for i in range(calls):
        x = forward_substitution(a_sets[i].reshape(batch, m, m), b_sets[i].reshape(batch, m, n))
        layouts[1].payload(x_buf)[i] = x.ravel()
    inputs = (a_buf, b_buf)
    assert audit_outputs("replay", (m, n, batch), layouts, inputs, (a_buf, x_buf, x_buf),
                         list(range(calls)), CHECK, 9) is None  # fmt: skip
    wrong = x_buf.copy()
    layouts[1].payload(wrong)[2, m * n + 3] += 1.0  # set 2, batch index 1
    failure = audit_outputs("replay", (m, n, batch), layouts, inputs, (a_buf, wrong, wrong),
                            [2], CHECK, 9)  # fmt: skip
    assert failure.check == "timed_output_row_relative_error"
    assert "replay, input set 2" in failure.detail and "batch index 1" in failure.detail
    past = x_buf.copy()
    past[layouts[1].offset(1) // 8 + batch * m * n] = 0.0  # just past set 1
    failure = audit_outputs("replay", (m, n, batch), layouts, inputs, (a_buf, past, past),
                            [0], CHECK, 9)  # fmt: skip
    assert failure.check == "timed_output_out_of_bounds_write"


# --- served: the service answers the op's query, the loader admits the champion ---------------


def test_the_loader_routes_trsm_batched_to_a_served_champion(tmp_path):
    """Routing only (nothing is launched): the seed promoted with the v3 certificate its suite
    gives, answered by the service for ``op=trsm_batched`` and admitted by the loader."""
    from ops_service import Service
    from test_ops_registered import H200, SIGNER, promote_seed

    from kernevo.cache import ChampionCache
    from kernevo.client import service_fetcher
    from kernevo.keys import public_raw_of
    from kernevo.resolver import Resolver
    from kernevo.signature import key_id
    from kernevo.trust import TrustPolicy

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    program_id = promote_seed(url, SPEC, "complex128", tmp_path)
    service = Service(url)
    try:
        resolver = Resolver(
            "trsm_batched", "complex128", gpu=H200,
            trust=TrustPolicy({key_id(public_raw_of(SIGNER)): public_raw_of(SIGNER)}),
            cache=ChampionCache(tmp_path / "cache"),
            fetch=service_fetcher(service.url, op="trsm_batched", timeout_s=5.0),
        )  # fmt: skip
        decision = resolver.resolve(64, 16, 1000)
        assert (decision.route, decision.path) == ("kernel", SPEC.path_id), decision.reason
        assert decision.reason.startswith(f"champion program {program_id} from service")
        assert decision.champion is not None
        assert decision.champion.certificate["op"] == "trsm_batched"
    finally:
        service.stop()
