"""``kernevo.load``: the callable applications use, dispatching each TRSM by its shape to the
champion kernel of the fastest path serving it (inside that champion's verified envelope) and to
cuBLAS everywhere else."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, service_fetcher
from kernevo.device import GpuInfo, current_gpu
from kernevo.fallback import check_operands, cublas_trsm, device_index
from kernevo.kernel import (
    CompileFn,
    DriverFactory,
    KernelDriver,
    build_driver,
    compile_for_arch,
    path_driver,
)
from kernevo.paths import registry
from kernevo.paths import spec as path_spec
from kernevo.resolver import Decision, Resolver
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings

log = logging.getLogger("kernevo")

Fallback = Callable[[Any, Any], Any]


class TrsmSolver:
    """``solver(a, b)``: solve A·X = B in place in ``b`` and return ``b``.

    BLAS ``?trsm`` with side=L, uplo=L, trans=N, diag=N, alpha=1: ``a`` is m×m lower triangular
    (the upper triangle is never read), ``b`` is m×n; both CuPy arrays on the solver's device
    (the one current at :func:`load`), which must be current when it is called, as for any
    CuPy operation.
    The champion kernel runs when :meth:`explain` routes (m, n) to it and both arrays are
    Fortran-contiguous (lda = ldb = m) of the loaded dtype; every other call goes to cuBLAS.
    A kernel that raises is reported once (a ``logging`` warning on ``"kernevo"``), its shape
    goes to cuBLAS from then on, and the call is answered by cuBLAS. The first kernel call of
    each shape keeps a copy of ``b`` so that a failure there leaves ``b`` as given.

    Args:
        resolver: routes shapes for one (op, dtype, GPU) (see :class:`kernevo.resolver.Resolver`).
        driver_factory: ``(path_id, cubin, dtype) -> driver``; tests inject fakes.
        fallback: ``(a, b) -> b``, the vendor path (default cuBLAS through CuPy).
        compile_fn: ``(source, options, arch) -> cubin``, used only when the champion's arch
            differs from the device's.
    """

    def __init__(
        self,
        resolver: Resolver,
        *,
        driver_factory: DriverFactory = path_driver,
        fallback: Fallback = cublas_trsm,
        compile_fn: CompileFn = compile_for_arch,
    ) -> None:
        self.op = resolver.op
        self.dtype = resolver.dtype
        self.gpu: GpuInfo = resolver.gpu
        self._resolver = resolver
        self._driver_factory = driver_factory
        self._fallback = fallback
        self._compile_fn = compile_fn
        self._lock = threading.Lock()
        self._drivers: dict[str, KernelDriver | Exception] = {}
        self._proven: set[tuple[int, int]] = set()

    def __call__(self, a: Any, b: Any) -> Any:
        """Solve A·X = B in place in ``b`` (m×n) with ``a`` (m×m, lower); returns ``b``.

        Raises:
            TypeError: not CuPy arrays, or dtypes that cannot be solved in place in ``b``.
            ValueError: shapes that do not form a TRSM problem.
        """
        m, n = check_operands(a, b)
        decision = self._resolver.resolve(m, n)
        if decision.route == "kernel" and self._eligible(a, b):
            assert decision.champion is not None
            if self._run_kernel(decision.champion, a, b, m, n):
                return b
        self._fallback(a, b)
        return b

    def explain(self, m: int, n: int) -> Decision:
        """Where a problem with A m×m and B m×n goes and why (fetches the champions if needed):
        the path (``Decision.path``), the route (kernel or cuBLAS), the reason (naming the
        paths compared when several serve the shape) and every serving path as judged
        (``Decision.compared``).

        Arrays that are not Fortran-contiguous or not of the loaded dtype go to cuBLAS whatever
        this says.
        """
        return self._resolver.resolve(m, n)

    def _eligible(self, a: Any, b: Any) -> bool:
        """Whether the arrays fit the kernel: loaded dtype, Fortran order, the solver's device."""
        return (
            a.dtype == self.dtype
            and b.dtype == self.dtype
            and a.flags.f_contiguous
            and b.flags.f_contiguous
            and device_index(b) == self.gpu.index
        )

    def _run_kernel(self, champion: ChampionKernel, a: Any, b: Any, m: int, n: int) -> bool:
        """Launch the champion; ``False`` (and the shape pinned to cuBLAS) if anything raised."""
        backup = None
        try:
            driver = self._driver(champion)
            if (m, n) not in self._proven:
                backup = b.copy(order="F")
            driver.solve(a, b, None)
        except Exception as error:
            if backup is not None:
                b[...] = backup
            decision = self._resolver.mark_failed(m, n, error)
            log.warning(
                "kernevo: %s at m=%d n=%d; using cuBLAS for this shape", decision.reason, m, n
            )
            return False
        self._proven.add((m, n))
        return True

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


_SOLVERS: dict[str, type[TrsmSolver]] = {"trsm": TrsmSolver}


def check_problem(op: str, dtype: str) -> None:
    """Check that ``op`` has a loader and some path serves it in ``dtype``.

    Raises:
        seeds.registry.UnknownOpError: unknown op (a ``ValueError``, one line).
        seeds.spec.UnknownDtypeError: a dtype no path of ``op`` serves (a ``ValueError``).
    """
    if op not in registry.OPS or op not in _SOLVERS:
        known = ", ".join(sorted(set(registry.OPS) & set(_SOLVERS)))
        raise registry.UnknownOpError(f"unknown op {op!r}; known ops: {known}")
    served = sorted({d for spec in registry.PATHS.values() if spec.op == op for d in spec.dtypes})
    path_spec.check_dtype(dtype, tuple(served))


def load(
    op: str,
    dtype: str,
    *,
    api_url: str | None = None,
    cache_dir: str | Path | None = None,
    trusted_keys: Sequence[str] | None = None,
    key_dir: str | Path | None = None,
    lock_file: str | Path | None = None,
) -> TrsmSolver:
    """A solver for ``op`` in ``dtype`` on CuPy's current device.

    Each argument overrides its ``KERNEVO_*`` variable (see :class:`LoaderSettings`):
    ``api_url`` (default ``http://127.0.0.1:8000``), ``cache_dir`` (``~/.cache/kernevo``),
    ``trusted_keys`` (public keys: base64 of the 32 raw bytes or PEM file paths), ``key_dir``
    (the local key pair, ``~/.config/kernevo/keys``) and ``lock_file``. Only champions signed
    by a trusted key (and pinned by the lock file, when one is given) run; with no trusted key
    at all every problem goes to cuBLAS and :meth:`TrsmSolver.explain` says so. Nothing is
    fetched here: each (path, shape bucket) is fetched on the first call that needs it.

    Raises:
        ValueError: unknown op or dtype (checked before any CUDA call); a trusted key or lock
            file that cannot be read or parsed (``KeyFileError``, ``LockFileError``: one line).
        kernevo.device.NoGpuError: no usable CUDA device (one line: no NVIDIA driver, a driver
            too old, or no device).
    """
    check_problem(op, dtype)
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
    return _SOLVERS[op](resolver)
