"""The loader's fast path (issue 11, Build items 1 and 2), on the CPU: a call of an operand
signature already seen checks nothing again, routes nothing again, logs nothing, and launches a
launch prepared once; a first call inside a CUDA stream capture is refused before it fetches.

Two kinds of operands: NumPy arrays tagged with a device (tests/test_loader_resolver.py) with
its fake driver, for what the solver does with any driver; and real CuPy arrays over memory
CuPy does not own (no device touched) with a real ``TrsmSmallDriver`` whose compiled module is
a fake and whose ``cuLaunchKernel`` is a recorder, for the prepared launch. On this machine
there is no CUDA driver, so any CUDA call the hot path made besides the faked launch (an
allocation, a device-to-host copy, a synchronization) would raise.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from test_loader_resolver import (
    API,
    GPU,
    TRUST,
    DeviceArray,
    FakeDriver,
    FakeService,
    Harness,
    on_device,
    problem,
)

import kernevo.resolver
import kernevo.solver
from kernevo import graphs
from kernevo import launch as launches
from kernevo.cache import ChampionCache
from kernevo.client import service_fetcher
from kernevo.graphs import CaptureError, stream_is_capturing
from kernevo.resolver import Resolver
from kernevo.solver import OpSolver, signature
from seeds.driver import LaunchGeometry
from seeds.ops.trsm import TrsmCall
from seeds.trsm_small.driver import TrsmSmallDriver
from seeds.trsm_small.spec import TRSM_SMALL

cupy = pytest.importorskip("cupy")
from cupy.cuda import memory  # noqa: E402  after the skip: CuPy may be missing

PARAMS = (ctypes.c_uint64, ctypes.c_uint64) + (ctypes.c_int32,) * 4
STREAM = 0x5EED  # the handle the fake current stream reports
FUNCTION = 0xF00D  # the fake module's kernel handle


# --- fakes for the prepared launch -----------------------------------------------------------


def read_params(params_ptr: int, layout: tuple[type, ...]) -> tuple[int, ...]:
    """The values a ``void*[]`` kernel parameter block at ``params_ptr`` points to, read as the
    ctypes types of ``layout`` in order: what ``cuLaunchKernel`` copies."""
    pointers = (ctypes.c_void_p * len(layout)).from_address(params_ptr)
    return tuple(
        int(kind.from_address(pointer).value)  # type: ignore[attr-defined]
        for kind, pointer in zip(layout, pointers, strict=True)
    )


class FakeCompiledKernel:
    """What ``TrsmSmallDriver`` and the loader use of ``seeds.driver.CompiledKernel``, on no
    device: a kernel handle, the geometry (each request counted: the real one runs the
    candidate's configuration kernel and copies its answer to the host on a cache miss), and
    the launches the driver's own ``solve_raw`` makes."""

    def __init__(self) -> None:
        self.kernel = SimpleNamespace(ptr=FUNCTION)
        self.geometry_requests: list[tuple[int, int]] = []
        self.launches: list[tuple[LaunchGeometry, tuple[Any, ...], Any]] = []

    def geometry(self, m: int, n: int) -> LaunchGeometry:
        self.geometry_requests.append((m, n))
        return LaunchGeometry((n, 1, 1), (32, 2, 1), 8 * (m * m + m))

    def launch(self, geometry: LaunchGeometry, args: tuple[Any, ...], stream: Any = None) -> None:
        self.launches.append((geometry, args, stream))


def fake_trsm_small_driver() -> TrsmSmallDriver:
    """A real ``TrsmSmallDriver`` (its checks and ``solve_raw``) over a fake module."""
    driver = TrsmSmallDriver.__new__(TrsmSmallDriver)
    driver.dtype = "float64"
    driver.spec = TRSM_SMALL
    driver.compiled = FakeCompiledKernel()  # type: ignore[assignment]
    return driver


class LaunchRecorder:
    """Stands in for ``cupy.cuda.driver.launchKernel``: records each launch with the values its
    parameter block holds at the call (what ``cuLaunchKernel`` copies); raises from call
    ``fail_at`` on (1-based) when set."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                 shared: int, stream: int, params: int, extra: int) -> None:  # fmt: skip
        if self.fail_at is not None and len(self.calls) + 1 >= self.fail_at:
            raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        values = read_params(params, PARAMS)
        self.calls.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))


class CountingCall(TrsmCall):
    """trsm's call adapter, counting its checks; the snapshot (a device copy, which needs a
    device) is left out: the first call's restore is tests/test_loader_resolver.py's."""

    def __init__(self) -> None:
        self.shape_checks = 0
        self.ready_checks = 0

    def shape(self, a: Any, b: Any) -> tuple[int, int]:
        self.shape_checks += 1
        return super().shape(a, b)

    def kernel_ready(self, dtype: str, device: int, a: Any, b: Any) -> bool:
        self.ready_checks += 1
        return super().kernel_ready(dtype, device, a, b)

    def snapshot(self, a: Any, b: Any) -> None:
        return None


_next_address = [0x7F0000000000]


def unowned(shape: tuple[int, ...], dtype: str = "float64", order: str = "F") -> Any:
    """A CuPy array on device 0 over an address nothing owns: its attributes, flags and
    pointer are real; reading or writing its data would need a device."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    address = _next_address[0]
    _next_address[0] += max(nbytes, 256) + 256
    mem = memory.UnownedMemory(address, nbytes, None, device_id=0)
    return cupy.ndarray(shape, dtype, memptr=memory.MemoryPointer(mem, 0), order=order)


