"""The paths kernevo knows, which of them serve a problem (each at one of its shape buckets),
and which of their champions was measured fastest there.

A problem is an op, a dtype and a shape: a tuple of the op's shape parameters in order
(``seeds.ops``; trsm: ``(m, n)``), passed to :func:`route` and :func:`measured` as trailing
positional values (``route("trsm", "float64", m, n)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from . import ops
from .band_bidiag.spec import BAND_BIDIAG
from .ops import OPS as OPS  # every op, in registry order (trsm first)
from .ops import UnknownOpError as UnknownOpError  # raised by route
from .ops import get_op as get_op
from .solve_tri.spec import SOLVE_TRI
from .spec import DTYPES, PathSpec, check_dtype
from .spec import UnknownBucketError as UnknownBucketError  # raised by get_path
from .trsm_blocked.spec import TRSM_BLOCKED
from .trsm_small.spec import TRSM_SMALL
from .trsm_small_batched.spec import TRSM_SMALL_BATCHED
from .trsm_small_z64.spec import TRSM_SMALL_Z64

# Every path, in registry order (route's order): trsm's three, then solve_tri's and
# band_bidiag's (issue 8), then trsm_batched's (issue 11). Each op's evaluation suite is
# evaluator.op_suites.SUITES[spec.op].
PATHS: dict[str, PathSpec] = {
    spec.path_id: spec
    for spec in (
        TRSM_SMALL,
        TRSM_SMALL_Z64,
        TRSM_BLOCKED,
        SOLVE_TRI,
        BAND_BIDIAG,
        TRSM_SMALL_BATCHED,
    )
}


class UnknownPathError(ValueError):
    """A path id that the registry does not hold."""


@dataclass(frozen=True)
class Route:
    """One path that serves a problem, and its shape bucket holding the problem: with the dtype
    and the GPU key, the key of a champion."""

    path_id: str
    shape_bucket: str


def get_path(path_id: str, bucket: str | None = None) -> PathSpec:
    """The spec of ``path_id`` at its shape bucket ``bucket`` (``PathSpec.for_bucket``); with
    ``bucket`` ``None``, the registry's spec, at the path's first bucket.

    Raises:
        UnknownPathError: one line naming the known paths.
        UnknownBucketError: one line naming the path's buckets.
    """
    try:
        spec = PATHS[path_id]
    except KeyError:
        known = ", ".join(sorted(PATHS))
        raise UnknownPathError(f"unknown path {path_id!r}; known paths: {known}") from None
    return spec if bucket is None else spec.for_bucket(bucket)


def not_implementing(path_id: str, op: str, dtype: str) -> str | None:
    """Why ``path_id`` cannot serve ``op`` in ``dtype`` whatever the shape, one line (``path
    solve_tri does not implement trsm in float64 (it implements solve_tri in float32)``);
    ``None`` when it implements both. The CLI (``kernevo export --path``) and the API
    (``GET /v1/kernels/best?path=``) refuse in these words.

    Raises:
        UnknownPathError: ``path_id`` is not a path of the registry.
    """
    spec = get_path(path_id)
    if spec.op == op and dtype in spec.dtypes:
        return None
    return (
        f"path {path_id} does not implement {op} in {dtype} "
        f"(it implements {spec.op} in {', '.join(spec.dtypes)})"
    )


def buckets(path_id: str) -> tuple[str, ...]:
    """The names of ``path_id``'s shape buckets, the first being the one a job gets when it
    names none (``trsm_blocked``: ``m128_2048``, ``m2049_16384``).

    Raises:
        UnknownPathError: one line naming the known paths.
    """
    return get_path(path_id).bucket_names


def route(op: str, dtype: str, *shape: int) -> list[Route]:
    """Every path serving ``op`` in ``dtype`` at ``shape`` (the op's parameters in order; trsm:
    ``route(op, dtype, m, n)``), each with the shape bucket that holds it
    (``PathSpec.bucket_of``: a path with several buckets answers with the one whose envelope
    holds the shape, ``trsm_blocked`` ``m128_2048`` up to m = 2048 and ``m2049_16384`` above),
    in registry order (the order of :data:`PATHS`); empty when no path does, an op without
    paths included.

    Paths may overlap (trsm_small and trsm_small_z64 both serve complex128 at m = 64): which
    one answers is the champions' comparison (:func:`fastest`), not the registry's. A path's
    buckets never overlap, so a path appears once.

    Raises:
        UnknownOpError: ``op`` is not an op of ``seeds.ops.OPS``.
        UnknownDtypeError: ``dtype`` is not a known dtype.
        seeds.ops.ShapeError: ``shape`` does not have one value per parameter of the op.
    """
    spec_of_op = ops.get_op(op)
    check_dtype(dtype, DTYPES)
    if len(shape) != len(spec_of_op.params):
        spec_of_op.check_shape(shape)  # raises, naming the op's parameters
    served = [
        (spec.path_id, spec.bucket_of(*shape))
        for spec in PATHS.values()
        if spec.op == op and dtype in spec.dtypes
    ]
    return [Route(path_id, bucket) for path_id, bucket in served if bucket is not None]


Rule = Literal["only_champion", "time_at_shape", "combined_score"]
"""How :func:`fastest` chose: the only candidate; the least time recorded at the requested
shape (every candidate was timed there); the highest combined score (otherwise)."""


@dataclass(frozen=True)
class Measured:
    """What the champion of one serving path recorded when it was evaluated (:func:`measured`).

    ``combined_score``: the geometric-mean speedup over the vendor library at the path's own
    timed shapes; ``time_us``: the median device time per call (µs) at the requested shape,
    when the path timed that shape; ``speedup`` (vendor median / champion median there),
    ``speedup_high`` (the upper end of its 95 % interval) and ``noise_floor`` (relative: two
    timings of one kernel disagree by this much) are that evaluation's comparison with the
    vendor library timed in the same rounds at the shape. ``None``: not recorded.
    """

    route: Route
    combined_score: float | None
    time_us: float | None
    speedup: float | None = None
    speedup_high: float | None = None
    noise_floor: float | None = None

    @property
    def slower_than_vendor(self) -> bool:
        """Whether the champion was measured slower than the vendor library at the requested
        shape beyond its noise: the speedup's whole 95 % interval below 1 / (1 + noise floor),
        the evaluator's rule for "slower" (``evaluator.score.credited_rival_speedup``). False
        when the shape was not timed or the interval not recorded."""
        if self.speedup_high is None:
            return False
        return self.speedup_high * (1 + (self.noise_floor or 0.0)) < 1

    def against_vendor(self) -> str:
        """The comparison with the vendor library at the shape in words: ``0.98x (95 %
        interval up to 0.979, noise floor 0.2 %)``; ``""`` when not recorded."""
        if self.speedup is None or self.speedup_high is None:
            return ""
        floor = f", noise floor {100 * self.noise_floor:.1f} %" if self.noise_floor else ""
        return f"{self.speedup:.3g}x (95 % interval up to {self.speedup_high:.3g}{floor})"


def measured(route: Route, metrics: object, *shape: int) -> Measured:
    """Read a champion's ``metrics`` (the champion row's, as ``GET /v1/kernels/best`` serves
    them: ``combined_score`` (else ``score``) and ``timings``, a list of ``{<parameter>: value,
    …, candidate_us, …}`` — trsm's ``{m, n, candidate_us, …}`` — one per timed shape) for the
    problem ``shape`` (the op's parameters in order; trsm: ``measured(route, metrics, m, n)``).
    A timing names its shape by the route's path's op parameters, or as a list ``shape``.

    A value that is not a finite number > 0 (a string, a bool, NaN, a negative) counts as not
    recorded, and a ``metrics`` of any other form records nothing: the loader reads these from
    the service, so nothing here raises (a route of a path the registry does not hold matches
    timings by ``shape`` only).
    """
    record = metrics if isinstance(metrics, dict) else {}
    score = _positive(record.get("combined_score"))
    if score is None:
        score = _positive(record.get("score"))
    spec = PATHS.get(route.path_id)
    params = spec.params if spec is not None else ()
    timings = record.get("timings")
    for timing in timings if isinstance(timings, list) else ():
        if isinstance(timing, dict) and _timed_at(timing, params, shape):
            return _at_shape(route, score, timing)
    return Measured(route, score, None)


def _at_shape(route: Route, score: float | None, timing: dict[str, object]) -> Measured:
    """:class:`Measured` from the timing entry of the requested shape: the champion's median
    (``candidate_us``), its speedup (``speedup``, else ``baseline_us`` / ``candidate_us``: the
    champion row's ``ShapeTiming`` stores no ratio), ``speedup_high`` and ``noise_floor``."""
    time_us = _positive(timing.get("candidate_us"))
    speedup = _positive(timing.get("speedup"))
    baseline_us = _positive(timing.get("baseline_us"))
    if speedup is None and time_us is not None and baseline_us is not None:
        speedup = baseline_us / time_us
    floor = timing.get("noise_floor")
    noise_floor = 0.0 if floor == 0 and not isinstance(floor, bool) else _positive(floor)
    return Measured(route, score, time_us, speedup, _positive(timing.get("speedup_high")),
                    noise_floor)  # fmt: skip


def _timed_at(timing: dict[str, object], params: Sequence[str], shape: Sequence[int]) -> bool:
    """Whether a timing entry names ``shape``: by its list ``shape``, else by one key per
    parameter (integers, not bools)."""
    listed = timing.get("shape")
    if isinstance(listed, list):
        return len(listed) == len(shape) and all(
            _exact_int(value) == expected for value, expected in zip(listed, shape, strict=True)
        )
    return (
        bool(params)
        and len(params) == len(shape)
        and all(
            _exact_int(timing.get(name)) == value for name, value in zip(params, shape, strict=True)
        )
    )


def fastest(candidates: Sequence[Measured]) -> tuple[Measured, Rule] | None:
    """The champion measured fastest at the requested shape among ``candidates`` (one per
    serving path that has a champion, in :func:`route`'s order), with the rule that chose it;
    ``None`` when there are none, or when every one was measured slower than the vendor
    library at this very shape (:attr:`Measured.slower_than_vendor`: its own evaluation timed
    both there, in the same rounds), which then serves it instead. Such a candidate never
    runs: a champion is the best of its bucket by its score over the bucket's timed shapes,
    and may still lose to the library at one of them (trsm_blocked's m128_2048 champion in
    complex128 at 129 × 8192: 0.98x, RESULTS 22).

    The rule: when every candidate recorded a time at the requested shape, the least time
    (``time_at_shape``); otherwise the highest combined score (``combined_score``; one not
    recorded counts as 0). Ties go to the earlier candidate, so the answer is the same on
    every call.

    Its weakness: the champions of different paths were timed in different evaluations (other
    processes, perhaps other days, clocks and neighbours), never against each other. Times at
    one shape measure the same work, but a difference within the evaluations' noise floors
    (a few per cent, ``ShapeTiming.noise_floor``) is not a measured difference. Combined
    scores are speedups over the vendor library at each path's own timed shapes: they compare
    how much each path beat cuBLAS where it was timed, not how fast it is at this shape, so a
    path timed where cuBLAS is weak can win a shape where it is the slower. Timing the
    candidates against each other at the shape, in one run, would settle it; the service runs
    no code, so that is an evaluation's job.
    """
    candidates = [candidate for candidate in candidates if not candidate.slower_than_vendor]
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0], "only_champion"
    times = [candidate.time_us for candidate in candidates]
    if all(time_us is not None for time_us in times):
        best = min(range(len(candidates)), key=lambda i: (times[i], i))
        return candidates[best], "time_at_shape"
    scores = [candidate.combined_score or 0.0 for candidate in candidates]
    best = min(range(len(candidates)), key=lambda i: (-scores[i], i))
    return candidates[best], "combined_score"


def _positive(value: object) -> float | None:
    """``value`` as a float if it is a finite real number > 0 (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range (JSON allows any number of digits)
        return None
    return number if math.isfinite(number) and number > 0 else None


def _exact_int(value: object) -> int | None:
    """``value`` if it is an int (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
