"""Kernel launches prepared once per operand signature: what the loader's hot path runs.

A path driver's ``solve`` checks its arrays and builds its kernel arguments on every call. The
loader checks a signature once (:mod:`kernevo.solver`), so for the calls after the first it
needs only the launch. A driver that can prepare it offers ``driver.prepare(*operands)``,
returning a callable with the op's call signature (the operands in, what ``OpCall.run``
returns out), valid for every operand tuple of the same signature (type, shape, strides, dtype,
device of each): the trsm_small path's driver does (and so serves ``trsm_small_z64``), built
on ``seeds.prepared_launch.pointer_launch``. Any other driver is
called through ``OpCall.run`` as before (:func:`prepare` returns ``None``). What a kernel's
parameters are is its driver's knowledge, never this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PreparedLaunch = Callable[..., Any]
"""``launch(*operands)``: the op's call on operands of the prepared signature."""


def prepare(
    driver: Any,
    operands: tuple[Any, ...],
    *,
    launch_kernel: Callable[..., Any] | None = None,
    stream_pointer: Callable[[], int] | None = None,
) -> PreparedLaunch | None:
    """The launch of ``driver`` on operands of the signature of ``operands`` (its
    ``prepare``), or ``None`` when the driver prepares none.

    Call it after the driver has solved these operands once (its launch geometry is then cached,
    ``seeds.driver.CompiledKernel.geometry``, and the shape is known to be inside its envelope).
    ``launch_kernel`` and ``stream_pointer`` are passed on when given (tests pass fakes).

    Raises:
        Exception: whatever the driver's own ``prepare`` raises.
    """
    own = getattr(driver, "prepare", None)
    if not callable(own):
        return None
    fakes = {"launch_kernel": launch_kernel, "stream_pointer": stream_pointer}
    given = {name: value for name, value in fakes.items() if value is not None}
    return own(*operands, **given)
