"""Choosing, for each problem shape, between the champion kernel and cuBLAS — and saying why.

Order of questions for a shape (m, n), each answered once and remembered:

1. Does a path serve the problem? (``seeds.registry.route``) — if not, cuBLAS.
2. Is there a verified champion for that path and shape bucket on this GPU? The service is asked
   once per (path, bucket); a champion it sends (sha256 checked) is written to the disk cache.
   If the service is unreachable, has none (404) or sends something unusable, the disk cache
   answers; if it has nothing either, cuBLAS.
3. Is (m, n) inside the champion's verified envelope? If not, cuBLAS.
4. Did the kernel fail on this shape before (:meth:`Resolver.mark_failed`)? Then cuBLAS for good.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, ChampionKey, FetchOutcome
from kernevo.device import GpuInfo
from seeds import registry

log = logging.getLogger("kernevo")

Fetcher = Callable[[ChampionKey, int, int], FetchOutcome]
"""Fetches the champion for a key, given the problem shape (m, n) that asked for it."""


@dataclass(frozen=True)
class Decision:
    """Where the problem (m, n) goes and why.

    ``route`` is ``"kernel"`` (the champion's cubin through the path driver) or ``"cublas"``.
    ``reason`` is one line, e.g. ``"champion program 17 from service"``,
    ``"champion program 17 from disk cache (service unreachable: ConnectError: ...)"``,
    ``"outside envelope m_max=48 n_max=64 of champion program 17 (m=50, n=8)"``,
    ``"no path serves m=100 n=100"``, ``"kernel error: RuntimeError: ..."``.
    ``champion`` is the kernel to launch (set when ``route == "kernel"``, and when a champion
    exists but does not cover the shape).
    """

    m: int
    n: int
    route: Literal["kernel", "cublas"]
    reason: str
    path: str | None = None
    shape_bucket: str | None = None
    champion: ChampionKernel | None = field(default=None, repr=False)


@dataclass(frozen=True)
class _Acquired:
    """The champion found for one (path, bucket), or ``None``, with where it came from."""

    champion: ChampionKernel | None
    reason: str


class Resolver:
    """Per-shape routing for one (op, dtype) on one GPU; safe to share between threads.

    Args:
        op: an operation of ``seeds.registry`` (``"trsm"``).
        dtype: ``float32``, ``float64``, ``complex64`` or ``complex128``.
        gpu: the device served; its ``key`` is the service's ``gpu=`` and the cache folder,
            its ``arch`` is compared with the champion's.
        fetch: asks the service (see :func:`kernevo.client.service_fetcher`).
        cache: the disk cache; ``None`` for none.
    """

    def __init__(
        self,
        op: str,
        dtype: str,
        *,
        gpu: GpuInfo,
        fetch: Fetcher,
        cache: ChampionCache | None,
    ) -> None:
        self.op = op
        self.dtype = dtype
        self.gpu = gpu
        self._fetch = fetch
        self._cache = cache
        self._lock = threading.Lock()
        self._decisions: dict[tuple[int, int], Decision] = {}
        self._acquired: dict[tuple[str, str], _Acquired] = {}

    def resolve(self, m: int, n: int) -> Decision:
        """The decision for the problem A (m×m), B (m×n); computed on first use, then cached.

        Raises:
            seeds.registry.UnknownOpError, seeds.spec.UnknownDtypeError: bad op/dtype (both
                ``ValueError``; :func:`kernevo.load` checks them up front).
        """
        with self._lock:
            decision = self._decisions.get((m, n))
            if decision is None:
                decision = self._decide(m, n)
                self._decisions[(m, n)] = decision
            return decision

    def mark_failed(self, m: int, n: int, error: BaseException) -> Decision:
        """Pin (m, n) to cuBLAS after the kernel raised ``error``; returns the new decision."""
        with self._lock:
            old = self._decisions.get((m, n))
            decision = Decision(
                m=m,
                n=n,
                route="cublas",
                reason=f"kernel error: {type(error).__name__}: {error}",
                path=old.path if old else None,
                shape_bucket=old.shape_bucket if old else None,
                champion=old.champion if old else None,
            )
            self._decisions[(m, n)] = decision
            return decision

    def _decide(self, m: int, n: int) -> Decision:
        route = registry.route(self.op, self.dtype, m, n)
        if route is None:
            return Decision(m, n, "cublas", f"no path serves m={m} n={n}")
        path, bucket = route.path_id, route.shape_bucket
        acquired = self._acquired.get((path, bucket))
        if acquired is None:
            acquired = self._acquire(ChampionKey(self.gpu.key, path, self.dtype, bucket), m, n)
            self._acquired[(path, bucket)] = acquired
        champion = acquired.champion
        if champion is None:
            return Decision(m, n, "cublas", acquired.reason, path, bucket)
        envelope = champion.envelope
        if not envelope.contains(m, n):
            reason = (
                f"outside envelope m_max={envelope.m_max} n_max={envelope.n_max} "
                f"of champion program {champion.program_id} (m={m}, n={n})"
            )
            return Decision(m, n, "cublas", reason, path, bucket, champion)
        reason = acquired.reason
        if champion.arch != self.gpu.arch:
            reason += f"; recompiled for {self.gpu.arch} (built for {champion.arch})"
        return Decision(m, n, "kernel", reason, path, bucket, champion)

    def _acquire(self, key: ChampionKey, m: int, n: int) -> _Acquired:
        """The champion for ``key``: from the service if it gives one, else the disk cache."""
        outcome = self._fetch(key, m, n)
        if outcome.champion is not None:
            if self._cache is not None:
                try:
                    self._cache.store(outcome.champion)
                except OSError as error:
                    log.warning("kernevo: could not write the disk cache: %s", error)
            return _Acquired(outcome.champion, outcome.detail)
        if self._cache is None:
            return _Acquired(None, outcome.detail)
        cached = self._cache.load(key)
        if cached.champion is None:
            return _Acquired(None, f"{outcome.detail}; {cached.detail}")
        return _Acquired(cached.champion, f"{cached.detail} ({outcome.detail})")
