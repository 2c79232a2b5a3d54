"""Random TRSM problems whose exact solution stays bounded, plus one that grows on purpose.

Bounded growth (the default): diagonal magnitudes uniform in [1, 2] (random sign, or random phase
for complex), off-diagonals uniform in [-1, 1]/sqrt(m). With off-diagonals of that size the
solution of A·X = B stays O(1), so an error in any single row of X is visible against the
reference. The badly conditioned "growth" case takes diagonal magnitudes in [0.5, 1] and leaves
the off-diagonals unscaled in [-1, 1] up to m = 64 (``GROWTH_FULL_M``): at m = 64, X then grows
by about 1e5–1e6 down the rows (still finite in float32). That is the situation of ggml's
SOLVE_TRI tests, where a residual check passes a kernel that never computed the small rows; here
the per-row criterion decides. Past m = 64 unscaled off-diagonals would overflow X (1e45 at
m = 512, beyond float32; 1e88 at m = 1000), so there they are scaled by sqrt(64/m), the spread
they have at m = 64: X then stays below ~1e10 up to m = 8192 (1-norm condition numbers 1e12–1e13
by LAPACK's DTRCON), ill-conditioned and finite in every dtype. m ≤ 64 draws exactly as before.

Two more kinds for paths judged by LAPACK's backward-error ratio (``trsm_blocked``:
``evaluator.checks.lapack_ratio``; a path lists its kinds in ``PathSpec.verify_kinds``):
``ill_conditioned``, off-diagonals ``ILL_CONDITIONED_ALPHA``/sqrt(m) with diagonal magnitudes in
[1, 2] (κ₁ 1e8 at m = 128 to 2e11 at m = 8192, X up to ~1e7), and ``graded``, a bounded A whose
rows are scaled by factors log-uniform over ``GRADED_DECADES`` decades (the diagonal graded over
that many orders of magnitude; X up to ~10^decades). Both keep B uniform in [-1, 1].

The strict upper triangle of A is filled with NaN in every problem built here (and in every
problem built from these: scaled, containment, audit pairs, metamorphic relations, the timed
sets): TRSM must never read it. ``tests/test_inputs.py`` checks each builder.

Issue 6 part 3 adds inputs on which a kernel right on the drawn problems can still be wrong
(each built from a bounded problem, so X stays O(1)): the same problem scaled by a power of two
far up or down (:func:`scaled_problem`; the exponents: :data:`SCALE_EXPONENTS` at every shape,
:func:`sweep_exponents` once), a "trap" whose rows span a range the next lower precision cannot
hold (``make_problem(kind="trap")``), and problems with one non-finite entry of A or of B
(:func:`containment_problem`; the cases of one evaluation: :func:`containment_cases`).

Timing draws many bounded problems at once on the device (:func:`bounded_sets` with a
:class:`CounterRng`), from the same distributions, so every timed call gets inputs of its own.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

NUMPY_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
}


@dataclass(frozen=True)
class Problem:
    """One TRSM problem in the candidate's dtype: A (m×m) and B (m×n), both Fortran order."""

    a: np.ndarray
    b: np.ndarray
    kind: str
    seed: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.b.shape  # type: ignore[return-value]


def _uniform(rng: Any, shape: tuple[int, ...], complex_: bool) -> Any:
    if complex_:
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)) / np.sqrt(2)
    return rng.uniform(-1, 1, shape)


