"""A routing decision of the loader (:class:`Decision`) and the paths compared for it
(:class:`Compared`): plain data, importable without the resolver's pydantic and cryptography,
since a solver started from the warm-start memo (:mod:`kernevo.warm_start`) builds decisions
too. :mod:`kernevo.resolver` makes them the full way and re-exports both names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernevo.text import printable

if TYPE_CHECKING:
    from kernevo.client import ChampionKernel
    from kernevo.trust import Refusal
    from kernevo.warm_start import MemoKernel

Route = str
"""``"kernel"`` or the op's fallback route (``seeds.ops.OpSpec.fallback_route``: ``"cublas"``
for trsm and solve_tri, ``"lapack"`` for band_bidiag)."""


@dataclass(frozen=True)
class Decision:
    """Where the problem of ``shape`` (the op's parameters in order; trsm: (m, n)) goes and
    why.

    ``route`` is ``"kernel"`` (the champion's cubin through the path driver) or the op's
    fallback route: ``"cublas"`` (trsm: cuBLAS ?trsm; solve_tri: its batched TRSM) or
    ``"lapack"`` (band_bidiag: LAPACK ?gbbrd on the host CPU); ``fallback`` says that library
    in words (``seeds.ops.OpSpec.fallback_library``). The reasons below say "cuBLAS" for it.
    ``reason`` is one line, e.g. ``"champion program 17 from service"``,
    ``"champion program 17 from disk cache (written 12 s ago, within
    KERNEVO_CACHE_MAX_AGE_S=3600; service not asked)"``,
    ``"champion program 17 from disk cache (service unreachable: ConnectError: ...)"``,
    ``"no champion on service 40 s ago (remembered by the disk cache, within
    KERNEVO_CACHE_MAX_AGE_S=3600; service not asked); disk cache: no entry"``,
    ``"outside envelope m <= 48, n <= 64 of champion program 17 (m=50, n=8)"``,
    ``"no path serves m=100 n=100"``, ``"kernel error: RuntimeError: ..."``,
    ``"refused champion program 17 from service: unsigned; disk cache: no entry"``,
    ``"champion program 17 from service; served not re-verified on this toolkit: NVIDIA driver
    575.57.08 here, verified under 580.95.05"``, ``"champion program 17 not re-verified on this
    toolkit: ... (KERNEVO_REQUIRE_SAME_TOOLKIT)"`` (cuBLAS),
    ``"loader error: <exception>"`` (a fault the loader did not foresee; logged as a warning).
    When several paths serve (m, n) the chosen path's reason is followed by the comparison,
    ``"…; fastest of 2 paths by time_at_shape: trsm_small/m64n64 program 17 score 1.5 3.2 us
    at the shape; trsm_small_z64/m64eq_n64 program 18 score 2 2.9 us at the shape (chosen)"``,
    and when none can run, ``"no serving path's champion can run: trsm_small/m64n64: <its
    reason>; …"`` (cuBLAS; ``path`` and ``shape_bucket`` then ``None``).
    ``champion`` is the kernel to launch (set when ``route == "kernel"``, and when a champion
    exists but does not cover the shape). ``refusals`` are the champions refused on the way,
    in the order they were met (a fresh disk-cache entry, the service, then the disk cache;
    one entry is judged once), each naming its failed check (``Refusal.check``) and
    where the champion came from (``Refusal.source``), for every serving path. ``compared``
    lists the serving paths in registry order, each as it was judged for this shape.

    A decision a solver took from the warm-start memo (:mod:`kernevo.warm_start`) says so first:
    ``"warm-start memo (decided 40 s ago by the full path; KERNEVO_* settings, trust inputs,
    GPU, loader code and disk-cache files unchanged): champion program 17 from disk cache
    (written 12 s ago, …)"``, the original decision's reason after the colon; its ``champion``
    is then a :class:`kernevo.warm_start.MemoKernel` (what the launch needs: path, dtype,
    arch, kernel names, the cubin bound by its sha256; no signature nor certificate: the disk
    cache holds those, ``kernevo lock`` pins from there) and its ``refusals`` are empty.
    """

    shape: tuple[int, ...]
    route: Route
    reason: str
    path: str | None = None
    shape_bucket: str | None = None
    champion: ChampionKernel | MemoKernel | None = field(default=None, repr=False)
    refusals: tuple[Refusal, ...] = ()
    compared: tuple[Compared, ...] = ()
    fallback: str = ""

    def __post_init__(self) -> None:
        # A reason quotes the service (digests, key ids, versions): whatever a hostile or broken
        # service sends, the line explain() prints and the log records stays one printable line.
        object.__setattr__(self, "reason", printable(self.reason, limit=len(self.reason)))

    def __str__(self) -> str:
        """The decision for a person (``print(solver.explain(64, 64))``), ``repr`` staying the
        dataclass's: the shape and route (the fallback's library named), the path and bucket,
        the reason, and each path compared on a line of its own::

            shape (64, 64): kernel, path trsm_small/m64n64, program 17
              reason: champion program 17 from disk cache (written 12 s ago, ...)
              compared: trsm_small/m64n64 program 17 score 1.5 3.2 us at the shape (chosen)
        """
        shape = f"({', '.join(str(value) for value in self.shape)})"
        route = self.route if self.route == "kernel" or not self.fallback else self.fallback
        head = f"shape {shape}: {route}"
        if self.path is not None:
            head += f", path {self.path}/{self.shape_bucket}"
        if self.route == "kernel" and self.champion is not None:
            head += f", program {self.champion.program_id}"
        lines = [head, f"  reason: {self.reason}"]
        lines += [f"  compared: {item.summary()}" for item in self.compared]
        lines += [
            f"  refused: {refusal.check} ({refusal.source or 'unknown source'}): {refusal.detail}"
            for refusal in self.refusals
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class Compared:
    """One path serving a shape, as the resolver judged it: ``route`` is ``"kernel"`` when its
    champion could run the shape, with ``reason`` its own decision's; ``program_id``,
    ``combined_score`` and ``time_us`` (µs per call recorded at the shape) are what its
    champion recorded (``seeds.registry.measured``; ``None``: no champion, or not recorded);
    ``chosen`` marks the path that runs."""

    path: str
    shape_bucket: str
    route: Route
    reason: str
    program_id: int | None = None
    combined_score: float | None = None
    time_us: float | None = None
    chosen: bool = False

    def summary(self) -> str:
        """One clause for a decision's reason: ``trsm_small/m64n64 program 17 score 1.5 3.2 us
        at the shape (chosen)``, or ``trsm_small/m64n64: <why it cannot run>``."""
        name = f"{self.path}/{self.shape_bucket}"
        if self.route != "kernel":
            return f"{name}: {self.reason}"
        score = "not recorded" if self.combined_score is None else f"{self.combined_score:.3g}"
        text = f"{name} program {self.program_id} score {score}"
        if self.time_us is not None:
            text += f" {self.time_us:.3g} us at the shape"
        return text + (" (chosen)" if self.chosen else "")


def pinned_to_fallback(
    shape: tuple[int, ...], old: Decision | None, error: BaseException, route: Route, library: str
) -> Decision:
    """The decision for ``shape`` once its kernel raised ``error``: the op's fallback ``route``
    (``library`` in words) for good, the reason ``"kernel error: <type>: <message>"``, and the
    path, bucket, champion and comparison of the ``old`` decision (``None``: none was made)."""
    return Decision(
        shape,
        route,
        f"kernel error: {type(error).__name__}: {error}",
        path=old.path if old else None,
        shape_bucket=old.shape_bucket if old else None,
        champion=old.champion if old else None,
        compared=old.compared if old else (),
        fallback=library,
    )
