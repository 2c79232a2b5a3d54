"""Kernel launches prepared once per operand signature: what the loader's hot path runs.

A path driver's ``solve`` checks its arrays and builds its kernel arguments on every call
(``seeds.driver.check_solve_arrays``, then NumPy scalars through CuPy's ``Function.__call__``).
The loader checks a signature once (:mod:`kernevo.solver`), so for the calls after the first it
needs only the launch: the kernel's function handle, its geometry and a parameter block built
once, of which a call rewrites the two device pointers before ``cuLaunchKernel``
(``cupy.cuda.driver.launchKernel``, already a dependency: no cuda-python).

A driver may prepare its own launch: ``driver.prepare(*operands)`` returning a callable with the
op's call signature (the operands in, what ``OpCall.run`` returns out), valid for every operand
tuple of the same signature (type, shape, strides, dtype, device of each). Drivers that do not
are prepared here when the loader knows their kernel's arguments (``trsm_small``'s driver,
which also serves ``trsm_small_z64``: :func:`trsm_small_launch`); any other driver is called
through ``OpCall.run`` as before (:func:`prepare` returns ``None``). The launch of a known
driver belongs with the driver; it is here until ``seeds`` drivers offer ``prepare``.

A prepared launch makes no host synchronization, no allocation and no CUDA call other than
``cuLaunchKernel`` on CuPy's current stream, so it may run inside a user's CUDA stream capture.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from kernevo.paths import ops_spec

PreparedLaunch = Callable[..., Any]
"""``launch(*operands)``: the op's call on operands of the prepared signature."""

LaunchKernel = Callable[..., Any]
"""``cuLaunchKernel`` as CuPy exposes it: ``(function, gx, gy, gz, bx, by, bz, shared_bytes,
stream, kernel_params, extra)``, each an int."""

StreamPointer = Callable[[], int]
"""The handle of the stream a launch goes to (CuPy's current stream: the drivers' ``None``)."""

# CUDA_ERROR_INVALID_CONTEXT: the calling thread has no current CUDA context. CuPy's own
# launches make one first (cupy_backends' runtime._ensure_context: any runtime call binds the
# device's primary context to the thread); a prepared launch made by one thread and called from
# another that never made a CUDA runtime call meets this once, makes the context, launches again.
_INVALID_CONTEXT = 201

# The driver class whose kernel arguments this module knows, by its "module:attribute" name in
# the seeds package (as a path spec names its driver).
TRSM_SMALL_DRIVER = "trsm_small.driver:TrsmSmallDriver"


def prepare(
    driver: Any,
    operands: tuple[Any, ...],
    *,
    launch_kernel: LaunchKernel | None = None,
    stream_pointer: StreamPointer | None = None,
) -> PreparedLaunch | None:
    """The launch of ``driver`` on operands of the signature of ``operands``, or ``None`` when
    neither the driver (``driver.prepare``) nor this module knows how to prepare it.

    Call it after the driver has solved these operands once (its launch geometry is then cached,
    ``seeds.driver.CompiledKernel.geometry``, and the shape is known to be inside its envelope).
    ``launch_kernel`` and ``stream_pointer`` default to CuPy's (tests pass fakes).

    Raises:
        Exception: whatever the driver's own ``prepare`` raises.
    """
    own = getattr(driver, "prepare", None)
    if callable(own):
        return own(*operands)
    # The exact class: a subclass may launch another kernel.
    if type(driver) is _known_class(TRSM_SMALL_DRIVER):
        a, b = operands
        return trsm_small_launch(
            driver, a, b, launch_kernel=launch_kernel, stream_pointer=stream_pointer
        )
    return None


def _known_class(name: str) -> type:
    """A driver class named as a path spec names it (its module imports no CuPy)."""
    cls: type = ops_spec.resolve(name)
    return cls


def _cupy_launch() -> tuple[LaunchKernel, Callable[[BaseException], bool]]:
    """CuPy's ``cuLaunchKernel``, and what a launch that raised does before it is made again:
    ``recover(error)`` binds the thread to the device's primary context and says ``True`` when
    ``error`` is :data:`_INVALID_CONTEXT`, else ``False`` (the error is the caller's)."""
    from cupy.cuda import driver, runtime

    def recover(error: BaseException) -> bool:
        if not isinstance(error, driver.CUDADriverError):
            return False
        if getattr(error, "status", None) != _INVALID_CONTEXT:
            return False
        runtime.memGetInfo()  # a runtime call: binds the current device's primary context
        return True

    return driver.launchKernel, recover


def _cupy_stream_pointer() -> StreamPointer:
    """A reader of CuPy's current stream's handle."""
    import cupy

    current = cupy.cuda.get_current_stream

    def stream_pointer() -> int:
        return int(current().ptr)

    return stream_pointer


def _never(error: BaseException) -> bool:
    """No recovery: an injected launch's errors are the caller's."""
    return False


def trsm_small_launch(
    driver: Any,
    a: Any,
    b: Any,
    *,
    launch_kernel: LaunchKernel | None = None,
    stream_pointer: StreamPointer | None = None,
) -> PreparedLaunch:
    """``launch(a, b) -> b``: ``driver.solve(a, b, None)`` of a ``TrsmSmallDriver`` for arrays
    shaped as ``a`` (m×m) and ``b`` (m×n), Fortran-contiguous (lda = ldb = m), on CuPy's current
    stream.

    The kernel's parameters are ``trsm_small_kernel``'s and ``trsm_small_z64_kernel``'s
    (``const scalar_t* A, scalar_t* B, int m, int n, int lda, int ldb``; the driver's
    ``solve_raw`` passes them so): two 64-bit pointers and four 32-bit ints, the ints fixed
    here, the pointers written by each call under a lock (two threads calling the same shape
    would otherwise launch with each other's pointers; ``cuLaunchKernel`` copies the values
    before it returns).

    Raises:
        seeds.driver.GeometryError: the candidate's launch for (m, n) does not fit the device
            (not raised after the driver's first solve of the shape: the geometry is cached).
    """
    recover = _never
    if launch_kernel is None:
        launch_kernel, recover = _cupy_launch()
    if stream_pointer is None:
        stream_pointer = _cupy_stream_pointer()
    m, n = (int(d) for d in b.shape)
    geometry = driver.compiled.geometry(m, n)
    function = int(driver.compiled.kernel.ptr)
    (gx, gy, gz), (bx, by, bz) = geometry.grid, geometry.block
    shared = int(geometry.shared_bytes)
    a_arg, b_arg = ctypes.c_uint64(0), ctypes.c_uint64(0)
    ints = (ctypes.c_int32 * 4)(m, n, m, m)  # m, n, lda, ldb
    base, width = ctypes.addressof(ints), ctypes.sizeof(ctypes.c_int32)
    params = (ctypes.c_void_p * 6)(
        ctypes.addressof(a_arg),
        ctypes.addressof(b_arg),
        *(base + i * width for i in range(4)),
    )
    params_ptr = ctypes.addressof(params)
    lock = threading.Lock()

    def launch(a: Any, b: Any) -> Any:
        with lock:
            a_arg.value = a.data.ptr
            b_arg.value = b.data.ptr
            args = (function, gx, gy, gz, bx, by, bz, shared, stream_pointer(), params_ptr, 0)
            try:
                launch_kernel(*args)
            except Exception as error:
                if not recover(error):
                    raise
                launch_kernel(*args)
        return b

    # params points into ints (and params_ptr into params): they must live as long as launch.
    launch.buffers = (ints, params)  # type: ignore[attr-defined]
    return launch