# Exponents e of the exact scalings A = 2^e·A0, B = 2^e·B0 (X unchanged), up and down, per dtype,
# checked at every shape of a full verification (the extremes; :func:`sweep_exponents` adds the
# exponents in between once, at SWEEP_SHAPE). Chosen so that the scaled problem stays finite and
# normal in the dtype with room to spare (entries and products a·x down to 2^-20 of the
# problem's scale stay normal; sums of m products stay below the maximum), while the shortcuts
# issue 6 found break:
# - complex64 2^67, 2^-76: |a|^2 of a diagonal entry (magnitude in [1, 2]) is >= 2^134 (float32
#   overflows past 2^128) or <= 2^-150 (below the smallest float32 subnormal 2^-149), so the
#   textbook division by |a|^2 gives NaN or 0 (issue 6: NaN at s = 1e20, 0 from the reciprocal).
# - complex128 2^532, 2^-565: |a|^2 >= 2^1064 (float64 overflows past 2^1024) or <= 2^-1128
#   (below 2^-1074), as issue 6 found at 1e160 and 1e-170; also far outside float32's range.
# - float64 2^900, 2^-900: outside float32's range (2^-149 .. 2^128), so a float64 kernel that
#   computes in float32 gets Inf or 0.
# - float32 2^100, 2^-100: a square of an entry overflows or underflows (2^200, 2^-200).
SCALE_EXPONENTS: dict[str, tuple[int, int]] = {
    "float32": (100, -100),
    "float64": (900, -900),
    "complex64": (67, -76),
    "complex128": (532, -565),
}
# The shape at which the exponents of :func:`sweep_exponents` are checked, once per full
# verification: ragged (two warps of 32 rows, the second holding one row) and cheap, one
# reference for every exponent.
SWEEP_SHAPE = (33, 2)
# Complex dtypes: every integer exponent of these bands is swept, where the textbook division
# x = b·conj(a)/|a|² goes wrong on some input. From the distributions (diagonal magnitudes |a| in
# [1, 2], off-diagonals up to 1/sqrt(m), |X| < 2: measured at most 1.7 over 200 seeds of six
# shapes up to 64×64), at scale s = 2^e the division sees d = |a|²·s² in [2^2e, 2^(2e+2)) and a
# numerator b·conj(a) = |a|²·x·s² below 2^(2e+3) (b, updated, is a·x·s).
# - Up, complex64 [60, 64]: the numerator can overflow float32 (past 2^128) from e = 63
#   (2e + 3 >= 128) and d overflows for every diagonal entry from e = 64 (2^2e >= 2^128; NaN
#   from Inf/Inf, or X = 0 from a reciprocal 1/d); 3 binades of margin below for variants whose
#   intermediates are a few times larger. complex128 [508, 512]: the same past 2^1024 (e >= 511,
#   every entry at e >= 512).
# - Down, complex64 [-76, -60]: d is subnormal (below 2^-126) for some entry from e = -64
#   (|a| near 1) and its rounding error (up to 2^-150 absolute) is then a relative error of
#   2^(-150-2e) in x, past the forward-error bound (4·γ_(m+2) ~ 2^7 units of roundoff) from about
#   e = -67; at e = -76, d < 2^-150 rounds to 0 for every entry (Inf, NaN). 4 binades of margin
#   above, for numerators smaller than d (|x| < 1). complex128 [-539, -508]: subnormal below
#   2^-1022 from e = -512, 0 below 2^-1075 for every entry from e = -539.
# A kernel that takes the textbook path for |a| in some window and a safe one outside is caught
# wherever its window meets a band: every integer exponent is swept (|a|·s spans a factor 2 at
# each, so consecutive exponents leave no gap), the textbook path fails at the band's outer end
# for every entry, and beyond it the extremes of SCALE_EXPONENTS fail it again.
SCALE_BANDS: dict[str, tuple[tuple[int, int], ...]] = {
    "complex64": ((-76, -60), (60, 64)),
    "complex128": ((-539, -508), (508, 512)),
}
# Real dtypes: ranges from which :func:`sweep_exponents` draws exponents from the evaluation's
# seed (one in each half of each range, so both ends are reached across evaluations), in
# addition to the fixed extremes, so that a kernel tuned to pass two known exponents meets others.
# - float64 [-900, -151] and [128, 900]: A leaves float32's range there (up, every diagonal
#   entry, at 2^128 or more, overflows; down, every entry, below 2^(e+1) <= 2^-150, rounds to 0),
#   so a float64 kernel that computes in float32, refined or not, gets Inf, NaN or 0 for x at
#   every drawn exponent.
# - float32 [-100, -76] and [64, 100]: the square of every diagonal entry overflows (2^2e >=
#   2^128) or rounds to 0 (below 2^(2e+2) <= 2^-150), the complex64 bounds for a real |a|² (a
#   reciprocal or a norm by squares); the extremes 2^±100 bound the range (see SCALE_EXPONENTS).
SCALE_DRAW_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "float32": ((-100, -76), (64, 100)),
    "float64": ((-900, -151), (128, 900)),
}
_SWEEP_STREAM = 0x5CA1E