class Counter:
    """A callable returning ``value``, counting its calls."""

    def __init__(self, value: Any = False) -> None:
        self.value = value
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.value


def cupy_solver(
    tmp_path: Path, recorder: Any, **kwargs: Any
) -> tuple[OpSolver, TrsmSmallDriver, CountingCall, list[Any]]:
    """A trsm solver on the fake service's signed champion whose driver is a real
    ``TrsmSmallDriver`` over :class:`FakeCompiledKernel`, launches going to ``recorder`` (a
    ``cuLaunchKernel``); returns it with its driver, its counting call adapter and the
    fallback's calls."""
    fetch = service_fetcher(
        API, op="trsm", timeout_s=1.0, transport=httpx.MockTransport(FakeService())
    )
    resolver = Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=ChampionCache(tmp_path), trust=TRUST
    )
    driver = fake_trsm_small_driver()
    built: list[str] = []
    fallen: list[Any] = []

    def factory(path_id: str, cubin: bytes, dtype: str) -> TrsmSmallDriver:
        built.append(path_id)
        assert len(built) == 1, "the driver is built once"
        return driver

    def fallback(a: Any, b: Any) -> Any:
        fallen.append(b.shape)
        return b

    call = CountingCall()
    prepare = functools.partial(
        launches.prepare, launch_kernel=recorder, stream_pointer=lambda: STREAM
    )
    solver = OpSolver(
        resolver, driver_factory=factory, fallback=fallback, call=call,
        prepare_launch=prepare, **kwargs,
    )  # fmt: skip
    return solver, driver, call, fallen


# --- the prepared launch ---------------------------------------------------------------------


