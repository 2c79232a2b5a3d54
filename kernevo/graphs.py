"""Loaded solves in CUDA graphs: whether a capture is in progress, and a batch of solves of one
shape captured once and replayed (:func:`capture`, ``OpSolver.capture``).

A graph replays the launches it captured with the addresses and parameters they had: replaying
it solves the same operands again, so a caller who solves one shape repeatedly writes new
values into the captured operands and replays (one graph launch for the whole batch instead of
one Python call and one kernel launch per solve: docs/DESIGN.md "Timing" measured 0.57 µs per
launch inside a graph on the H200 against 9.2 µs for an empty kernel timed alone).

Nothing here imports CuPy until a capture runs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernevo.solver import OpSolver

# cudaErrorStreamCaptureUnsupported (900) … cudaErrorStreamCaptureWrongThread (908): a query the
# runtime refuses because a capture is in progress (the legacy default stream queried while
# another stream captures in global mode).
_CAPTURE_ERRORS = range(900, 909)


class CaptureError(RuntimeError):
    """A loaded call that cannot run inside a CUDA stream capture: the first call of an operand
    signature (it routes, loads a module and reads the launch geometry back to the host), or a
    call the op's fallback answers where that library refuses capture. One line saying which."""


def stream_is_capturing() -> bool:
    """Whether CuPy's current stream is capturing a CUDA graph (``cudaStreamIsCapturing``).

    ``False`` when CuPy was never imported (no CuPy stream exists to capture) or the query
    fails for any reason but a capture in progress (no driver, no device); ``True`` when the
    runtime refuses the query because of a capture (:data:`_CAPTURE_ERRORS`).
    """
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return False
    try:
        return bool(cupy.cuda.get_current_stream().is_capturing())
    except cupy.cuda.runtime.CUDARuntimeError as error:
        return getattr(error, "status", None) in _CAPTURE_ERRORS


@dataclass(frozen=True)
class SolveGraph:
    """A captured batch of loaded calls of one shape.

    ``graph`` is CuPy's ``cupy.cuda.graph.Graph``; ``calls`` the operand tuples, kept here
    because the graph holds their device addresses (freeing one under it would let a replay
    write memory someone else owns); ``shape`` the problem's (the op's parameters); ``kernel``
    whether the calls launch the champion kernel (``False``: the op's fallback was captured).
    """

    graph: Any
    calls: tuple[tuple[Any, ...], ...]
    shape: tuple[int, ...]
    kernel: bool

    def replay(self, stream: Any = None) -> None:
        """Launch the graph on ``stream`` (a CuPy stream; ``None``: CuPy's current one),
        asynchronously: the operands hold the results once the stream reaches it."""
        if stream is None:
            import cupy

            stream = cupy.cuda.get_current_stream()
        self.graph.launch(stream)


def capture(solver: OpSolver, calls: Iterable[Sequence[Any]], *, stream: Any = None) -> SolveGraph:
    """Capture ``solver(*operands)`` for each operand tuple of ``calls``, in order, into one
    CUDA graph; replay it with :meth:`SolveGraph.replay`.

    Every call must be of one shape. Each signature is first set up outside the capture
    (``OpSolver.prepare``: the operands are not written); the capture then runs on ``stream``
    (default a new non-blocking CuPy stream), which first waits for CuPy's current stream so
    that the captured operands' earlier writes are ordered before it. Capturing records the
    launches without running them: the operands are unchanged until a replay.

    Raises:
        ValueError: no calls, or calls of different shapes.
        CaptureError: a call goes to the op's fallback and that library refused the capture
            (CuPy's cuBLAS wrappers do), naming the decision's reason.
        TypeError, ValueError: operands a call refuses.
    """
    import cupy

    batch = tuple(tuple(operands) for operands in calls)
    if not batch:
        raise ValueError("nothing to capture: calls is empty")
    decisions = [solver.prepare(*operands) for operands in batch]
    shapes = {decision.shape for decision in decisions}
    if len(shapes) != 1:
        raise ValueError(f"a graph holds calls of one shape; got {sorted(shapes)}")
    kernel = all(solver.runs_kernel(*operands) for operands in batch)
    capture_stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
    capture_stream.wait_event(cupy.cuda.get_current_stream().record())
    with capture_stream:
        capture_stream.begin_capture()
        try:
            for operands in batch:
                solver(*operands)
        except Exception as error:
            with contextlib.suppress(Exception):  # the capture's own failure is secondary
                capture_stream.end_capture()
            if kernel:
                raise
            raise _refused(solver, decisions[0], error) from error
        try:
            graph = capture_stream.end_capture()
        except Exception as error:
            # A library call that did not raise may still have broken the capture (a
            # synchronizing call invalidates it): the fallback's again, not the kernel's.
            if kernel:
                raise
            raise _refused(solver, decisions[0], error) from error
    return SolveGraph(graph, batch, decisions[0].shape, kernel)


def _refused(solver: OpSolver, decision: Any, error: Exception) -> CaptureError:
    """The one line saying that ``decision``'s fallback refused the capture with ``error``."""
    from kernevo.text import printable

    return CaptureError(
        f"kernevo: {solver.op} calls of this shape go to {decision.fallback} "
        f"({decision.reason}), which refused the capture: {type(error).__name__}: "
        f"{printable(str(error), 300)}"
    )