def sweep_exponents(dtype: str, seed: int) -> tuple[int, ...]:
    """The exponents e checked once per full verification at ``SWEEP_SHAPE``, ascending: every
    integer of ``SCALE_BANDS[dtype]`` (complex dtypes: 22 for complex64, 37 for complex128), or
    for the real dtypes one integer drawn from ``seed`` in each half of each range of
    ``SCALE_DRAW_RANGES[dtype]`` (4).

    Raises:
        KeyError: unknown ``dtype``.
    """
    if dtype in SCALE_BANDS:
        return tuple(e for lo, hi in SCALE_BANDS[dtype] for e in range(lo, hi + 1))
    rng = np.random.default_rng([seed, _SWEEP_STREAM])
    drawn = []
    for lo, hi in SCALE_DRAW_RANGES[dtype]:
        mid = (lo + hi) // 2
        drawn += [int(rng.integers(lo, mid + 1)), int(rng.integers(mid + 1, hi + 1))]
    return tuple(sorted(drawn))


def scale_exponents(dtype: str, seed: int) -> tuple[int, ...]:
    """Every exponent a full verification with first seed ``seed`` checks, ascending and
    distinct: ``SCALE_EXPONENTS[dtype]`` (at every shape) and :func:`sweep_exponents` (at
    ``SWEEP_SHAPE``). What a report lists as its ``input_scales`` (as 2^e).

    Raises:
        KeyError: unknown ``dtype``.
    """
    return tuple(sorted(set(SCALE_EXPONENTS[dtype]) | set(sweep_exponents(dtype, seed))))


# Row exponents of the trap (each row of a bounded problem scaled by one of them, A's and B's
# alike, so X is the bounded X exactly), per dtype. float64/complex128: 2^-135 is subnormal in
# float32 (at most 15 of its 24 bits kept) and 2^100 leaves float32 7 binades of headroom, a span
# of 235 binades that no single float32 scaling holds at full precision (a candidate that
# rescales by one factor first loses >= 12 bits on some rows). A float64 kernel that solves in
# float32 and refines once in float64 is then ~1e9 times over the float64 bound
# (tests/test_evaluator_numerics.py measures it), where bounded inputs see it at ~1-3 times.
# float32/complex64: the same structure one level down, 2^-20 (subnormal in float16) and 2^12.
TRAP_ROW_EXPONENTS: dict[str, tuple[int, int]] = {
    "float32": (-20, 12),
    "float64": (-135, 100),
    "complex64": (-20, 12),
    "complex128": (-135, 100),
}
# The growth case's off-diagonals are unscaled in [-1, 1] up to this m and scaled by
# sqrt(GROWTH_FULL_M / m) above it, so that X stays finite (module docstring).
GROWTH_FULL_M = 64
# ``ill_conditioned``: off-diagonals uniform in [-1, 1]·ALPHA/sqrt(m), diagonal magnitudes in
# [1, 2]. ALPHA = 1 is the bounded case (κ₂ ≈ 3); the condition number grows with ALPHA and, past
# about 12, with m: measured with DTRCON (1-norm) at ALPHA = 14, 8e7 (m = 128), 1e10 (1024),
# 1.7e11 (4096), 2.2e11 (8192), with max |X| 3e4, 2.5e6, 1e7, 1.6e7 for B uniform in [-1, 1].
# Substitution and the inversion-based blocked solve of trsm_blocked's seed (NB 128-512) give
# LAPACK ratios below 0.1 there in float32 and float64 (tests/test_lapack_ratio.py).
ILL_CONDITIONED_ALPHA = 14.0
# ``graded``: each row of a bounded A multiplied by 10^(-t), t uniform in [0, decades], so the
# diagonal spans that many orders of magnitude and X up to ~10^decades: within float32's normal
# range with room (6 decades) and far past float32's precision in the double dtypes (12).
GRADED_DECADES: dict[str, int] = {
    "float32": 6,
    "float64": 12,
    "complex64": 6,
    "complex128": 12,
}
KINDS: tuple[str, ...] = ("bounded", "growth", "trap", "ill_conditioned", "graded")
# Kinds on which only a backward-error measure is a fair judge of an inversion-based blocked
# solve (evaluator.checks.accuracy.check_solution_lapack skips the forward error there).
BACKWARD_ERROR_ONLY_KINDS: tuple[str, ...] = ("ill_conditioned", "graded")
_KIND_STREAM = {"bounded": 0, "growth": 1, "trap": 2, "ill_conditioned": 3, "graded": 4}