def test_a_hundred_calls_of_one_signature_check_route_and_size_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder, capturing = LaunchRecorder(), Counter(False)
    solver, driver, call, fallen = cupy_solver(tmp_path, recorder, is_capturing=capturing)
    toolkit_checks = Counter()
    real_compare = kernevo.resolver.compare_toolkit
    monkeypatch.setattr(
        kernevo.resolver, "compare_toolkit",
        lambda *a, **k: (toolkit_checks(), real_compare(*a, **k))[1],
    )  # fmt: skip
    resolves = Counter()
    real_resolve = solver._resolver.resolve
    monkeypatch.setattr(solver._resolver, "resolve", lambda *s: (resolves(), real_resolve(*s))[1])
    a = unowned((24, 24))
    bs = [unowned((24, 10)) for _ in range(2)]  # two right-hand sides of one signature

    assert solver(a, bs[0]) is bs[0]  # the first call (it fetches: httpx logs the request)
    with caplog.at_level(logging.DEBUG):
        for i in range(1, 100):
            assert solver(a, bs[i % 2]) is bs[i % 2]

    assert caplog.records == []  # nothing logged by the calls after the first
    assert (call.shape_checks, call.ready_checks, resolves.calls) == (1, 1, 1)
    assert toolkit_checks.calls == 1  # the certificate's toolkit, once for the shape
    assert capturing.calls == 1  # asked on the first call only
    # The first call through the driver (its checks, its geometry request, its launch); the
    # launch prepared from the geometry it cached; then 99 launches of the prepared one.
    assert len(driver.compiled.launches) == 1
    assert driver.compiled.geometry_requests == [(24, 10), (24, 10)]
    assert len(recorder.calls) == 99 and fallen == []
    for i, (function, grid, block, shared, stream, values, extra) in enumerate(recorder.calls):
        b = bs[(i + 1) % 2]
        assert (function, grid, block, shared, stream, extra) == (
            FUNCTION, (10, 1, 1), (32, 2, 1), 8 * (24 * 24 + 24), STREAM, 0,
        )  # fmt: skip
        assert values == (a.data.ptr, b.data.ptr, 24, 10, 24, 24)


def test_the_prepared_launch_passes_what_the_drivers_solve_raw_passes() -> None:
    """Guards the one piece of trsm_small's driver the loader repeats: the kernel's parameters
    (values, order, widths), its geometry and the stream (the current one for both)."""
    driver, recorder = fake_trsm_small_driver(), LaunchRecorder()
    a, b = unowned((33, 33)), unowned((33, 7))

    driver.solve(a, b, None)
    prepared = launches.prepare(driver, (a, b), launch_kernel=recorder, stream_pointer=lambda: 0)
    assert prepared is not None and prepared(a, b) is b

    [(geometry, args, stream)] = driver.compiled.launches
    [(function, grid, block, shared, _, values, _)] = recorder.calls
    assert stream is None  # the driver's None: CuPy's current stream, as the prepared launch's
    assert (grid, block, shared) == (geometry.grid, geometry.block, geometry.shared_bytes)
    assert function == driver.compiled.kernel.ptr
    assert values == tuple(int(v) for v in args)
    assert [np.dtype(type(v)).itemsize for v in args] == [ctypes.sizeof(t) for t in PARAMS]
    assert [np.dtype(type(v)).kind for v in args] == ["u", "u", "i", "i", "i", "i"]


def test_a_driver_preparing_its_own_launch_is_asked_and_others_are_called_as_before() -> None:
    class Preparing(FakeDriver):
        def __init__(self) -> None:
            super().__init__(b"", "float64", fail=False)
            self.prepared: list[tuple[int, ...]] = []

        def prepare(self, a: Any, b: Any) -> Any:
            self.prepared.append(b.shape)
            return lambda a, b: ("prepared", b.shape)

    a, b, _ = problem(5, 3)
    own = Preparing()
    assert launches.prepare(own, (a, b))(a, b) == ("prepared", (5, 3))
    assert own.prepared == [(5, 3)]
    assert launches.prepare(FakeDriver(b"", "float64", fail=False), (a, b)) is None

    class Subclass(TrsmSmallDriver):
        """Launches another kernel: it says it prepares none."""

        prepare = None

    other = Subclass.__new__(Subclass)
    assert launches.prepare(other, (unowned((4, 4)), unowned((4, 4)))) is None


