"""A kernel launch prepared once and made many times: the function handle, its geometry and a
parameter block of device pointers and 32-bit ints built once, of which each launch rewrites
only the pointers before ``cuLaunchKernel`` (``cupy.cuda.driver.launchKernel``, already a
dependency: no cuda-python). What a path driver's ``prepare`` returns to the loader's hot path
(``kernevo.launch``, issue 11): no host synchronization, no allocation, no CUDA call other than
the launch on CuPy's current stream, so it may run inside a user's CUDA stream capture.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from .driver import LaunchGeometry

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


def pointer_launch(
    function: int,
    geometry: LaunchGeometry,
    pointers: int,
    ints: tuple[int, ...],
    *,
    launch_kernel: LaunchKernel | None = None,
    stream_pointer: StreamPointer | None = None,
) -> Callable[..., None]:
    """``launch(*addresses)``: the kernel at ``function`` launched with ``geometry`` on
    parameters ``pointers`` 64-bit device addresses (``launch``'s arguments, in order) then
    ``ints`` as 32-bit ints (fixed here), on CuPy's current stream. The addresses are written
    under a lock (two threads calling the same prepared launch would otherwise launch with each
    other's; ``cuLaunchKernel`` copies the values before it returns). ``launch_kernel`` and
    ``stream_pointer`` default to CuPy's (tests pass fakes).
    """
    recover = _never
    if launch_kernel is None:
        launch_kernel, recover = _cupy_launch()
    if stream_pointer is None:
        stream_pointer = _cupy_stream_pointer()
    (gx, gy, gz), (bx, by, bz) = geometry.grid, geometry.block
    shared = int(geometry.shared_bytes)
    slots = [ctypes.c_uint64(0) for _ in range(pointers)]
    values = (ctypes.c_int32 * max(1, len(ints)))(*ints)
    base, width = ctypes.addressof(values), ctypes.sizeof(ctypes.c_int32)
    params = (ctypes.c_void_p * (pointers + len(ints)))(
        *(ctypes.addressof(slot) for slot in slots),
        *(base + i * width for i in range(len(ints))),
    )
    params_ptr = ctypes.addressof(params)
    lock = threading.Lock()

    def launch(*addresses: int) -> None:
        with lock:
            for slot, address in zip(slots, addresses, strict=True):
                slot.value = address
            args = (function, gx, gy, gz, bx, by, bz, shared, stream_pointer(), params_ptr, 0)
            try:
                launch_kernel(*args)
            except Exception as error:
                if not recover(error):
                    raise
                launch_kernel(*args)

    # params points into values and slots: they must live as long as launch.
    launch.buffers = (slots, values, params)  # type: ignore[attr-defined]
    return launch