def describe_kinds(kinds: tuple[str, ...], dtype: str) -> str:
    """The distributions of the bounded problems and of ``kinds`` (a path's ``verify_kinds``)
    in ``dtype``, in words, for a certificate's ``not_verified``: ``bounded: diagonal magnitudes
    in [1, 2], …; growth: …``.

    Raises:
        KeyError: a kind not in ``KINDS``, or an unknown ``dtype``.
    """
    low, high = TRAP_ROW_EXPONENTS[dtype]
    words = {
        "bounded": "bounded: diagonal magnitudes in [1, 2], off-diagonals in [-1, 1]/sqrt(m), "
        "B in [-1, 1]",
        "growth": "growth: diagonal magnitudes in [0.5, 1], off-diagonals in [-1, 1] "
        f"(times sqrt({GROWTH_FULL_M}/m) past m = {GROWTH_FULL_M})",
        "trap": f"trap: bounded problems with rows scaled by 2^{low}, 1 and 2^{high}",
        "ill_conditioned": "ill_conditioned: diagonal magnitudes in [1, 2], off-diagonals in "
        f"[-1, 1]*{ILL_CONDITIONED_ALPHA:g}/sqrt(m)",
        "graded": "graded: bounded A with rows scaled by 10^-t, t uniform in "
        f"[0, {GRADED_DECADES[dtype]}]",
    }
    return "; ".join(words[kind] for kind in ("bounded", *kinds))


# make_problem's working block of rows of A, in bytes of its float64/complex128 draws: small
# enough that the block's temporaries stay in cache, large enough that a column of a block,
# written into the Fortran-order A, is many cache lines long.
_BLOCK_BYTES = 1 << 20


def _generator_at(bits: np.random.PCG64, draws: int) -> np.random.Generator:
    """A generator on a copy of ``bits``'s state advanced by ``draws`` 64-bit outputs: it draws
    what ``Generator(bits)`` would draw after ``draws`` doubles (each double of
    ``Generator.uniform`` is one 64-bit output of PCG64). ``bits`` itself is not moved."""
    copy = np.random.PCG64(0)
    copy.state = bits.state
    copy.advance(draws)
    return np.random.Generator(copy)


def _off_diagonal_scale(kind: str, m: int) -> float:
    """The factor on the off-diagonals' uniform [-1, 1] draws for ``kind`` at order ``m``."""
    if kind == "growth":
        return min(1.0, float(np.sqrt(GROWTH_FULL_M / m)))
    if kind == "ill_conditioned":
        return ILL_CONDITIONED_ALPHA / float(np.sqrt(m))
    return 1.0 / float(np.sqrt(m))