def test_a_prepared_launch_that_raises_pins_the_shape_to_the_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = LaunchRecorder(fail_at=4)
    solver, driver, _, fallen = cupy_solver(tmp_path, recorder)
    a, b = unowned((8, 8)), unowned((8, 8))

    with caplog.at_level(logging.WARNING, logger="kernevo"):
        for _ in range(10):
            solver(a, b)

    # Call 1 through the driver, 2..5 prepared (the 4th prepared launch, call 5, raises and is
    # answered by the fallback), then the fallback for good.
    assert len(recorder.calls) == 3 and len(driver.compiled.launches) == 1
    assert fallen == [(8, 8)] * 6
    [warning] = caplog.records
    assert "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES at m=8 n=8" in warning.getMessage()
    decision = solver.explain(8, 8)
    assert decision.route == "cublas"
    assert decision.reason == "kernel error: RuntimeError: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"


def test_overhead_of_the_dispatch_over_the_prepared_launch_is_printed(tmp_path: Path) -> None:
    """The loader's per-call Python cost on this CPU, against the same prepared launch called
    directly, both with a launch that does nothing (the H200's numbers come from ``kernevo
    bench-loader``); both must make the same launches."""
    launched = Counter()
    solver, driver, _, _ = cupy_solver(tmp_path, launched)
    a, b = unowned((16, 16)), unowned((16, 16))
    solver(a, b)  # through the driver: the launch is prepared after it
    direct = driver.prepare(a, b, launch_kernel=launched, stream_pointer=lambda: STREAM)
    calls = 20000

    def per_call(fn: Any) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                fn(a, b)
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        return best

    loaded, prepared = per_call(solver), per_call(direct)
    print(f"\nCPU: loaded call {loaded:.2f} us, prepared launch {prepared:.2f} us, "
          f"dispatch {loaded - prepared:.2f} us (no-op cuLaunchKernel)")  # fmt: skip
    assert launched.calls == 2 * 5 * calls


# --- signatures: what is checked again -------------------------------------------------------


def test_a_new_signature_is_checked_and_routed_again(tmp_path: Path) -> None:
    solver, _, call, fallen = cupy_solver(tmp_path, LaunchRecorder())
    a = unowned((8, 8))
    solver(a, unowned((8, 8)))
    solver(a, unowned((8, 8)))
    assert call.shape_checks == 1

    solver(a, unowned((8, 8), order="C"))  # C order: the kernel takes it not, cuBLAS does
    solver(a, unowned((8, 5)))  # another shape
    solver(unowned((8, 8), "complex128"), unowned((8, 8), "complex128"))  # another dtype
    assert call.shape_checks == 4
    assert fallen == [(8, 8), (8, 8)]


def test_operands_the_op_refuses_are_refused_on_every_call() -> None:
    h = Harness(FakeService(), Path("/nonexistent-not-used"))
    a, b, _ = problem(4, 3)
    for _ in range(3):
        with pytest.raises(TypeError, match="CuPy arrays"):
            h.solver(np.asarray(a), np.asarray(b))
        with pytest.raises(ValueError, match="m=4"):
            h.solver(a, on_device(np.zeros((5, 3))))
    with pytest.raises(TypeError, match="cannot solve in place"):
        h.solver(a.astype(np.complex128).view(DeviceArray), b)
    h.solver(a, b)
    with pytest.raises(TypeError, match="cannot solve in place"):  # after a good call too
        h.solver(a.astype(np.complex128).view(DeviceArray), b)


def test_a_hundred_calls_through_a_driver_without_a_prepared_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(FakeService(), tmp_path)
    checks = Counter()
    real_shape = TrsmCall.shape
    monkeypatch.setattr(TrsmCall, "shape", lambda self, a, b: (checks(), real_shape(self, a, b))[1])
    a, b, x = problem(12, 5)
    bs = [b.copy(order="F") for _ in range(100)]

    for b in bs:
        h.solver(a, b)

    for b in bs:
        np.testing.assert_allclose(b, x, rtol=1e-12)
    assert checks.calls == 1 and len(h.drivers) == 1
    assert len(h.drivers[0].shapes) == 100 and h.fallback_shapes == []
    assert len(h.service.requests) == 1


