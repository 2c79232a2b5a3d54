"""Choosing, for each problem shape, between the champion kernels of the paths serving it and
the op's library fallback (cuBLAS for trsm and solve_tri, LAPACK on the host for band_bidiag:
``seeds.ops.OpSpec.fallback_route``; "cuBLAS" below) — and saying why.

A shape is a tuple of the op's shape parameters in order (trsm: (m, n); ``seeds.ops``). Order
of questions for a shape, each answered once and remembered:

1. Which paths serve the problem? (``seeds.registry.route``: each with its shape bucket
   holding the shape) — if none, cuBLAS. If the loader trusts no key at all
   (:attr:`kernevo.trust.TrustPolicy.keys` empty: ``KERNEVO_TRUST_LOCAL_KEY=false`` and no
   ``KERNEVO_TRUSTED_KEYS``, or no usable local key), cuBLAS too, decided up front without
   asking the service or reading the disk cache: every champion would be refused
   (``no_trusted_key``), and the reason says how to configure a key (``"no trusted key
   configured (set KERNEVO_TRUSTED_KEYS …)"``). Questions 2–5 are asked of each; of the
   paths whose champion passes them all, the one measured fastest at the shape runs
   (``seeds.registry.fastest``, the rule the service's best-kernel query applies), and the
   decision lists every path compared (:attr:`Decision.compared`). A champion whose own
   evaluation timed it slower than cuBLAS at this very shape (beyond its noise floor:
   ``seeds.registry.Measured.slower_than_vendor``, read from its signed certificate) does
   not run it (``"champion program 39 was measured slower than cuBLAS at m=129, n=8192:
   0.98x (…)"``). If none passes, cuBLAS.
2. Is there a verified champion for that path and shape bucket on this GPU that this loader
   trusts? Asked once per (path, bucket). A champion, from the disk cache or the service, must
   pass the trust checks (cubin digest recomputed, Ed25519 signature by a trusted key, lock
   file; see :mod:`kernevo.trust`) and, when it must be recompiled for this GPU's arch, the
   NVRTC option allow-list (:func:`kernevo.kernel.refused_option`); a disk-cache entry passes
   them again on every read, so a file changed after it was written is refused.

   a. Cache first: when the disk cache's entry for the (path, bucket) was written less than
      ``cache_max_age_s`` ago (``KERNEVO_CACHE_MAX_AGE_S``; every fetch the service answers
      with an admitted champion rewrites it) and its champion is admitted, it is used and the
      service is not asked (``"champion program 17 from disk cache (written 12 s ago, within
      KERNEVO_CACHE_MAX_AGE_S=3600; service not asked)"``). This is HTTP's ``max-age``
      freshness, chosen by the loader since the service sends no ``Cache-Control``: a champion
      promoted meanwhile reaches this loader once the entry is older. ``0`` skips this step.
      Only an entry cached from the service this loader asks counts as fresh (the disk cache
      records each entry's service, :attr:`kernevo.cache.ChampionCache.service`): one from
      another ``KERNEVO_API_URL``, or from a loader that recorded none, is treated as older.
   b. Otherwise (no entry, an older one, one dated ahead of the clock, or a fresh one that was
      refused) the service is asked, naming the path (``path=``); a champion it sends that is
      admitted is written to the disk cache. When the service answers that it has no champion
      for the (path, bucket) (404), that answer is remembered too, as a negative entry of the
      disk cache (:meth:`kernevo.cache.ChampionCache.remember_absent`), and within
      ``cache_max_age_s`` of it the service is not asked again (``"no champion on service
      40 s ago (remembered by the disk cache, within KERNEVO_CACHE_MAX_AGE_S=3600; service not
      asked)"``), so that a shape served by several paths, one of them without a champion,
      starts from the disk cache alone. Only a 404 is remembered: an unreachable service or a
      bad answer says nothing about the champion, and is asked again by the next process. The
      same max-age bounds both answers: a champion promoted meanwhile reaches this loader once
      the negative entry is older. A negative entry of another service (or one that records
      none) is not remembered for this one: the service is asked, so that fixing a wrong
      ``KERNEVO_API_URL`` (a server answering 404 to everything) takes effect at once.
   c. If the service is unreachable, has none (404, asked or remembered), sends something
      unusable or a champion that is refused, the disk cache answers whatever the age of its
      entry, and whichever service it was cached from (the reason then says ``cached from
      service <url>``); if it has nothing usable either, cuBLAS.
3. Is the shape inside the champion's verified envelope? If not, cuBLAS.
4. Was the champion verified under this device's NVIDIA driver, CUDA driver API and NVRTC
   versions (its certificate against :class:`kernevo.device.GpuInfo`)? If one differs, the
   kernel is served with the difference stated (``served not re-verified on this toolkit:
   ...``); with ``KERNEVO_REQUIRE_SAME_TOOLKIT`` a difference, or a version unknown on either
   side, routes to cuBLAS instead. The loader never re-verifies.
5. Did the kernel fail on this shape before (:meth:`Resolver.mark_failed`)? Then cuBLAS for good.

Whatever the service sends or the disk cache holds, a decision comes back within the fetch
timeout (``KERNEVO_REQUEST_TIMEOUT_S``) and never an exception: every fault of the data is a
reason in the decision (see :mod:`kernevo.client`, :mod:`kernevo.cache`).

Given a warm-start memo (:mod:`kernevo.warm_start`, which :func:`kernevo.load` passes), each new
decision that rests on the disk cache alone (no service answer the disk cache did not keep) is
recorded there with the disk-cache files it read, for the next process to replay.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kernevo.cache import CacheLookup, ChampionCache
from kernevo.certificate import Certificate, certified_metrics, compare_toolkit
from kernevo.client import ChampionKernel, ChampionKey, FetchOutcome
from kernevo.decision import Compared, Decision, Route, pinned_to_fallback
from kernevo.device import GpuInfo
from kernevo.kernel import refused_option
from kernevo.paths import ops, registry
from kernevo.text import printable
from kernevo.trust import Refusal, TrustPolicy
from kernevo.warm_start import CacheFile, WarmStart

log = logging.getLogger("kernevo")

Fetcher = Callable[..., FetchOutcome]
"""``fetch(key, *shape)``: fetches the champion for a key, given the problem shape that asked
for it (trsm: ``fetch(key, m, n)``)."""

__all__ = ["Compared", "Decision", "Fetcher", "Resolver", "Route"]


@dataclass(frozen=True)
class _Acquired:
    """The champion found for one (path, bucket), or ``None``, with where it came from, and
    the disk-cache files that answer rests on (each as it was before it was read), or ``None``
    when it rests on the service too (an answer the disk cache did not keep) or on a fault."""

    champion: ChampionKernel | None
    reason: str
    refusals: tuple[Refusal, ...] = ()
    files: tuple[CacheFile, ...] | None = None


class Resolver:
    """Per-shape routing for one (op, dtype) on one GPU; safe to share between threads.

    Args:
        op: an op of ``seeds.ops`` (``"trsm"``, ``"solve_tri"``, ``"band_bidiag"``).
        dtype: ``float32``, ``float64``, ``complex64`` or ``complex128``.
        gpu: the device served; its ``key`` is the service's ``gpu=`` and the cache folder,
            its ``arch`` is compared with the champion's.
        fetch: asks the service (see :func:`kernevo.client.service_fetcher`).
        cache: the disk cache; ``None`` for none.
        trust: the keys and lock file a champion is checked against, from the service and
            from the cache alike (see :func:`kernevo.trust.policy_from_settings`).
        cache_max_age_s: a disk-cache entry written less than this many seconds ago is used
            without asking the service when its champion is admitted, and a 404 remembered
            less than this long ago is not asked again (module doc, questions 2a and 2b;
            ``KERNEVO_CACHE_MAX_AGE_S``, which :func:`kernevo.load` passes); the default ``0``
            asks the service first, always.
        warm_start: the warm-start memo to record each decision in that the next process may
            replay (:meth:`kernevo.warm_start.WarmStart.record`: one resting on the disk cache
            alone); ``None`` (the default) records nothing.
    """

    def __init__(
        self,
        op: str,
        dtype: str,
        *,
        gpu: GpuInfo,
        fetch: Fetcher,
        cache: ChampionCache | None,
        trust: TrustPolicy,
        cache_max_age_s: float = 0.0,
        warm_start: WarmStart | None = None,
    ) -> None:
        self.op = op
        self.op_spec = ops.get_op(op)
        self.dtype = dtype
        self.gpu = gpu
        self._fetch = fetch
        self._cache = cache
        self._trust = trust
        self._cache_max_age_s = cache_max_age_s
        self._warm_start = warm_start
        self._lock = threading.Lock()
        self._decisions: dict[tuple[int, ...], Decision] = {}
        self._acquired: dict[tuple[str, str], _Acquired] = {}
        self._fallback = self.op_spec.fallback_route

    def resolve(self, *shape: int) -> Decision:
        """The decision for the problem of ``shape`` (the op's parameters in order; trsm:
        ``resolve(m, n)`` for A m×m, B m×n); computed on first use, then cached.

        Returns within the fetch's timeout whatever the service answers and the disk cache
        holds; their faults are reasons in the decision, never exceptions.

        Raises:
            seeds.registry.UnknownOpError, seeds.spec.UnknownDtypeError: bad op/dtype (both
                ``ValueError``; :func:`kernevo.load` checks them up front).
            seeds.ops.ShapeError: ``shape`` has not one value per parameter of the op.
        """
        with self._lock:
            decision = self._decisions.get(shape)
            if decision is None:
                decision = self._decide(shape)
                self._decisions[shape] = decision
                if self._warm_start is not None:
                    self._record(shape, decision)
            return decision

    def _record(self, shape: tuple[int, ...], decision: Decision) -> None:
        """Record ``decision`` in the warm-start memo when every serving path's answer rests on
        the disk cache alone (:attr:`_Acquired.files`), with those files and, for a kernel,
        its cubin file; the memo leaves out a kernel it would recompile."""
        assert self._warm_start is not None
        files: list[CacheFile] = []
        for served in registry.route(self.op, self.dtype, *shape):
            acquired = self._acquired.get((served.path_id, served.shape_bucket))
            if acquired is None or acquired.files is None:
                return
            files.extend(acquired.files)
        cubin_file = None
        champion = decision.champion
        if decision.route == "kernel" and champion is not None and self._cache is not None:
            key = ChampionKey(champion.gpu, champion.path, champion.dtype, champion.shape_bucket)
            cubin_file = self._cache.cubin_file(key, champion.cubin_sha256)
        self._warm_start.record(shape, decision, tuple(files), cubin_file)

    def mark_failed(self, shape: tuple[int, ...], error: BaseException) -> Decision:
        """Pin ``shape`` to the fallback after the kernel raised ``error``; returns the new
        decision."""
        with self._lock:
            decision = pinned_to_fallback(
                shape,
                self._decisions.get(shape),
                error,
                self._fallback,
                self.op_spec.fallback_library,
            )
            self._decisions[shape] = decision
            return decision

    def _decision(self, shape: tuple[int, ...], route: Route, reason: str, *args: Any,
                  **kwargs: Any) -> Decision:  # fmt: skip
        """A :class:`Decision` naming this op's fallback library."""
        return Decision(shape, route, reason, *args, fallback=self.op_spec.fallback_library,
                        **kwargs)  # fmt: skip

    def _decide(self, shape: tuple[int, ...]) -> Decision:
        """Each serving path's decision, then the fastest of those that run the kernel."""
        routes = registry.route(self.op, self.dtype, *shape)
        if not routes:
            where = self.op_spec.assignments(shape, " ")
            return self._decision(shape, self._fallback, f"no path serves {where}")
        if not self._trust.keys:
            # Every champion would be refused (TrustPolicy: no_trusted_key), so nothing is asked
            # of the service or read from the disk cache: the reason says how to trust a key.
            refusal = Refusal(
                "no_trusted_key", self._trust.no_trusted_key_detail(), source="settings"
            )
            return self._decision(shape, self._fallback, refusal.detail, refusals=(refusal,))
        each = [self._decide_path(shape, served.path_id, served.shape_bucket) for served in routes]
        measured = {
            # The signed certificate's figures, never the unsigned metrics (a service or a
            # cache could edit those to steer the choice).
            i: registry.measured(served, certified_metrics(decision.champion.certificate), *shape)
            for i, (served, decision) in enumerate(zip(routes, each, strict=True))
            if decision.route == "kernel" and decision.champion is not None
        }
        for i, item in list(measured.items()):
            if item.slower_than_vendor:
                each[i] = self._slower_than_vendor(shape, each[i], item)
                del measured[i]
        chosen = registry.fastest(list(measured.values()))
        winner = None
        if chosen is not None:
            winner = next(i for i, item in measured.items() if item is chosen[0])
        compared = tuple(
            _compared(served, decision, measured.get(i), chosen=i == winner)
            for i, (served, decision) in enumerate(zip(routes, each, strict=True))
        )
        if len(each) == 1:
            return replace(each[0], compared=compared)
        refusals = tuple(refusal for decision in each for refusal in decision.refusals)
        summaries = "; ".join(item.summary() for item in compared)
        if chosen is None or winner is None:
            reason = f"no serving path's champion can run: {summaries}"
            return self._decision(
                shape, self._fallback, reason, refusals=refusals, compared=compared
            )
        reason = f"{each[winner].reason}; fastest of {len(each)} paths by {chosen[1]}: {summaries}"
        return replace(each[winner], reason=reason, refusals=refusals, compared=compared)

    def _slower_than_vendor(
        self, shape: tuple[int, ...], decision: Decision, item: Any
    ) -> Decision:
        """``decision`` (its champion able to run ``shape``) turned to the library: the
        champion's own evaluation timed it slower than the library at this very shape
        (``item``: its ``seeds.registry.Measured``, :attr:`~seeds.registry.Measured.
        slower_than_vendor`)."""
        champion = decision.champion
        assert champion is not None  # only a decision that runs a champion is measured
        reason = (
            f"champion program {champion.program_id} was measured slower than "
            f"{self.op_spec.fallback_library} at {self.op_spec.assignments(shape, ', ')}: "
            f"{item.against_vendor()}"
        )
        return self._decision(
            shape, self._fallback, reason, decision.path, decision.shape_bucket, champion,
            decision.refusals,
        )  # fmt: skip

    def _decide_path(self, shape: tuple[int, ...], path: str, bucket: str) -> Decision:
        """The decision for ``shape`` were ``path`` (at ``bucket``) the only path serving it."""
        acquired = self._acquired.get((path, bucket))
        if acquired is None:
            key = ChampionKey(self.gpu.key, path, self.dtype, bucket)
            try:
                acquired = self._acquire(key, shape)
            except Exception as error:
                # The fetcher, the cache and the trust checks each turn bad data into a reason;
                # anything they still let through (or an injected fetcher's fault) is a loader
                # bug, and a bug must cost this bucket its champion, not the application its
                # trsm() call. Logged with its traceback so that it gets fixed.
                log.warning("kernevo: loader error for %s/%s", path, bucket, exc_info=True)
                reason = f"loader error: {type(error).__name__}: {printable(str(error))}"
                acquired = _Acquired(None, reason)
            self._acquired[(path, bucket)] = acquired
        champion, refusals = acquired.champion, acquired.refusals
        fallback = self._fallback
        if champion is None:
            return self._decision(shape, fallback, acquired.reason, path, bucket, refusals=refusals)
        envelope, params = champion.envelope, self.op_spec.param_names
        if not envelope.contains(shape, params):
            reason = (
                f"outside envelope {envelope.describe(params)} "
                f"of champion program {champion.program_id} "
                f"({self.op_spec.assignments(shape, ', ')})"
            )
            return self._decision(shape, fallback, reason, path, bucket, champion, refusals)
        reason = acquired.reason
        # Admitted champions carry a certificate that parses (TrustPolicy: no_certificate).
        toolkit = compare_toolkit(
            Certificate.model_validate(champion.certificate),
            nvidia_driver_version=self.gpu.nvidia_driver_version,
            cuda_driver_api_version=self.gpu.cuda_driver_api_version,
            nvrtc_version=self.gpu.nvrtc_version,
        )
        if self._trust.require_same_toolkit and toolkit.refused_reason():
            reason = (
                f"champion program {champion.program_id} {toolkit.refused_reason()} "
                "(KERNEVO_REQUIRE_SAME_TOOLKIT)"
            )
            return self._decision(shape, fallback, reason, path, bucket, champion, refusals)
        if champion.arch != self.gpu.arch:
            reason += f"; recompiled for {self.gpu.arch} (built for {champion.arch})"
        if toolkit.served_reason():
            reason += f"; {toolkit.served_reason()}"
        return self._decision(shape, "kernel", reason, path, bucket, champion, refusals)

    def _acquire(self, key: ChampionKey, shape: tuple[int, ...]) -> _Acquired:
        """The champion for ``key`` (module doc, question 2): a fresh disk-cache entry's if it
        is admitted, else the service's if it is admitted (the service not asked within
        ``cache_max_age_s`` of a 404 remembered in the disk cache; a new 404 is remembered),
        else the disk cache's if it is admitted; with every refusal on the way, and the
        disk-cache files the answer rests on (:class:`_Acquired`)."""
        refusals: list[Refusal] = []
        # Each disk-cache file looked at, as it was before it was read: the warm-start memo
        # replays this answer only while they are so (kernevo.warm_start).
        seen: list[CacheFile] = []
        early = None
        # The service another service's entry came from: said in the reason when it serves.
        elsewhere = ""
        age = self._fresh_age(key)
        if age is not None:
            seen.append(self._observe(key, fresh=True))
            early = self._read_cache(key)
            lookup, refusal = early
            if lookup.champion is not None and not self._ours(lookup.service):
                # Cached from another service (or by a loader that did not record one): as an
                # entry older than the max age, asked about first (question 2a).
                seen[-1] = replace(seen[-1], fresh=False)
                elsewhere = _another_service(lookup.service)
            elif lookup.champion is not None and refusal is None:
                reason = (
                    f"{lookup.detail} (written {age:.0f} s ago, within "
                    f"KERNEVO_CACHE_MAX_AGE_S={self._cache_max_age_s:g}; service not asked)"
                )
                return _Acquired(lookup.champion, reason, files=tuple(seen))
            if refusal is not None:
                refusals.append(refusal)
        # Whether the answer rests on the disk cache alone: the service's counts only once the
        # disk cache keeps it (a champion stored, a 404 remembered), as the next process reads.
        kept = True
        absent = self._fresh_age(key, absent=True)
        if absent is not None:
            seen.append(self._observe(key, absent=True, fresh=True))
            service_reason = (
                f"no champion on service {absent:.0f} s ago (remembered by the disk cache, "
                f"within KERNEVO_CACHE_MAX_AGE_S={self._cache_max_age_s:g}; service not asked)"
            )
        else:
            outcome = self._fetch(key, *shape)
            service_reason = outcome.detail
            kept = outcome.status == "not_found" and self._remember_absent(key)
            if kept:
                seen.append(self._observe(key, absent=True, fresh=True))
            if outcome.champion is not None:
                refusal = self._admit(outcome.champion, "service")
                if refusal is None:
                    stored = self._store(outcome.champion)
                    files = (self._observe(key, fresh=True),) if stored else None
                    return _Acquired(outcome.champion, outcome.detail, tuple(refusals), files)
                refusals.append(refusal)
                service_reason = (
                    f"refused champion program {outcome.champion.program_id} from service: "
                    f"{refusal.detail}"
                )
        if self._cache is None:
            return _Acquired(None, service_reason, tuple(refusals))
        # The entry read before asking is not read and judged again.
        if early is None:
            seen.append(self._observe(key, fresh=False))
        lookup, refusal = early if early is not None else self._read_cache(key)
        files = tuple(seen) if kept else None
        if lookup.champion is None:
            return _Acquired(None, f"{service_reason}; {lookup.detail}", tuple(refusals), files)
        if refusal is not None:
            if early is None:
                refusals.append(refusal)
            reason = (
                f"{service_reason}; disk cache: refused champion program "
                f"{lookup.champion.program_id}: {refusal.detail}"
            )
            return _Acquired(None, reason, tuple(refusals), files)
        if early is None and not self._ours(lookup.service):
            elsewhere = _another_service(lookup.service)
        reason = f"{lookup.detail}{elsewhere} ({service_reason})"
        return _Acquired(lookup.champion, reason, tuple(refusals), files)

    def _ours(self, service: str | None) -> bool:
        """Whether a disk-cache entry or negative entry recording ``service`` came from the
        service this resolver asks (:attr:`kernevo.cache.ChampionCache.service`)."""
        assert self._cache is not None
        return service == self._cache.service

    def _observe(self, key: ChampionKey, *, fresh: bool, absent: bool = False) -> CacheFile:
        """``key``'s disk-cache entry (``absent``: its negative entry) as it is now, ``fresh``
        when the answer used it as younger than ``cache_max_age_s``."""
        assert self._cache is not None
        path = self._cache.absent_file(key) if absent else self._cache.entry_file(key)
        return CacheFile.observe(self._cache.root, path, fresh=fresh)

    def _fresh_age(self, key: ChampionKey, *, absent: bool = False) -> float | None:
        """Seconds since ``key``'s disk-cache entry (``absent``: its negative entry, question
        2b) was written when that is under ``cache_max_age_s`` (question 2a), else ``None``: no
        cache, the rule off, no entry, an older one, or one dated ahead of the clock (a clock
        set back or a touched file: the service is asked rather than trusting the date), or a
        negative entry of another service. (An entry's service is in the file, which
        :meth:`_acquire` reads next.)"""
        if self._cache is None or self._cache_max_age_s <= 0:
            return None
        age = self._cache.absent_age_s(key) if absent else self._cache.entry_age_s(key)
        if age is None or not 0 <= age < self._cache_max_age_s:
            return None
        if absent and not self._ours(self._cache.absent_service(key)):
            return None  # another service's 404 (or an older loader's): ask this one
        return age

    def _read_cache(self, key: ChampionKey) -> tuple[CacheLookup, Refusal | None]:
        """The disk cache's lookup for ``key`` and, on a hit, why its champion is refused
        (``None``: admitted)."""
        assert self._cache is not None
        lookup = self._cache.load(key)
        if lookup.champion is None:
            return lookup, None
        return lookup, self._admit(lookup.champion, "disk cache")

    def _admit(self, champion: ChampionKernel, source: str) -> Refusal | None:
        """The trust checks, then the option allow-list when the champion must be recompiled
        for this GPU's arch; ``None`` when ``champion`` may run."""
        refusal = self._trust.check(champion)
        if refusal is None and champion.arch != self.gpu.arch:
            refused = refused_option(champion)
            if refused is not None:
                refusal = Refusal("compile_option", refused)
        if refusal is None:
            return None
        # The detail may quote the champion (its key id): one printable line of bounded length.
        return replace(refusal, detail=printable(refusal.detail, 300), source=source)

    def _remember_absent(self, key: ChampionKey) -> bool:
        """Record the service's "no champion" for ``key`` in the disk cache (question 2b);
        whether it was. A cache that cannot be written is only a warning (the service is asked
        again next time)."""
        if self._cache is None:
            return False
        try:
            self._cache.remember_absent(key)
        except OSError as error:
            log.warning("kernevo: could not write the disk cache: %s", error)
            return False
        return True

    def _store(self, champion: ChampionKernel) -> bool:
        """Write an admitted champion to the disk cache; whether it was. A cache that cannot
        be written is only a warning (the loader still works, just not offline)."""
        if self._cache is None:
            return False
        try:
            self._cache.store(champion)
        except OSError as error:
            log.warning("kernevo: could not write the disk cache: %s", error)
            return False
        return True


def _another_service(service: str | None) -> str:
    """The clause a reason adds for a champion cached from another service than the one asked
    (``service``: the id its entry records, ``None`` or ``""`` when it records none)."""
    if not service:
        return ", cached by a loader that did not record its service"
    return f", cached from service {printable(service, 120)}"


def _compared(served: Any, decision: Decision, measured: Any, *, chosen: bool) -> Compared:
    """How the path of ``served`` (a ``seeds.registry.Route``) enters the comparison with its
    ``decision``; ``measured`` (a ``seeds.registry.Measured``) is what its champion recorded,
    ``None`` when it cannot run the shape. (``Any``: the registry is imported by name,
    :mod:`kernevo.paths`, so its classes are not static types here.)"""
    champion = decision.champion
    return Compared(
        path=served.path_id,
        shape_bucket=served.shape_bucket,
        route=decision.route,
        reason=decision.reason,
        program_id=champion.program_id if champion is not None else None,
        combined_score=measured.combined_score if measured is not None else None,
        time_us=measured.time_us if measured is not None else None,
        chosen=chosen,
    )