def make_problem(m: int, n: int, dtype: str, seed: int, kind: str = "bounded") -> Problem:
    """A fresh random problem of shape (m, n) in ``dtype``; ``kind`` is one of ``KINDS``:
    bounded, growth, trap, ill_conditioned or graded (module docstring). The strict upper
    triangle of A is NaN.

    ``trap``: a bounded problem (drawn from a stream of its own) whose rows are scaled by powers
    of two, a third each by 2^lo, 1 and 2^hi of ``TRAP_ROW_EXPONENTS[dtype]`` in random order;
    X is exactly the bounded problem's. ``graded``: a bounded problem (a stream of its own)
    whose rows of A, not of B, are scaled by 10^(-t), t uniform in [0, GRADED_DECADES[dtype]].

    Inside a :class:`ProblemPrefetch` that lists these arguments, the problem it built ahead
    (the same bytes) is returned instead of a new build.

    Raises:
        ValueError: unknown ``kind``.
        KeyError: unknown ``dtype``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown problem kind {kind!r}")
    prefetch = _PREFETCH
    if prefetch is not None and (ahead := prefetch.take((m, n, dtype, seed, kind))) is not None:
        return ahead
    return _build_problem(m, n, dtype, seed, kind)


def _build_problem(m: int, n: int, dtype: str, seed: int, kind: str) -> Problem:
    """:func:`make_problem`'s build, for a ``kind`` of ``KINDS``."""
    np_dtype = NUMPY_DTYPES[dtype]
    complex_ = np.issubdtype(np_dtype, np.complexfloating)
    # Every draw in the order the seeds were recorded with, from default_rng([seed, m, n,
    # stream]) (a PCG64): A's off-diagonals (all m² real parts, then all m² imaginary parts, as
    # _uniform draws them), the diagonal, B, the trap's or graded rows. A's draws are taken a
    # block of rows at a time below, each part from a generator started where that part starts
    # in the stream, and everything after them from one started past them
    # (_generator_at): the same numbers, without an m×m float64 array of draws (512 MiB at
    # m = 8192, freshly paged in for every problem).
    bits = np.random.PCG64([seed, m, n, _KIND_STREAM[kind]])
    part_streams = [_generator_at(bits, i * m * m) for i in range(2 if complex_ else 1)]
    rng = _generator_at(bits, len(part_streams) * m * m)
    magnitude = rng.uniform(0.5, 1.0, m) if kind == "growth" else rng.uniform(1.0, 2.0, m)
    phase = np.exp(2j * np.pi * rng.uniform(0, 1, m)) if complex_ else rng.choice([-1.0, 1.0], m)
    b = _uniform(rng, (m, n), complex_)
    row_exponents: np.ndarray | None = None
    row_factors: np.ndarray | None = None
    if kind == "trap":
        low, high = TRAP_ROW_EXPONENTS[dtype]
        row_exponents = rng.permutation(np.resize([low, 0, high], m))[:, None]
        b = _ldexp(b, row_exponents)
    if kind == "graded":
        row_factors = 10.0 ** -rng.uniform(0, GRADED_DECADES[dtype], m)[:, None]
    diagonal = magnitude * phase
    scale = _off_diagonal_scale(kind, m)
    a = np.empty((m, m), np_dtype, order="F")
    # A is built a block of rows at a time, each by the elementwise expressions of the
    # whole-matrix build (A0·scale, lower triangle kept, diagonal set, NaN above, rows scaled in
    # float64/complex128, cast last), so the bytes are those of that build
    # (tests/test_inputs_fast_build.py) while every temporary stays a block in cache.
    rows_per_block = max(1, _BLOCK_BYTES // (m * 8 * len(part_streams)))
    for start in range(0, m, rows_per_block):
        rows = slice(start, min(start + rows_per_block, m))
        # The block's rows of each part, the next draws of its stream (row-major, as the m×m
        # draw was); _uniform's expression on them. A real block is draws used once, so it is
        # scaled in place.
        parts = [s.uniform(-1, 1, (rows.stop - start, m)) for s in part_streams]
        block = (parts[0] + 1j * parts[1]) / np.sqrt(2) if complex_ else parts[0]
        block *= scale
        local = np.arange(block.shape[0])
        block[local, start + local] = diagonal[rows]
        for row in local:
            block[row, start + row + 1 :] = np.nan
        if row_exponents is not None:
            block = _ldexp(block, row_exponents[rows])
        if row_factors is not None:
            block *= row_factors[rows]
        a[rows] = block
    return Problem(a, np.asfortranarray(b, np_dtype), kind, seed)


ProblemKey = tuple[int, int, str, int, str]
"""``(m, n, dtype, seed, kind)``: the arguments of one :func:`make_problem` call."""

# Bytes of A and B that a ProblemPrefetch keeps built ahead of use at most (one problem more
# when a single one is larger): 3 problems of 8192×1024 float64 (576 MiB each), 15 of the
# largest verification shape (4100, 33) in float64.
PREFETCH_BYTES = 2 << 30
# The prefetch active in this process (make_problem consults it), set by ProblemPrefetch.
_PREFETCH: ProblemPrefetch | None = None


def problem_bytes(m: int, n: int, dtype: str) -> int:
    """Bytes of A (m×m) and B (m×n) of one problem in ``dtype``.

    Raises:
        KeyError: unknown ``dtype``.
    """
    return (m * m + m * n) * np.dtype(NUMPY_DTYPES[dtype]).itemsize


class ProblemPrefetch:
    """:func:`make_problem`'s problems for ``keys`` built ahead of use, in the host pool's
    threads (``evaluator.host_pool``), in the order of ``keys``: at most ``budget_bytes`` of
    them (:func:`problem_bytes`) built or building and not yet used, and one at least however
    large it is.

    Inside ``with ProblemPrefetch(keys):`` a call ``make_problem(*key)`` takes the problem
    built for the first unused entry of ``key`` (waiting for it if it is being built), so a
    caller whose calls follow ``keys`` finds every problem ready while it works on the one
    before. The build is :func:`make_problem`'s own, so the bytes are those of a call made
    then; each built problem is handed out once (callers may write into theirs). A call whose
    key is not listed, or whose build raised, builds as without a prefetch (and so raises what
    that build raises). Leaving the block cancels the builds not started and waits for those
    running; what was built and not used is dropped.

    ``taken``: calls answered from a build ahead; ``unused``: keys listed but never taken
    (counted when the block is left).
    """

    def __init__(self, keys: Iterable[ProblemKey], budget_bytes: int = PREFETCH_BYTES) -> None:
        self._plan: deque[ProblemKey] = deque(keys)
        self._budget = budget_bytes
        self._lock = threading.Lock()
        self._ahead: dict[ProblemKey, deque[Future[Problem]]] = {}
        self._ahead_bytes = 0
        self._previous: ProblemPrefetch | None = None
        self.taken = 0
        self.unused = 0

    def __enter__(self) -> ProblemPrefetch:
        global _PREFETCH
        self._previous, _PREFETCH = _PREFETCH, self
        self._fill()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        global _PREFETCH
        _PREFETCH = self._previous
        with self._lock:
            left = [future for futures in self._ahead.values() for future in futures]
            self.unused = len(left) + len(self._plan)
            self._plan.clear()
            self._ahead.clear()
            self._ahead_bytes = 0
        for future in left:
            future.cancel()
        # Builds already running finish here, not during whatever the caller does next.
        wait(left)

    def take(self, key: ProblemKey) -> Problem | None:
        """The problem built ahead for ``key`` (waiting for its build), or None when none is
        listed for it or its build raised (the caller then builds it itself)."""
        with self._lock:
            futures = self._ahead.get(key)
            if not futures:
                return None
            future = futures.popleft()
            if not futures:
                del self._ahead[key]
            self._ahead_bytes -= problem_bytes(*key[:3])
        self._fill()
        try:
            problem = future.result()
        except Exception:  # built again by the caller, which raises what the build raises
            return None
        self.taken += 1
        return problem

    def _fill(self) -> None:
        """Submit the next keys of the plan while the budget allows (one at least)."""
        from evaluator import host_pool

        with self._lock:
            while self._plan:
                key = self._plan[0]
                if key[2] not in NUMPY_DTYPES or key[4] not in KINDS:
                    self._plan.popleft()  # make_problem itself refuses these
                    continue
                size = problem_bytes(*key[:3])
                if self._ahead_bytes and self._ahead_bytes + size > self._budget:
                    return
                self._plan.popleft()
                future = host_pool.submit(_build_problem, *key)
                self._ahead.setdefault(key, deque()).append(future)
                self._ahead_bytes += size


def _ldexp(x: np.ndarray, exponent: Any) -> np.ndarray:
    """x·2^exponent, exact (real and imaginary parts scaled separately; NaN stays NaN)."""
    if np.iscomplexobj(x):
        return np.ldexp(x.real, exponent) + 1j * np.ldexp(x.imag, exponent)
    return np.ldexp(x, exponent)


def scaled_problem(problem: Problem, exponent: int) -> Problem:
    """``problem`` with A and B both multiplied by 2^``exponent``: the same X, exactly.

    kind ``scaled_up`` or ``scaled_down`` by the exponent's sign. The product is exact as long
    as nothing leaves the dtype's normal range, which ``SCALE_EXPONENTS`` guarantees for the
    bounded problems it is used on.
    """
    np_dtype = problem.b.dtype
    a = np.asfortranarray(_ldexp(problem.a, exponent), np_dtype)
    b = np.asfortranarray(_ldexp(problem.b, exponent), np_dtype)
    return Problem(a, b, "scaled_up" if exponent > 0 else "scaled_down", problem.seed)


# The containment case of issue 6: 64×8, B's column 0 all zeros, A[40, 3] non-finite.
CONTAINMENT_SHAPE = (64, 8)
CONTAINMENT_ENTRY = (40, 3)


def containment_problem(
    dtype: str,
    seed: int,
    value: float = np.inf,
    shape: tuple[int, int] = CONTAINMENT_SHAPE,
    entry: tuple[int, int] = CONTAINMENT_ENTRY,
    zero_columns: tuple[int, ...] = (0,),
    matrix: str = "A",
) -> Problem:
    """A bounded problem with ``zero_columns`` of B set to 0 and then the ``entry`` of
    ``matrix`` ("A" or "B") set to ``value`` (±Inf or NaN), kind ``containment``. Rows of X that
    do not depend on it (``evaluator.checks.containment``) must come out as without it; in a zero
    column x = 0 above an entry of A, so Inf·0 = NaN is what a kernel that multiplies instead of
    skipping spreads there.

    Raises:
        ValueError: ``entry`` not in the strict lower triangle of A, or not in B; ``matrix``
            neither "A" nor "B".
    """
    m, n = shape
    row, col = entry
    if matrix == "A" and not 0 <= col < row < m:
        raise ValueError(f"entry {entry} is not in the strict lower triangle of a {m}x{m} A")
    if matrix == "B" and not (0 <= row < m and 0 <= col < n):
        raise ValueError(f"entry {entry} is not in a {m}x{n} B")
    if matrix not in ("A", "B"):
        raise ValueError(f"matrix must be 'A' or 'B', not {matrix!r}")
    base = make_problem(m, n, dtype, seed)
    a, b = base.a.copy(order="F"), base.b.copy(order="F")
    b[:, list(zero_columns)] = 0
    (a if matrix == "A" else b)[row, col] = value
    return Problem(a, b, "containment", seed)


@dataclass(frozen=True)
class ContainmentCase:
    """One containment input: ``problem`` holds ``value`` at ``entry`` of ``matrix`` ("A" or
    "B"), with ``zero_columns`` of B zero."""

    problem: Problem
    matrix: str
    entry: tuple[int, int]
    value: float
    zero_columns: tuple[int, ...]

    def where(self) -> str:
        """The case in words, e.g. ``A[40, 3] = inf, B's columns (0,) zero``."""
        r, c = self.entry
        zeros = f", B's columns {self.zero_columns} zero" if self.zero_columns else ""
        return f"{self.matrix}[{r}, {c}] = {self.value}{zeros}"


# Rows of the non-finite entry of A in the drawn cases: one row drawn in each stratum, so every
# evaluation has one in the first 8 rows, one below them in the first warp of 32 rows and one in
# each half of the second. A kernel that multiplies by the zeros of the triangle at step k (0·x_k
# into rows solved before k) spreads a non-finite x_k, which is non-finite from row r of the
# entry on, into rows < r exactly when it does so at some step k >= r: a small r catches every
# such step after it (r = 1..7 leaves at most the first 7 steps unseen), and the strata put an r
# before and after each boundary of 8, 32 and 48 rows, where blocked kernels change phase.
CONTAINMENT_ROW_STRATA = ((1, 8), (8, 32), (32, 48), (48, 64))
# Rows of the non-finite entry of B: one case below row 32 and one at or after it.
CONTAINMENT_B_ROW_STRATA = ((1, 32), (32, 64))
_CONTAINMENT_STREAM = 0xC047


def containment_cases(dtype: str, seed: int) -> list[ContainmentCase]:
    """The containment inputs of one full verification, all 64×8 on the bounded problem of
    ``seed`` (``CONTAINMENT_SHAPE``), 7 in all, in this order:

    - issue 6's case, always first: A[40, 3] = +Inf, B's column 0 zero (its acceptance input);
    - 4 with a non-finite A[r, c]: r drawn in each of ``CONTAINMENT_ROW_STRATA``, c uniform in
      [0, r), the values +Inf, −Inf, NaN, NaN in a drawn order, a drawn set of 1 to 7 of B's
      columns zero (so Inf·0 = NaN in some columns and ±Inf in others);
    - 2 with a non-finite B[r, j] (no zero column): NaN and ±Inf, r drawn in each of
      ``CONTAINMENT_B_ROW_STRATA`` in a drawn order, j uniform in [0, 8).

    All drawn from ``seed`` (so a report's seed reproduces them).

    Raises:
        KeyError: unknown ``dtype``.
    """
    m, n = CONTAINMENT_SHAPE
    rng = np.random.default_rng([seed, _CONTAINMENT_STREAM])
    specs: list[tuple[str, tuple[int, int], float, tuple[int, ...]]] = [
        ("A", CONTAINMENT_ENTRY, np.inf, (0,))
    ]
    values = rng.permutation([np.inf, -np.inf, np.nan, np.nan])
    for (lo, hi), value in zip(CONTAINMENT_ROW_STRATA, values, strict=True):
        r = int(rng.integers(lo, hi))
        c = int(rng.integers(0, r))
        zeros = rng.choice(n, size=int(rng.integers(1, n)), replace=False)
        specs.append(("A", (r, c), float(value), tuple(sorted(int(j) for j in zeros))))
    b_values = [np.nan, float(rng.choice([np.inf, -np.inf]))]
    for (lo, hi), value in zip(CONTAINMENT_B_ROW_STRATA, rng.permutation(b_values), strict=True):
        specs.append(("B", (int(rng.integers(lo, hi)), int(rng.integers(0, n))), value, ()))
    return [
        ContainmentCase(
            containment_problem(dtype, seed, value, entry=entry, zero_columns=zeros, matrix=mat),
            mat,
            entry,
            value,
            zeros,
        )  # fmt: skip
        for mat, entry, value, zeros in specs
    ]


_MASK64 = 2**64 - 1


class CounterRng:
    """Uniform draws from a counter-based hash (SplitMix64's finalizer), with NumPy or CuPy.

    Draw number i of a stream is a pure function of (seed, i), evaluated elementwise, so the same
    code runs on the host (CPU tests) and on the device (timing refreshes its inputs there
    without cuRAND, which CuPy loads from a library the device machine may lack), and a seed
    reproduces every draw. ``uniform`` has numpy's ``Generator.uniform(low, high, size)``
    signature, so :func:`_uniform` takes either.
    """

    def __init__(self, xp: Any, seed: int) -> None:
        self.xp = xp
        # The stream's start: the seed spread over 64 bits by the golden-ratio increment.
        self._next = (seed * 0x9E3779B97F4A7C15) & _MASK64

    def uniform(self, low: float, high: float, size: tuple[int, ...]) -> Any:
        """float64 values uniform in [low, high) of shape ``size``, from the next draws."""
        xp = self.xp
        count = int(np.prod(size))
        x = xp.arange(count, dtype=xp.uint64) + xp.uint64(self._next)
        self._next = (self._next + count) & _MASK64
        x = (x ^ (x >> xp.uint64(30))) * xp.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> xp.uint64(27))) * xp.uint64(0x94D049BB133111EB)
        x = x ^ (x >> xp.uint64(31))
        unit = (x >> xp.uint64(11)).astype(xp.float64) * 2.0**-53
        return (low + (high - low) * unit).reshape(size)


