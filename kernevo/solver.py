"""``kernevo.load``: the callable applications use, dispatching each call of an op by its shape
to the champion kernel of the fastest path serving it (inside that champion's verified
envelope) and to the op's library fallback everywhere else (trsm: cuBLAS ?trsm; solve_tri:
cuBLAS's batched TRSM; band_bidiag: LAPACK ?gbbrd on the host CPU; ``seeds.ops``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, service_fetcher
from kernevo.device import GpuInfo, current_gpu
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
from kernevo.resolver import Decision, Resolver
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings

log = logging.getLogger("kernevo")

Fallback = Callable[..., Any]


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
      Fortran-ordered band.

    Operands are CuPy arrays on the solver's device (the one current at :func:`load`), which
    must be current when it is called, as for any CuPy operation. The champion kernel runs when
    :meth:`explain` routes the shape to it and the op's call adapter says the arrays fit it
    (``OpCall.kernel_ready``: the loaded dtype, the memory order the kernel takes, the solver's
    device); every other call goes to the fallback. A kernel that raises is reported once (a
    ``logging`` warning on ``"kernevo"``), its shape goes to the fallback from then on, and the
    call is answered by the fallback. The first kernel call of each shape keeps a copy of what
    the kernel overwrites (``OpCall.snapshot``) so that a failure there leaves the operands as
    given.

    Args:
        resolver: routes shapes for one (op, dtype, GPU) (see :class:`kernevo.resolver.Resolver`).
        driver_factory: ``(path_id, cubin, dtype) -> driver``; tests inject fakes.
        fallback: the library path with the op's signature (default the op's
            ``OpCall.fallback``: cuBLAS through CuPy, or LAPACK on the host).
        compile_fn: ``(source, options, arch) -> cubin``, used only when the champion's arch
            differs from the device's.
        call: the op's call adapter (``seeds.ops.OpCall``; default a new one of the op's).
    """

    def __init__(
        self,
        resolver: Resolver,
        *,
        driver_factory: DriverFactory = path_driver,
        fallback: Fallback | None = None,
        compile_fn: CompileFn = compile_for_arch,
        call: Any = None,
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
        self._lock = threading.Lock()
        self._drivers: dict[str, KernelDriver | Exception] = {}
        self._proven: set[tuple[int, ...]] = set()

    def __call__(self, *operands: Any) -> Any:
        """The op on ``operands`` (trsm: ``solver(a, b)`` solves in place in ``b`` and returns
        ``b``); see the class doc for each op.

        Raises:
            TypeError: not CuPy arrays, or dtypes the op cannot take.
            ValueError: shapes that do not form a problem of the op.
        """
        shape = tuple(self._call.shape(*operands))
        decision = self._resolver.resolve(*shape)
        if decision.route == "kernel" and self._call.kernel_ready(
            self.dtype, self.gpu.index, *operands
        ):
            assert decision.champion is not None
            ran, result = self._run_kernel(decision.champion, operands, shape)
            if ran:
                return result
        return self._fallback(*operands)

    def explain(self, *shape: int) -> Decision:
        """Where a problem of ``shape`` goes and why (fetches the champions if needed), the
        shape being the op's parameters in order (trsm: ``explain(m, n)`` for A m×m, B m×n;
        solve_tri: ``explain(n, k, b2, b3)``; band_bidiag: ``explain(n, bandwidth)``): the path
        (``Decision.path``), the route (kernel or the op's fallback, ``Decision.fallback``
        naming its library), the reason (naming the paths compared when several serve the
        shape) and every serving path as judged (``Decision.compared``).

        Arrays the kernel does not take as they are (another dtype, another memory order) go
        to the fallback whatever this says.

        Raises:
            seeds.ops.ShapeError: not one value per parameter of the op.
        """
        return self._resolver.resolve(*shape)

    def _run_kernel(
        self, champion: ChampionKernel, operands: tuple[Any, ...], shape: tuple[int, ...]
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
            decision = self._resolver.mark_failed(shape, error)
            log.warning(
                "kernevo: %s at %s; using %s for this shape",
                decision.reason,
                self._spec.assignments(shape, " "),
                decision.fallback,
            )
            return False, None
        self._proven.add(shape)
        return True, result

    def _driver(self, champion: ChampionKernel) -> KernelDriver:
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


TrsmSolver = OpSolver
"""The solver of trsm (``kernevo.load("trsm", dtype)``): an :class:`OpSolver`; the name stays
for code written before other ops."""


def check_problem(op: str, dtype: str) -> None:
    """Check that ``op`` is an op of the registry (``seeds.ops``) defined for ``dtype``.

    An op whose paths have no champion yet, or no path at all, still loads: every call goes to
    its fallback, and ``explain()`` says why.

    Raises:
        seeds.registry.UnknownOpError: unknown op (a ``ValueError``, one line naming the ops).
        seeds.spec.UnknownDtypeError: a dtype the op is not defined for (a ``ValueError``).
    """
    spec = ops.get_op(op)
    path_spec.check_dtype(dtype, spec.dtypes)


def load(
    op: str,
    dtype: str,
    *,
    api_url: str | None = None,
    cache_dir: str | Path | None = None,
    trusted_keys: Sequence[str] | None = None,
    key_dir: str | Path | None = None,
    lock_file: str | Path | None = None,
) -> OpSolver:
    """A solver for ``op`` in ``dtype`` on CuPy's current device: a callable with the op's
    signature (:class:`OpSolver`; trsm ``solver(a, b)``, solve_tri ``solver(a, b)``,
    band_bidiag ``solver(band) -> (d, e)``).

    Each argument overrides its ``KERNEVO_*`` variable (see :class:`LoaderSettings`):
    ``api_url`` (default ``http://127.0.0.1:8000``), ``cache_dir`` (``~/.cache/kernevo``),
    ``trusted_keys`` (public keys: base64 of the 32 raw bytes or PEM file paths), ``key_dir``
    (the local key pair, ``~/.config/kernevo/keys``) and ``lock_file``. Only champions signed
    by a trusted key (and pinned by the lock file, when one is given) run; with no trusted key
    at all every problem goes to the op's fallback and :meth:`OpSolver.explain` says so.
    Nothing is fetched here: each (path, shape bucket) is fetched on the first call that needs
    it.

    Raises:
        ValueError: unknown op or dtype (checked before any CUDA call); a trusted key or lock
            file that cannot be read or parsed (``KeyFileError``, ``LockFileError``: one line).
        ModuleNotFoundError: what the op's fallback needs is not installed (band_bidiag's
            LAPACK comes with SciPy, which the light ``kernevo`` wheel does not depend on).
        kernevo.device.NoGpuError: no usable CUDA device (one line: no NVIDIA driver, a driver
            too old, or no device).
    """
    check_problem(op, dtype)
    call = ops.get_op(op).call()  # its constructor checks what its fallback needs
    overrides: dict[str, Any] = {}
    if api_url is not None:
        overrides["api_url"] = api_url
    if cache_dir is not None:
        overrides["cache_dir"] = Path(cache_dir)
    if trusted_keys is not None:
        overrides["trusted_keys"] = tuple(trusted_keys)
    if key_dir is not None:
        overrides["key_dir"] = Path(key_dir)
    if lock_file is not None:
        overrides["lock_file"] = Path(lock_file)
    settings = LoaderSettings(**overrides)
    trust = policy_from_settings(settings)
    resolver = Resolver(
        op,
        dtype,
        gpu=current_gpu(),
        fetch=service_fetcher(settings.api_url, op=op, timeout_s=settings.request_timeout_s),
        cache=ChampionCache(settings.cache_dir),
        trust=trust,
    )
    return OpSolver(resolver, call=call)