def test_signature_reads_type_shape_strides_dtype_and_device() -> None:
    a, b = unowned((3, 4)), unowned((3, 4), order="C")
    f64 = np.dtype("float64")
    assert signature((a,)) == (cupy.ndarray, (3, 4), (8, 24), f64, 0)
    assert signature((a, b)) == (
        cupy.ndarray, (3, 4), (8, 24), f64, 0, cupy.ndarray, (3, 4), (32, 8), f64, 0,
    )  # fmt: skip
    assert signature((a, b, a)) == signature((a, b)) + signature((a,))
    fake = on_device(np.ones((2, 3)))  # no CuPy memory pointer: its device.id
    assert signature((fake,)) == (DeviceArray, (2, 3), (8, 16), f64, 0)
    with pytest.raises(AttributeError):
        signature((np.ones(3),))  # NumPy 2's device is the string "cpu"


def test_plans_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernevo.solver, "MAX_PLANS", 2)
    solver, _, call, _ = cupy_solver(tmp_path, LaunchRecorder())
    operands = [(unowned((m, m)), unowned((m, 2))) for m in (4, 5, 6)]
    for ops in operands:
        solver(*ops)
    solver(*operands[2])
    assert call.shape_checks == 3  # the newest plan was kept
    solver(*operands[0])
    assert call.shape_checks == 4  # the oldest was dropped with the table


# --- CUDA stream capture ---------------------------------------------------------------------


