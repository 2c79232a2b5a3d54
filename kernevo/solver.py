"""``kernevo.load``: the callable applications use, dispatching each call of an op by its shape
to the champion kernel of the fastest path serving it (inside that champion's verified
envelope) and to the op's library fallback everywhere else (trsm: cuBLAS ?trsm; solve_tri:
cuBLAS's batched TRSM; band_bidiag: LAPACK ?gbbrd on the host CPU; ``seeds.ops``)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernevo import launch as launches
from kernevo.decision import Decision, pinned_to_fallback
from kernevo.device import GpuInfo, NoGpuError, current_gpu
from kernevo.graphs import CaptureError, stream_is_capturing
from kernevo.kernel import (
    CompileFn,
    DriverFactory,
    KernelDriver,
    build_driver,
    compile_for_arch,
    path_driver,
)
from kernevo.paths import ops
from kernevo.paths import spec as path_spec
from kernevo.warm_start import WarmStart

if TYPE_CHECKING:
    # Imported by load() when it runs: they bring pydantic (and the fetch, httpx), which `from
    # kernevo import load` need not pay for (the resolver is built by load, its classes are
    # only types).
    from kernevo.client import ChampionKernel
    from kernevo.graphs import SolveGraph
    from kernevo.resolver import Resolver
    from kernevo.warm_start import MemoKernel

log = logging.getLogger("kernevo")

Fallback = Callable[..., Any]

Plan = tuple[Callable[..., Any], "tuple[int, ...] | None"]
"""How calls of one operand signature run: ``(run, shape)``, ``run(*operands)`` returning what the
op's callable returns; ``shape`` is the problem's for a kernel launch (a failure there pins it to
the fallback), ``None`` for the fallback."""

# Plans kept at most (one per operand signature): an application cycling through more
# signatures than this pays the first-call checks again after the table is emptied.
MAX_PLANS = 4096


def signature(operands: tuple[Any, ...]) -> tuple[Any, ...]:
    """What the checks of a call read of its operands, flat: each one's type, shape, strides,
    dtype and device id (``x.data.device_id``, CuPy's own, which ``x.device.id`` wraps in a new
    ``Device``; else ``x.device.id``, the id ``seeds.ops.spec.device_index`` reads). Two calls of
    one signature are checked alike (``OpCall.shape`` and ``kernel_ready``, the driver's own
    checks), so the loader checks a signature once.

    Raises:
        AttributeError: an operand lacks one of these (not an array: the call's checks say so).
    """
    try:
        if len(operands) == 2:
            # Spelt out for the ops of two operands (trsm, solve_tri): on CuPy arrays this key
            # is about half the cost of the generic one (measured, CPython 3.11).
            a, b = operands
            return (
                type(a), a.shape, a.strides, a.dtype, a.data.device_id,
                type(b), b.shape, b.strides, b.dtype, b.data.device_id,
            )  # fmt: skip
        return tuple(
            part
            for x in operands
            for part in (type(x), x.shape, x.strides, x.dtype, x.data.device_id)
        )
    except AttributeError:
        return tuple(
            part for x in operands for part in (type(x), x.shape, x.strides, x.dtype, x.device.id)
        )


def _signature_or_none(operands: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """:func:`signature`, or ``None`` for operands that have none (never planned)."""
    try:
        key = signature(operands)
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


class OpSolver:
    """``solver(*operands)``: one op's call, the champion kernel where it may run and the op's
    library fallback everywhere else, with the op's signature (``seeds.ops``):

    - trsm, ``solver(a, b)``: BLAS ``?trsm`` with side=L, uplo=L, trans=N, diag=N, alpha=1 in
      place in ``b``, returning ``b``; ``a`` m×m lower triangular (the upper triangle is never
      read), ``b`` m×n; the kernel takes Fortran-contiguous arrays (lda = ldb = m);
    - solve_tri, ``solver(a, b)``: ggml's SOLVE_TRI in place in ``b``, returning ``b``; ``a``
      of shape (b3, b2, n, n), ``b`` (b3, b2, n, k) (ggml's ne reversed, row-major); the kernel
      takes C-contiguous arrays;
    - band_bidiag, ``solver(band) -> (d, e)``: the upper bidiagonal form of an upper band in
      LAPACK band storage, (BW + 1, n); ``band`` is never written; the kernel takes a
      Fortran-ordered band;
    - trsm_batched, ``solver(a, b)``: A_i·X_i = B_i for every batch index i in place in ``b``,
      returning ``b``; ``a`` of shape (batch, m, m) lower triangular, ``b`` (batch, m, n),
      m, n ≤ 64, each matrix row-major; the kernel takes C-contiguous arrays.

    Operands are CuPy arrays on the solver's device (the one current at :func:`load`), which
    must be current when it is called, as for any CuPy operation. The champion kernel runs when
    :meth:`explain` routes the shape to it and the op's call adapter says the arrays fit it
    (``OpCall.kernel_ready``: the loaded dtype, the memory order the kernel takes, the solver's
    device); every other call goes to the fallback. A kernel that raises is reported once (a
    ``logging`` warning on ``"kernevo"``), its shape goes to the fallback from then on, and the
    call is answered by the fallback. The first kernel call of each shape keeps a copy of what
    the kernel overwrites (``OpCall.snapshot``) so that a failure there leaves the operands as
    given.

    The fast path: the first call of an operand :func:`signature` checks the operands, routes
    the shape, builds the driver and keeps a plan; later calls of that signature look the plan
    up and launch (a launch prepared once, :mod:`kernevo.launch`, where the driver's kernel
    arguments are known; else ``OpCall.run``): no checks again, no lock, no logging, no
    allocation, no host synchronization, no CUDA call but the launch. So once a signature has
    been called or prepared (:meth:`prepare`) outside capture, its calls may be captured in a CUDA
    graph by the caller's code (:meth:`capture` does it for a batch); a first call inside a
    capture raises :class:`kernevo.graphs.CaptureError` rather than fetch, load a module and
    query the launch geometry (a device-to-host copy) there.

    Args:
        resolver: routes shapes for one (op, dtype, GPU) (see :class:`kernevo.resolver.Resolver`;
            :func:`load` gives a :class:`WarmResolver` when the warm-start memo holds decisions).
        driver_factory: ``(path_id, cubin, dtype) -> driver``; tests inject fakes.
        fallback: the library path with the op's signature (default the op's
            ``OpCall.fallback``: cuBLAS through CuPy, or LAPACK on the host).
        compile_fn: ``(source, options, arch) -> cubin``, used only when the champion's arch
            differs from the device's.
        call: the op's call adapter (``seeds.ops.OpCall``; default a new one of the op's).
        prepare_launch: ``(driver, operands) -> launch | None``, the launch of a driver prepared
            once per signature (default :func:`kernevo.launch.prepare`; tests inject fakes).
        is_capturing: whether CuPy's current stream is capturing a CUDA graph (default
            :func:`kernevo.graphs.stream_is_capturing`), asked on a signature's first call.
    """

    def __init__(
        self,
        resolver: Resolver | WarmResolver,
        *,
        driver_factory: DriverFactory = path_driver,
        fallback: Fallback | None = None,
        compile_fn: CompileFn = compile_for_arch,
        call: Any = None,
        prepare_launch: Callable[[Any, tuple[Any, ...]], Any] = launches.prepare,
        is_capturing: Callable[[], bool] = stream_is_capturing,
    ) -> None:
        self.op = resolver.op
        self.dtype = resolver.dtype
        self.gpu: GpuInfo = resolver.gpu
        self._spec = ops.get_op(resolver.op)
        self._call = call if call is not None else self._spec.call()
        self._resolver = resolver
        self._driver_factory = driver_factory
        self._fallback = fallback if fallback is not None else self._call.fallback
        self._compile_fn = compile_fn
        self._prepare_launch = prepare_launch
        self._is_capturing = is_capturing
        self._lock = threading.Lock()
        self._drivers: dict[str, KernelDriver | Exception] = {}
        self._proven: set[tuple[int, ...]] = set()
        self._plans: dict[tuple[Any, ...], Plan] = {}

    def __call__(self, *operands: Any) -> Any:
        """The op on ``operands`` (trsm: ``solver(a, b)`` solves in place in ``b`` and returns
        ``b``); see the class doc for each op.

        Raises:
            TypeError: not CuPy arrays, or dtypes the op cannot take.
            ValueError: shapes that do not form a problem of the op.
            kernevo.graphs.CaptureError: the first call of this signature, inside a CUDA stream
                capture.
        """
        try:
            run, shape = self._plans[signature(operands)]
        except (KeyError, AttributeError, TypeError):
            return self._first_call(operands)
        if shape is None:
            return run(*operands)
        try:
            return run(*operands)
        except Exception as error:
            self._pin_to_fallback(shape, error)
            return self._fallback(*operands)

    def explain(self, *shape: int) -> Decision:
        """Where a problem of ``shape`` goes and why (fetches the champions if needed), the
        shape being the op's parameters in order (trsm: ``explain(m, n)`` for A m×m, B m×n;
        solve_tri: ``explain(n, k, b2, b3)``; band_bidiag: ``explain(n, bandwidth)``;
        trsm_batched: ``explain(m, n, batch)``): the path
        (``Decision.path``), the route (kernel or the op's fallback, ``Decision.fallback``
        naming its library), the reason (naming the paths compared when several serve the
        shape) and every serving path as judged (``Decision.compared``).

        Arrays the kernel does not take as they are (another dtype, another memory order) go
        to the fallback whatever this says.

        Raises:
            seeds.ops.ShapeError: (a ``ValueError``, one line naming the shape) not one value per
                parameter of the op, a value that is not an integer (a float, a bool, a string;
                NumPy integers are integers), one below 1 (an empty problem, which no path
                serves: trsm's ``m=0`` is BLAS's quick return), or outside the op's range.
        """
        return self._resolver.resolve(*checked_shape(self._spec, shape))

    def prepare(self, *operands: Any) -> Decision:
        """Make calls on operands like these (each of the same type, shape, strides, dtype and
        device) ready without writing them: check them, route their shape and, where the kernel
        takes them, run the first call on copies (allocated here), which builds the driver,
        asks the kernel's launch geometry and prepares its launch. Later calls of that
        signature, inside a CUDA stream capture too, then only launch. Returns the shape's
        decision.

        Raises:
            TypeError, ValueError: as a call on these operands.
            kernevo.graphs.CaptureError: called inside a CUDA stream capture.
        """
        self._check_count(operands)
        shape = tuple(self._call.shape(*operands))
        if self._is_capturing():
            raise CaptureError(self._capture_message(shape))
        key = _signature_or_none(operands)
        if key is not None and key not in self._plans:
            if self._kernel_decision(shape, operands) is None:
                self._remember(key, (self._fallback, None))
            else:
                scratch = tuple(x.copy(order="K") for x in operands)
                self._first_call(scratch)
                # A copy may have other strides where the operands' are free (a dimension of
                # size 1) yet be checked alike: the same contiguity, shape, dtype, device.
                scratch_key = _signature_or_none(scratch)
                plan = self._plans.get(scratch_key) if scratch_key is not None else None
                if plan is not None:
                    self._remember(key, plan)
        return self._resolver.resolve(*shape)

    def runs_kernel(self, *operands: Any) -> bool:
        """Whether calls on these operands launch the champion kernel (``False``: the op's
        fallback), once :meth:`prepare` or a call has set their signature up; ``False`` before.
        """
        key = _signature_or_none(operands)
        plan = self._plans.get(key) if key is not None else None
        return plan is not None and plan[1] is not None

    def capture(self, calls: Iterable[Sequence[Any]], *, stream: Any = None) -> SolveGraph:
        """A CUDA graph of the calls ``solver(*operands)`` for each operand tuple of ``calls``
        (one shape; :func:`kernevo.graphs.capture`), replayed by ``SolveGraph.replay()``.

        Raises:
            ValueError: no calls, or calls of different shapes.
            kernevo.graphs.CaptureError: a call goes to a fallback that cannot be captured.
        """
        from kernevo.graphs import capture

        return capture(self, calls, stream=stream)

    def _first_call(self, operands: tuple[Any, ...]) -> Any:
        """Check the operands, route them, answer the call, and keep the plan of their
        signature for the calls after."""
        self._check_count(operands)
        shape = tuple(self._call.shape(*operands))
        if self._is_capturing():
            raise CaptureError(self._capture_message(shape))
        key = _signature_or_none(operands)
        decision = self._kernel_decision(shape, operands)
        if decision is not None:
            assert decision.champion is not None
            ran, result = self._run_kernel(decision.champion, operands, shape)
            if ran:
                if key is not None:
                    plan = self._kernel_plan(self._driver(decision.champion), operands)
                    self._remember(key, (plan, shape))
                return result
        if key is not None:
            self._remember(key, (self._fallback, None))
        return self._fallback(*operands)

    def _kernel_decision(
        self, shape: tuple[int, ...], operands: tuple[Any, ...]
    ) -> Decision | None:
        """The shape's decision when it routes to the kernel and the kernel takes these arrays
        as they are (``OpCall.kernel_ready``); ``None`` when the call goes to the fallback."""
        decision = self._resolver.resolve(*shape)
        if decision.route == "kernel" and self._call.kernel_ready(
            self.dtype, self.gpu.index, *operands
        ):
            return decision
        return None

    def _kernel_plan(self, driver: KernelDriver, operands: tuple[Any, ...]) -> Callable[..., Any]:
        """The launch of ``driver`` prepared for the signature of ``operands``, else the op's
        ``OpCall.run`` bound to it. A preparation that raises is a loader bug: logged with its
        traceback, and the driver is called as before."""
        try:
            prepared = self._prepare_launch(driver, operands)
        except Exception:
            log.warning("kernevo: could not prepare the launch; calling the driver", exc_info=True)
            prepared = None
        if prepared is not None:
            return prepared  # type: ignore[no-any-return]
        return functools.partial(self._call.run, driver)

    def _check_count(self, operands: tuple[Any, ...]) -> None:
        """Refuse a call with another number of arrays than the op takes, naming them (the call
        adapter's own ``TypeError`` would name an internal method).

        Raises:
            TypeError: one line, e.g. ``the trsm solver takes 2 arrays (a, b); got 0``.
        """
        names = _operand_names(self._call)
        if names is not None and len(operands) != len(names):
            raise TypeError(
                f"the {self.op} solver takes {len(names)} arrays ({', '.join(names)}); "
                f"got {len(operands)}"
            )

    def _remember(self, key: tuple[Any, ...], plan: Plan) -> None:
        if len(self._plans) >= MAX_PLANS:
            self._plans = {}
        self._plans[key] = plan

    def _capture_message(self, shape: tuple[int, ...]) -> str:
        return (
            f"kernevo: the first {self.op} call on these operands "
            f"({self._spec.assignments(shape, ' ')}) is inside a CUDA stream capture; call the "
            "solver (or solver.prepare) on operands of this shape, layout and dtype once "
            "before capturing: the first call routes, loads and sizes the launch, which a "
            "capture cannot hold"
        )

    def _run_kernel(
        self,
        champion: ChampionKernel | MemoKernel,
        operands: tuple[Any, ...],
        shape: tuple[int, ...],
    ) -> tuple[bool, Any]:
        """Launch the champion: ``(True, result)``, or ``(False, None)`` (and the shape pinned
        to the fallback) if anything raised."""
        snapshot = None
        try:
            driver = self._driver(champion)
            if shape not in self._proven:
                snapshot = self._call.snapshot(*operands)
            result = self._call.run(driver, *operands)
        except Exception as error:
            if snapshot is not None:
                self._call.restore(snapshot, *operands)
            self._pin_to_fallback(shape, error)
            return False, None
        self._proven.add(shape)
        return True, result

    def _pin_to_fallback(self, shape: tuple[int, ...], error: Exception) -> None:
        """Route ``shape`` to the fallback for good after the kernel raised ``error``: the
        resolver's decision, the plans of its signatures, one warning."""
        decision = self._resolver.mark_failed(shape, error)
        self._plans = {key: plan for key, plan in self._plans.items() if plan[1] != shape}
        log.warning(
            "kernevo: %s at %s; using %s for this shape",
            decision.reason,
            self._spec.assignments(shape, " "),
            decision.fallback,
        )

    def _driver(self, champion: ChampionKernel | MemoKernel) -> KernelDriver:
        """The driver of ``champion``, built once; a build failure is remembered and re-raised."""
        with self._lock:
            driver = self._drivers.get(champion.cubin_sha256)
            if driver is None:
                try:
                    driver = build_driver(
                        champion,
                        self.gpu.arch,
                        driver_factory=self._driver_factory,
                        compile_fn=self._compile_fn,
                    )
                except Exception as error:
                    driver = error
                self._drivers[champion.cubin_sha256] = driver
        if isinstance(driver, Exception):
            raise driver
        return driver


class WarmResolver:
    """The resolver of a solver :func:`load` started from the warm-start memo
    (:mod:`kernevo.warm_start`): a shape the memo holds, while its decision still holds, is
    routed as the memo says (no settings parsed, no trust check run, nothing of pydantic,
    cryptography or httpx imported); any other shape by the full :class:`kernevo.resolver.Resolver`,
    built by ``full()`` on the first such shape (which records its decisions in the memo).
    Decisions are kept per shape, as the full resolver keeps its own; safe to share between
    threads.

    Args:
        op, dtype: the problem (:func:`check_problem` passed).
        gpu: the device served (:func:`kernevo.device.current_gpu`).
        memo: the memo read by :meth:`kernevo.warm_start.WarmStart.open`.
        full: builds the full resolver (:func:`load`'s own way; settings, trust policy, fetcher).
    """

    def __init__(
        self, op: str, dtype: str, gpu: GpuInfo, memo: WarmStart, full: Callable[[], Resolver]
    ) -> None:
        self.op = op
        self.dtype = dtype
        self.gpu = gpu
        self._spec = ops.get_op(op)
        self._memo = memo
        self._build_full = full
        self._full: Resolver | None = None
        self._lock = threading.Lock()
        self._decisions: dict[tuple[int, ...], Decision] = {}
        self._memoed: set[tuple[int, ...]] = set()

    def resolve(self, *shape: int) -> Decision:
        """The decision for ``shape`` (as :meth:`kernevo.resolver.Resolver.resolve`): the memo's
        (its reason says so) or the full resolver's.

        Raises:
            seeds.ops.ShapeError: ``shape`` has not one value per parameter of the op (the full
                resolver's check: no memo holds such a shape).
        """
        with self._lock:
            decision = self._decisions.get(shape)
            if decision is None:
                decision = self._memo.decision(shape)
                if decision is not None:
                    self._memoed.add(shape)
                else:
                    decision = self._decide_fully(shape)
                self._decisions[shape] = decision
            return decision

    def mark_failed(self, shape: tuple[int, ...], error: BaseException) -> Decision:
        """Pin ``shape`` to the fallback after the kernel raised ``error`` (as
        :meth:`kernevo.resolver.Resolver.mark_failed`); returns the new decision. The memo keeps
        its decision: a kernel that fails here is tried again by the next process, as after a
        full decision."""
        with self._lock:
            if shape in self._memoed or self._full is None:
                decision = pinned_to_fallback(
                    shape,
                    self._decisions.get(shape),
                    error,
                    self._spec.fallback_route,
                    self._spec.fallback_library,
                )
            else:
                decision = self._full.mark_failed(shape, error)
            self._decisions[shape] = decision
            return decision

    def _decide_fully(self, shape: tuple[int, ...]) -> Decision:
        """The full resolver's decision, the resolver built first if need be. Its settings
        parsed when the memo was written, so building it fails only when its inputs changed
        since :func:`load` (a key file removed meanwhile): then the fallback, with the reason
        ``loader error: …`` and a warning, as the full resolver answers a fault of its own."""
        if self._full is None:
            try:
                self._full = self._build_full()
            except Exception as error:
                log.warning("kernevo: could not build the loader's resolver", exc_info=True)
                return Decision(
                    shape,
                    self._spec.fallback_route,
                    f"loader error: {type(error).__name__}: {error}",
                    fallback=self._spec.fallback_library,
                )
        return self._full.resolve(*shape)


def _operand_names(call: Any) -> tuple[str, ...] | None:
    """The operands ``call.shape`` takes, by name (``None``: any number, a ``*operands``)."""
    import inspect

    names = []
    for param in inspect.signature(call.shape).parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
    return tuple(names)


# Parameters whose 0 is a problem rather than an empty one: a band of bandwidth 0 is diagonal.
# Elsewhere a 0 empties the problem (trsm's m=0 is BLAS's quick return), which no path serves.
_ZERO_IS_A_PROBLEM = frozenset({("band_bidiag", "bandwidth")})


def checked_shape(spec: Any, shape: tuple[Any, ...]) -> tuple[int, ...]:
    """``shape`` (an op's parameters in order, as :meth:`OpSolver.explain` takes them) as a
    tuple of ``int``, checked: one value per parameter of ``spec`` (a ``seeds.ops.OpSpec``),
    each an integer (``operator.index``: NumPy integers are; bools, floats and strings are
    not), inside the op's range narrowed to at least 1 (0 where a parameter's 0 is a real
    problem, :data:`_ZERO_IS_A_PROBLEM`), and the op's relations (``OpSpec.check_shape``).

    Raises:
        seeds.ops.ShapeError: the first problem, one line naming the shape and the parameter;
            a value out of range is told with the range checked here (``m=0 is out of range:
            trsm takes 1 <= m <= 2147483647``, not the op's ``0 <= m``).
    """
    import dataclasses
    import operator

    shown = repr(tuple(shape))
    shown = shown if len(shown) <= 120 else f"{shown[:117]}..."
    names = spec.param_names
    values = [] if len(shape) == len(names) else list(shape)  # the count: check_shape says
    for param, value in zip(spec.params, shape if not values else (), strict=False):
        name = param.name
        # bool is an int, and NumPy's bool_ has __index__: neither is a size.
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            index = None
        else:
            try:
                index = operator.index(value)
            except TypeError:
                index = None
        if index is None:
            raise ops.ShapeError(
                f"shape {shown}: {name}={value!r:.40} is not an integer", param=name, kind="range"
            )
        least = 0 if (spec.name, name) in _ZERO_IS_A_PROBLEM else 1
        # One range, told as checked: the op's with its lower bound raised to ``least``.
        checked = dataclasses.replace(param, low=max(param.low, least))
        if problem := checked.out_of_range(index, spec.name):
            raise ops.ShapeError(f"shape {shown}: {problem}", param=name, kind="range")
        values.append(index)
    try:
        return tuple(spec.check_shape(values))
    except ops.ShapeError as error:
        raise ops.ShapeError(
            f"shape {shown}: {error}", param=error.param, kind=error.kind
        ) from None


TrsmSolver = OpSolver
"""The solver of trsm (``kernevo.load("trsm", dtype)``): an :class:`OpSolver`; the name stays
for code written before other ops."""


def check_problem(op: str, dtype: str) -> None:
    """Check that ``op`` is an op of the registry (``seeds.ops``) defined for ``dtype``.

    An op whose paths have no champion yet, or no path at all, still loads: every call goes to
    its fallback, and ``explain()`` says why.

    Raises:
        seeds.registry.UnknownOpError: unknown op (a ``ValueError``, one line naming the ops).
        seeds.spec.UnknownDtypeError: a dtype the op is not defined for (a ``ValueError``):
            ``unknown dtype 'float16'; …``, or, for a known dtype the op lacks,
            ``seeds.spec.MissingDtypeError`` (a subclass): ``op solve_tri has no float64
            kernel; it implements float32``.
    """
    spec = ops.get_op(op)
    path_spec.check_dtype(dtype, spec.dtypes, owner=f"op {op}")


def load(
    op: str,
    dtype: str,
    *,
    api_url: str | None = None,
    cache_dir: str | Path | None = None,
    trusted_keys: Sequence[str] | None = None,
    key_dir: str | Path | None = None,
    lock_file: str | Path | None = None,
    cache_max_age_s: float | None = None,
) -> OpSolver:
    """A solver for ``op`` in ``dtype`` on CuPy's current device: a callable with the op's
    signature (:class:`OpSolver`; trsm ``solver(a, b)``, solve_tri ``solver(a, b)``,
    band_bidiag ``solver(band) -> (d, e)``, trsm_batched ``solver(a, b)``).

    Each argument overrides its ``KERNEVO_*`` variable (see :class:`LoaderSettings`):
    ``api_url`` (default ``http://127.0.0.1:8000``), ``cache_dir`` (``~/.cache/kernevo``),
    ``trusted_keys`` (public keys: base64 of the 32 raw bytes or PEM file paths), ``key_dir``
    (the local key pair, ``~/.config/kernevo/keys``), ``lock_file`` and ``cache_max_age_s``
    (``3600``). Only champions signed by a trusted key (and pinned by the lock file, when one
    is given) run; with no trusted key at all every problem goes to the op's fallback and
    :meth:`OpSolver.explain` says so. Nothing is fetched here: each (path, shape bucket) is
    looked up on the first call that needs it, in the disk cache first when its entry was
    written less than ``cache_max_age_s`` seconds ago (then the service is not asked, and the
    HTTP client is never imported), else from the service (:class:`kernevo.resolver.Resolver`).

    Warm start (:mod:`kernevo.warm_start`): when a process has decided a shape the full way
    and the decision rests on the disk cache alone, it is recorded in a memo beside the disk
    cache, MAC'd with a secret of the key folder and bound to a fingerprint of the
    ``KERNEVO_*`` variables, these arguments, the trust inputs (key and lock files), the GPU
    and the loader's code. A later ``load`` whose fingerprint matches routes those shapes from
    the memo (:class:`WarmResolver`), launching the memo'd cubin after checking its sha256 and
    that the disk-cache files the decision read are unchanged and fresh: no settings parsed, no
    trust check run, and pydantic, cryptography and httpx never imported; any other shape is
    decided the full way. ``KERNEVO_WARM_START=0`` turns it off.

    Raises:
        ValueError: unknown op or dtype (checked before any CUDA call); ``trusted_keys`` given
            as one string rather than a list of keys; a trusted key or lock file that cannot be
            read or parsed (``KeyFileError``, ``LockFileError``: one line naming the variable or
            argument and the value as written);
            a setting or argument that does not parse or is out of range (``SettingsError``,
            one line naming it, e.g. ``cache_max_age_s=-1``).
        ModuleNotFoundError: what the op's fallback needs is not installed (band_bidiag's
            LAPACK comes with SciPy, which the light ``kernevo`` wheel does not depend on).
        kernevo.device.NoGpuError: no usable CUDA device (one line: no NVIDIA driver, a driver
            too old, or no device).
    """
    check_problem(op, dtype)
    if isinstance(trusted_keys, str | bytes):
        # tuple("abc") would be three one-letter "keys", each then "cannot read".
        from kernevo.environment import shorten

        shown = shorten(trusted_keys if isinstance(trusted_keys, str) else repr(trusted_keys))
        raise ValueError(
            f"trusted_keys={shown!r}: a list of keys (each base64 of 32 raw bytes or a PEM file "
            f"path), not one string; pass [{shown!r}]"
        )
    call = ops.get_op(op).call()  # its constructor checks what its fallback needs
    arguments: dict[str, Any] = {}
    if api_url is not None:
        arguments["api_url"] = api_url
    if cache_dir is not None:
        arguments["cache_dir"] = Path(cache_dir)
    if trusted_keys is not None:
        arguments["trusted_keys"] = tuple(trusted_keys)
    if key_dir is not None:
        arguments["key_dir"] = Path(key_dir)
    if lock_file is not None:
        # As given (LoaderSettings makes it a Path): an error quotes it as the caller wrote it.
        arguments["lock_file"] = lock_file
    if cache_max_age_s is not None:
        arguments["cache_max_age_s"] = cache_max_age_s
    try:
        gpu: GpuInfo | None = current_gpu()
    except NoGpuError:
        gpu = None  # the full path raises it again, after its settings' errors as before
    memo = WarmStart.open(op, dtype, gpu, arguments) if gpu is not None else None
    resolver: Resolver | WarmResolver
    if memo is not None and memo.holds_decisions():
        assert gpu is not None
        full = functools.partial(_full_resolver, op, dtype, arguments, gpu, memo)
        resolver = WarmResolver(op, dtype, gpu, memo, full)
    else:
        resolver = _full_resolver(op, dtype, arguments, gpu, memo)
    return OpSolver(resolver, call=call)


def _full_resolver(
    op: str,
    dtype: str,
    arguments: dict[str, Any],
    gpu: GpuInfo | None,
    memo: WarmStart | None,
) -> Resolver:
    """The resolver :func:`load` builds the full way: the settings (``arguments`` over the
    ``KERNEVO_*`` variables), the trust policy, the service's fetcher and the disk cache, the
    device (``gpu``, else asked now) and the warm-start ``memo`` it records its decisions in
    (dropped when the settings it read without pydantic differ from these, or when what its
    fingerprint was taken from changed since: :meth:`WarmStart.inputs_unchanged`).

    Raises:
        As :func:`load`: ``SettingsError``, ``KeyFileError``, ``LockFileError``, ``NoGpuError``.
    """
    from kernevo.cache import ChampionCache
    from kernevo.client import service_fetcher
    from kernevo.environment import service_id
    from kernevo.resolver import Resolver
    from kernevo.settings import LoaderSettings
    from kernevo.trust import policy_from_settings

    settings = LoaderSettings(**arguments)
    trust = policy_from_settings(settings, arguments)
    # Read now, maybe long after WarmStart.open (a WarmResolver builds this on the first shape
    # its memo lacks): decisions are recorded under open's fingerprint only while these inputs
    # are the ones it was taken from.
    if memo is not None and not (memo.agrees_with(settings) and memo.inputs_unchanged(arguments)):
        memo = None
    return Resolver(
        op,
        dtype,
        gpu=gpu if gpu is not None else current_gpu(),
        fetch=service_fetcher(
            settings.api_url,
            op=op,
            timeout_s=settings.request_timeout_s,
            token=settings.api_token.get_secret_value() if settings.api_token else None,
        ),
        cache=ChampionCache(settings.cache_dir, service=service_id(settings.api_url)),
        trust=trust,
        cache_max_age_s=settings.cache_max_age_s,
        warm_start=memo,
    )