def bounded_sets(rng: Any, m: int, n: int, dtype: str, count: int) -> tuple[Any, Any]:
    """``count`` bounded problems at once, as :func:`make_problem` draws them (diagonal magnitudes
    in [1, 2] with a random sign or phase, off-diagonals uniform in [-1, 1]/sqrt(m), B uniform in
    [-1, 1], strict upper triangle NaN), in the array module of ``rng`` (a :class:`CounterRng`).

    Returns A as (count, m·m) and B as (count, m·n) arrays of ``dtype``: row k is set k in
    Fortran order, ready to be written into device buffers in place.
    """
    xp = rng.xp
    np_dtype = NUMPY_DTYPES[dtype]
    complex_ = np.issubdtype(np_dtype, np.complexfloating)
    # Built transposed, at[k, j, i] = A_k(i, j), so that row-major memory is A_k's column order.
    rows = xp.arange(m)
    below = rows[:, None] > rows[None, :]  # at[j, i] with j > i: the strict upper triangle of A
    off = _uniform(rng, (count, m, m), complex_) / np.sqrt(m)
    magnitude = rng.uniform(1.0, 2.0, (count, m))
    turn = rng.uniform(0.0, 1.0, (count, m))
    phase = xp.exp(2j * np.pi * turn) if complex_ else xp.where(turn < 0.5, -1.0, 1.0)
    at = xp.where(below, xp.nan, xp.where(below.T, off, 0))
    at[:, rows, rows] = magnitude * phase
    bt = _uniform(rng, (count, n, m), complex_)
    return at.astype(np_dtype).reshape(count, m * m), bt.astype(np_dtype).reshape(count, m * n)