def test_a_first_call_inside_a_capture_is_refused_before_anything_runs(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    h.solver._is_capturing = lambda: True
    a, b, _ = problem(6, 4)
    given = b.copy()

    with pytest.raises(CaptureError, match=r"first trsm call on these operands \(m=6 n=4\)"):
        h.solver(a, b)

    assert h.service.requests == [] and h.drivers == [] and h.fallback_shapes == []
    np.testing.assert_array_equal(b, given)


def test_calls_after_the_first_are_not_asked_about_capture(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, x = problem(6, 4)
    h.solver(a, b)
    np.testing.assert_allclose(b, x, rtol=1e-12)
    capturing = Counter(True)
    h.solver._is_capturing = capturing

    a2, b2, x2 = problem(6, 4, seed=1)
    h.solver(a2, b2)

    np.testing.assert_allclose(b2, x2, rtol=1e-12)
    assert capturing.calls == 0 and len(h.drivers[0].shapes) == 2


def test_prepare_readies_a_signature_without_writing_its_operands(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, x = problem(7, 3)
    given = b.copy()

    decision = h.solver.prepare(a, b)

    assert decision.route == "kernel" and h.solver.runs_kernel(a, b)
    np.testing.assert_array_equal(b, given)  # the first call ran on copies
    assert h.drivers[0].shapes == [(7, 3)]
    h.solver._is_capturing = lambda: True  # a capture now: the call only launches
    h.solver(a, b)
    np.testing.assert_allclose(b, x, rtol=1e-12)


def test_prepare_plans_the_fallback_without_running_it(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, _ = problem(7, 3)
    c_order = np.ascontiguousarray(b).view(DeviceArray)

    h.solver.prepare(a, c_order)

    assert not h.solver.runs_kernel(a, c_order) and h.fallback_shapes == []
    assert h.drivers == []
    assert not h.solver.runs_kernel(a, b)  # not prepared, nor called yet


def test_prepare_inside_a_capture_is_refused(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    h.solver._is_capturing = lambda: True
    a, b, _ = problem(3, 3)
    with pytest.raises(CaptureError):
        h.solver.prepare(a, b)
    assert h.service.requests == []


def test_capture_wants_calls_of_one_shape(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, _ = problem(4, 4)
    a2, b2, _ = problem(5, 4)
    with pytest.raises(ValueError, match="calls is empty"):
        graphs.capture(h.solver, [])
    with pytest.raises(ValueError, match=r"one shape; got \[\(4, 4\), \(5, 4\)\]"):
        h.solver.capture([(a, b), (a2, b2)])


class _FakeRuntimeError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


def _fake_cupy(answer: Any) -> types.ModuleType:
    """A ``cupy`` module whose current stream's ``is_capturing`` returns ``answer`` or raises
    it (a :class:`_FakeRuntimeError`)."""

    def is_capturing() -> bool:
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    module = types.ModuleType("cupy")
    module.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        get_current_stream=lambda: SimpleNamespace(is_capturing=is_capturing),
        runtime=SimpleNamespace(CUDARuntimeError=_FakeRuntimeError),
    )
    return module


@pytest.mark.parametrize(
    ("answer", "capturing"),
    [
        (True, True),
        (False, False),
        (_FakeRuntimeError(906), True),  # cudaErrorStreamCaptureImplicit: the legacy stream
        (_FakeRuntimeError(901), True),  # cudaErrorStreamCaptureInvalidated
        (_FakeRuntimeError(35), False),  # cudaErrorInsufficientDriver: nothing can capture
    ],
)
def test_stream_is_capturing_reads_cupys_current_stream(
    monkeypatch: pytest.MonkeyPatch, answer: Any, capturing: bool
) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(answer))
    assert stream_is_capturing() is capturing


def test_without_cupy_imported_nothing_is_capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert stream_is_capturing() is False


def _driver_error(status: int) -> Exception:
    """A ``CUDADriverError`` of ``status``, made without libcuda (its constructor asks the
    driver for the error's name)."""
    from cupy.cuda import driver

    error = driver.CUDADriverError.__new__(driver.CUDADriverError)
    error.status = status
    return error


@pytest.mark.parametrize(("status", "retried"), [(201, True), (400, False)])
def test_a_thread_without_a_context_gets_one_and_launches_again(
    monkeypatch: pytest.MonkeyPatch, status: int, retried: bool
) -> None:
    """A launch prepared in one thread and called from a thread that never made a CUDA call
    meets CUDA_ERROR_INVALID_CONTEXT once: a runtime call binds the primary context, then the
    launch is made again with the same parameters. Any other error is the caller's."""
    from cupy.cuda import driver, runtime

    attempts: list[tuple[int, ...]] = []
    contexts = Counter()

    def launch_kernel(*args: int) -> None:
        attempts.append((*args[:10], *read_params(args[9], PARAMS)))
        if len(attempts) == 1:
            raise _driver_error(status)

    monkeypatch.setattr(driver, "launchKernel", launch_kernel)
    monkeypatch.setattr(runtime, "memGetInfo", contexts)
    trsm, a, b = fake_trsm_small_driver(), unowned((4, 4)), unowned((4, 4))
    launch = trsm.prepare(a, b, stream_pointer=lambda: STREAM)

    if retried:
        assert launch(a, b) is b
        assert len(attempts) == 2 and attempts[0] == attempts[1] and contexts.calls == 1
        assert attempts[0][-6:] == (a.data.ptr, b.data.ptr, 4, 4, 4, 4)
    else:
        with pytest.raises(driver.CUDADriverError):
            launch(a, b)
        assert len(attempts) == 1 and contexts.calls == 0


# --- graphs.capture's control flow, with CuPy's streams faked --------------------------------


class FakeStream:
    """A CuPy stream's capture surface: ``with`` makes it current, capture state, events
    waited for; every capture begun and ended recorded in ``log`` (shared by all)."""

    current: list[FakeStream] = []

    def __init__(self, log: list[str], name: str) -> None:
        self.log = log
        self.name = name
        self.capturing = False
        self.waited: list[str] = []

    def __enter__(self) -> FakeStream:
        FakeStream.current.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        FakeStream.current.pop()

    def begin_capture(self) -> None:
        self.capturing = True
        self.log.append("begin")

    def end_capture(self) -> Any:
        self.capturing = False
        self.log.append("end")
        return SimpleNamespace(launch=lambda stream: self.log.append(f"replay on {stream.name}"))

    def is_capturing(self) -> bool:
        return self.capturing

    def record(self) -> str:
        return "recorded"

    def wait_event(self, event: str) -> None:
        self.waited.append(event)


@pytest.fixture
def fake_streams(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """CuPy's current stream faked (the default one, or the one a ``with`` made current);
    returns the log of captures and replays."""
    log: list[str] = []
    default = FakeStream(log, "default")
    monkeypatch.setattr(FakeStream, "current", [])
    monkeypatch.setattr(
        cupy.cuda, "get_current_stream", lambda: (FakeStream.current or [default])[-1]
    )
    return log


def fake_solver(tmp_path: Path, log: list[str], fallback: Any) -> OpSolver:
    """A trsm solver on the fake service's champion with a driver solving on the host and
    logging whether CuPy's (faked) current stream captures each call."""
    fetch = service_fetcher(
        API, op="trsm", timeout_s=1.0, transport=httpx.MockTransport(FakeService())
    )
    resolver = Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=ChampionCache(tmp_path), trust=TRUST
    )

    class LoggingDriver(FakeDriver):
        def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
            log.append(f"kernel, capturing={stream_is_capturing()}")
            return super().solve(a, b, stream)

    driver = LoggingDriver(b"", "float64", fail=False)
    return OpSolver(resolver, driver_factory=lambda *_: driver, fallback=fallback)


def test_capture_sets_up_outside_and_captures_every_call_inside(tmp_path, fake_streams) -> None:
    solver = fake_solver(tmp_path, fake_streams, fallback=None)
    problems = [problem(9, 4, seed=i) for i in range(3)]
    given = [b.copy(order="F") for _, b, _ in problems]
    stream = FakeStream(fake_streams, "capture stream")

    graph = solver.capture([(a, b) for a, b, _ in problems], stream=stream)

    assert fake_streams == ["kernel, capturing=False", "begin", *["kernel, capturing=True"] * 3,
                            "end"]  # fmt: skip
    assert stream.waited == ["recorded"]  # ordered after the current stream's work
    assert (graph.kernel, graph.shape, len(graph.calls)) == (True, (9, 4), 3)
    # The fake driver solves at once (a real capture would not): the copies took the first call.
    for (_, b, x), kept in zip(problems, given, strict=True):
        np.testing.assert_allclose(b, x, rtol=1e-12)
        assert not np.array_equal(b, kept)
    graph.replay(stream)
    assert fake_streams[-1] == "replay on capture stream"
    graph.replay()
    assert fake_streams[-1] == "replay on default"


def test_a_fallback_refusing_the_capture_is_named_and_the_capture_ended(
    tmp_path, fake_streams
) -> None:
    def cublas_under_capture(a: Any, b: Any) -> Any:
        if stream_is_capturing():
            raise NotImplementedError("cuBLAS wrappers refuse stream capture")
        return b

    solver = fake_solver(tmp_path, fake_streams, fallback=cublas_under_capture)
    a, b, _ = problem(100, 100)
    stream = FakeStream(fake_streams, "capture stream")

    with pytest.raises(CaptureError) as caught:
        solver.capture([(a, b)], stream=stream)

    message = str(caught.value)
    assert message.startswith("kernevo: trsm calls of this shape go to cuBLAS ?trsm")
    assert "(no path serves m=100 n=100)" in message
    assert message.endswith("NotImplementedError: cuBLAS wrappers refuse stream capture")
    assert fake_streams == ["begin", "end"] and not stream.capturing
