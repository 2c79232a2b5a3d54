"""band_bidiag's evaluation suite (``evaluator.op_suites.SUITES["band_bidiag"]``): upper bands of
``seeds.band_bidiag.inputs`` reduced by the candidate and judged by the path's check
(``evaluator.checks.band_bidiag.check_output``, named ``band_bidiag_singular_values``: the
singular values of (d, e) against DGBBRD + DBDSQR in float64); timed by
``evaluator.band_bidiag_timing`` against LAPACK ?gbbrd on the host.

What one verification runs, per shape (n, bandwidth) (docs/EVALUATOR.md, "The band_bidiag op's
check", for the kinds and their costs):

- one ``random`` band per seed;
- with ``growth`` (the full verification and the champion's held-out shapes), from the first
  seed: the other cheap kinds of the spec's ``verify_kinds`` (``zero_rows``,
  ``repeated_blocks``) at every shape, and the paper's spectra (built as U·Σ·Vᵀ and reduced to
  band form in float64 on the host, O(n³)) where they are affordable and matter most: every
  spectrum kind at n ≤ :data:`ALL_SPECTRA_MAX_N`, one per shape (rotating with the seed and n)
  up to :data:`ONE_SPECTRUM_MAX_N`, none above; and once per shape the loader's entry,
  ``driver.solve(band)`` (the captured graph), on a device band between guard bands: the band
  unchanged (``input_modified``, guards ``out_of_bounds_write``) and (d, e) bit-identical to
  the launch-by-launch reduction (``graph_matches_launches``).

Each band is reduced launch by launch (``driver.reduce_raw``) in the kernel's padded storage,
which sits between guard bands (``out_of_bounds_write``); a launch the device refuses is
``launch_geometry``; then (d, e) go to the check (``band_bidiag_output_shape``,
``non_finite_output``, ``singular_values``). Failures name n and bandwidth in their detail
(``CheckFailure.describe`` would read a shape of two values as trsm's m, n).

The host work that does not depend on the candidate — drawing every band of the verification
(the spectra are O(n³)) and its float64 reference singular values (DGBBRD + DBDSQR) — starts
at once in the host pool (``evaluator.host_pool``), the spectra past
:data:`ALL_SPECTRA_MAX_N` first (the longest tasks), while the GPU reduces the bands in their
order; each band's reference is handed to the check (``check(problem, output, sigma=…)``),
which otherwise computes the same values itself. The GPU's launches, the checks and the order
in which a failure is found are those of a verification in one thread.

Imports nothing of CUDA at import time (the pipeline's process builds suites too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from evaluator import host_pool
from evaluator.checks.band_bidiag import where
from evaluator.checks.integrity import GUARD_ELEMENTS, guard_pattern
from evaluator.inputs import NUMPY_DTYPES
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from seeds.band_bidiag.inputs import KINDS, SPECTRUM_KINDS, BandProblem, make_band
from seeds.band_bidiag.layout import bidiagonal, pack
from seeds.band_bidiag.reference import reference_singular_values

Shape = tuple[int, ...]

# The kind every seed draws (any n, cheap); the others come with growth.
SEED_KIND = "random"
# Spectra (O(n³) on the host: 1.8 s at n = 512, 14 s at 2048 on the development machine): every
# kind up to here, one kind per shape up to ONE_SPECTRUM_MAX_N, none beyond.
ALL_SPECTRA_MAX_N = 512
ONE_SPECTRUM_MAX_N = 2048
DETERMINISM_SEED = 4242
RUN_ONCE_SEED = 7


@dataclass(frozen=True)
class Drawn:
    """One band of a verification and the seed it was drawn from."""

    problem: BandProblem
    seed: int

    def describe(self) -> str:
        """Where a failure was found: the input kind and the seed."""
        return f"{self.problem.kind} input, seed {self.seed}"


def draw(kind: str, shape: Sequence[int], dtype: str, seed: int) -> Drawn:
    """The band of ``kind`` at ``shape`` (n, bandwidth) in ``dtype`` drawn from ``seed`` (the
    generator seeded by the seed, the shape and the kind)."""
    n, bw = shape
    rng = np.random.default_rng([seed, n, bw, KINDS.index(kind)])
    return Drawn(make_band(kind, n, bw, NUMPY_DTYPES[dtype], rng), seed)


def spectrum_kinds(shape: Sequence[int], kinds: Sequence[str], seed: int) -> list[str]:
    """The spectrum kinds of ``kinds`` a growth verification draws at ``shape`` (module
    docstring): all at n ≤ ALL_SPECTRA_MAX_N, one (rotating with ``seed`` and n) up to
    ONE_SPECTRUM_MAX_N, none beyond or at bandwidth 0 (a diagonal holds no rotated
    spectrum)."""
    n, bw = shape
    spectra = [kind for kind in kinds if kind in SPECTRUM_KINDS]
    if not spectra or bw < 1 or n > ONE_SPECTRUM_MAX_N:
        return []
    if n <= ALL_SPECTRA_MAX_N:
        return spectra
    return [spectra[(seed + n) % len(spectra)]]


def band_draws(
    shape: Sequence[int], seeds: Sequence[int], growth: bool, kinds: Sequence[str]
) -> list[tuple[str, int]]:
    """(kind, seed) of every band one verification reduces at ``shape`` (module docstring), in
    order."""
    found = [(SEED_KIND, seed) for seed in seeds]
    if growth:
        first = seeds[0]
        cheap = [kind for kind in kinds if kind not in SPECTRUM_KINDS and kind != SEED_KIND]
        found += [(kind, first) for kind in cheap]
        found += [(kind, first) for kind in spectrum_kinds(shape, kinds, first)]
    return found


def bands(
    shape: Sequence[int], dtype: str, seeds: Sequence[int], growth: bool, kinds: Sequence[str]
) -> list[Drawn]:
    """The bands one verification reduces at ``shape`` (module docstring), in order."""
    draws = band_draws(shape, seeds, growth, kinds)
    return [draw(kind, shape, dtype, seed) for kind, seed in draws]


def prepared(
    kind: str, shape: Sequence[int], dtype: str, seed: int
) -> tuple[Drawn, np.ndarray | None]:
    """The band of :func:`draw` and its reference singular values
    (``reference.reference_singular_values``: float64, DGBBRD + DBDSQR), or ``None`` where they
    raised: the check then computes them itself and raises where a verification in one thread
    raised (after the band's reduction, and only if the output's shape and entries pass)."""
    found = draw(kind, shape, dtype, seed)
    try:
        return found, reference_singular_values(found.problem.band)
    except Exception:  # noqa: BLE001 - re-raised by the check, in its place
        return found, None


def first_needed(shape: Sequence[int], kind: str) -> bool:
    """Whether a band's preparation goes to the pool ahead of the others: the spectra past
    ALL_SPECTRA_MAX_N, O(n³) on one core (14 s at n = 2048 on the development machine), the
    longest tasks of a verification by far."""
    return kind in SPECTRUM_KINDS and shape[0] > ALL_SPECTRA_MAX_N


def located(failure: CheckFailure, where_found: str) -> CheckFailure:
    """``failure`` with the input it was found on appended to its detail."""
    return CheckFailure(
        failure.check, failure.shape, failure.value, failure.bound,
        f"{failure.detail} [{where_found}]",
    )  # fmt: skip


def reduce_guarded(
    driver: Any, band: np.ndarray
) -> tuple[CheckFailure | None, tuple[np.ndarray, np.ndarray] | None]:
    """Reduce ``band`` launch by launch (``driver.reduce_raw`` on the current stream) in its
    padded storage, copied to the device between two guard bands of ``GUARD_ELEMENTS`` guard
    values; returns ``launch_geometry`` or ``out_of_bounds_write`` (a guard band written) or
    None, and (d, e) read from the storage (None when nothing ran)."""
    import cupy

    from seeds.driver import GeometryError

    n, bw = band.shape[1], band.shape[0] - 1
    ab, layout = pack(band)
    guard = guard_pattern(band.dtype, GUARD_ELEMENTS)
    g = len(guard)
    host = guard + ab.tobytes(order="F") + guard
    device = cupy.asarray(np.frombuffer(host, dtype=np.uint8))
    try:
        driver.reduce_raw(device.data.ptr + g, n, bw, layout.ldab, layout.ku)
    except GeometryError as error:
        return CheckFailure(
            "launch_geometry", None, None, None, f"at {where(n, bw)}: {error}"
        ), None
    cupy.cuda.Device().synchronize()
    out = device.get().tobytes()
    if out[:g] + out[-g:] != guard + guard:
        detail = f"at {where(n, bw)}: a guard band around the padded band storage was written"
        return CheckFailure("out_of_bounds_write", None, None, None, detail), None
    reduced = np.frombuffer(out[g:-g], dtype=band.dtype).reshape(ab.shape, order="F")
    return None, bidiagonal(reduced, layout)


def solve_guarded(driver: Any, band: np.ndarray) -> tuple[CheckFailure | None, Any]:
    """``driver.solve`` (the loader's entry: the shape's captured graph) on ``band`` copied to
    the device between guard bands; returns ``out_of_bounds_write`` or ``input_modified`` (the
    caller's band or its guards changed) or None, and (d, e) on the host."""
    import cupy

    n, bw = band.shape[1], band.shape[0] - 1
    guard = np.frombuffer(guard_pattern(band.dtype, GUARD_ELEMENTS), dtype=band.dtype)
    host = np.concatenate([guard, band.ravel(order="F"), guard])
    device = cupy.asarray(host)
    view = device[guard.size : guard.size + band.size].reshape(band.shape, order="F")
    d, e = driver.solve(view)
    cupy.cuda.Device().synchronize()
    after = device.get()
    g = guard.size
    if after[:g].tobytes() + after[-g:].tobytes() != guard.tobytes() * 2:
        detail = f"at {where(n, bw)}: a guard band around the caller's band was written"
        return CheckFailure("out_of_bounds_write", None, None, None, detail), None
    if after.tobytes() != host.tobytes():
        detail = f"at {where(n, bw)}: solve(band) changed the caller's band"
        return CheckFailure("input_modified", None, None, None, detail), None
    return None, (d.get(), e.get())


def same_bits(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether two (d, e) pairs are bit-identical."""
    return all(a.tobytes() == b.tobytes() for a, b in zip(first, second, strict=True))


class BandBidiagSuite:
    """The ``band_bidiag`` op's evaluation (module docstring): launch-by-launch reductions in
    guarded storage judged by the singular values, the graph the loader replays checked against
    them, determinism over replays, timing by graph replay against LAPACK ?gbbrd on the host
    (``evaluator.band_bidiag_timing``), certificates of format v3."""

    # What the full verification runs on top of the per-problem checks: the loader's entry
    # (solve, one captured graph) gives the launch-by-launch reduction's bits.
    added_checks = ("graph_matches_launches",)
    # The checks every output gets (the certificate's); input_modified: the caller's band
    # after solve (verification with growth) and after every timed replay.
    problem_checks = (
        "launch_geometry", "out_of_bounds_write", "input_modified", "band_bidiag_output_shape",
        "non_finite_output", "singular_values", "timed_output",
    )  # fmt: skip

    def verify(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], seeds: Sequence[int],
        growth: bool, check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]:  # fmt: skip
        """Every band of :func:`bands` at every shape reduced and judged by ``check``
        (``evaluator.checks.band_bidiag.check_output``: ``check(problem, (d, e), sigma=…)``,
        ``sigma`` the band's reference singular values, prepared in the host pool, or None);
        with ``growth``, the graph of each shape against the first band's launch-by-launch
        bits."""
        kinds = spec.verify_kinds
        plan = [(tuple(shape), band_draws(shape, seeds, growth, kinds)) for shape in shapes]
        items = [(shape, kind, seed) for shape, draws in plan for kind, seed in draws]
        calls = [partial(prepared, kind, shape, dtype, seed) for shape, kind, seed in items]
        # Stable: the longest first, then every band in the order the GPU reduces them.
        order = sorted(range(len(items)), key=lambda i: not first_needed(*items[i][:2]))
        with host_pool.prefetched(calls, order) as ready:
            return self._verify_prepared(driver, plan, iter(ready), growth, check)

    def _verify_prepared(
        self, driver: Any, plan: Sequence[tuple[Shape, Sequence[tuple[str, int]]]],
        ready: Iterator[Future[tuple[Drawn, np.ndarray | None]]], growth: bool,
        check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]:  # fmt: skip
        """:meth:`verify` on the bands of ``plan`` (shape, its (kind, seed) in order), whose
        futures ``ready`` yields in that order."""
        passed: list[Shape] = []
        for shape, draws in plan:
            n, bw = shape
            first: tuple[np.ndarray, np.ndarray] | None = None
            drawn: list[Drawn] = []
            for _ in draws:
                item, sigma = next(ready).result()
                drawn.append(item)
                failure, output = reduce_guarded(driver, item.problem.band)
                if failure is None and output is not None:
                    failure = check(item.problem, output, sigma=sigma)
                    first = first or output
                if failure:
                    return located(failure, item.describe()), passed
            if growth and first is not None:
                failure, graphed = solve_guarded(driver, drawn[0].problem.band)
                if failure is None and not same_bits(graphed, first):
                    failure = CheckFailure(
                        "graph_matches_launches", None, None, None,
                        f"at {where(n, bw)}: solve(band), the captured graph, gave other bits "
                        "than the same reduction launched launch by launch",
                    )  # fmt: skip
                if failure:
                    return located(failure, drawn[0].describe()), passed
            passed.append((n, bw))
        return None, passed

    def determinism(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], repeats: int
    ) -> CheckFailure | None:
        """One ``random`` band per shape reduced launch by launch once and through the graph
        ``repeats`` times: every (d, e) bit-identical (``nondeterministic``)."""
        for shape in shapes:
            n, bw = shape
            band = draw(SEED_KIND, shape, dtype, DETERMINISM_SEED).problem.band
            failure, output = reduce_guarded(driver, band)
            if failure or output is None:
                return failure
            outputs = {b"".join(part.tobytes() for part in output)}
            for _ in range(repeats):
                failure, graphed = solve_guarded(driver, band)
                if failure:
                    return failure
                outputs.add(b"".join(part.tobytes() for part in graphed))
            if len(outputs) > 1:
                return CheckFailure(
                    "nondeterministic", None, float(len(outputs)), 1.0,
                    f"at {where(n, bw)}: {len(outputs)} distinct (d, e) in {repeats + 1} "
                    "reductions of the same band (one launch by launch, the others by graph)",
                )  # fmt: skip
        return None

    def time(
        self, driver: Any, spec: Any, dtype: str, shape: Shape, baseline: Any,
        check: Callable[..., CheckFailure | None], rivals: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:  # fmt: skip
        """``evaluator.band_bidiag_timing.time_shape`` at ``shape`` (the task's settings, its
        seed, over the module's defaults)."""
        from evaluator.band_bidiag_timing import time_shape

        n, bw = shape
        return time_shape((n, bw), dtype, driver, baseline, check, rivals=rivals, **settings)

    def input_scales(self, dtype: str, seed: int) -> list[float]:
        """None: no scaled inputs are drawn for this op."""
        return []

    def run_once(self, driver: Any, spec: Any, dtype: str, shape: Shape, repeat: int) -> None:
        """A ``random`` band's padded storage in a device allocation of exactly its size,
        reloaded and reduced launch by launch ``repeat`` times (the reduction works in place)."""
        import cupy

        from evaluator.run_once import exact_device_copy

        n, bw = shape
        band = draw(SEED_KIND, shape, dtype, RUN_ONCE_SEED).problem.band
        ab, layout = pack(band)
        flat = ab.ravel(order="F")
        storage = exact_device_copy(cupy, flat)
        for _ in range(repeat):
            storage.set(flat)
            driver.reduce_raw(storage.data.ptr, n, bw, layout.ldab, layout.ku)
        cupy.cuda.Device().synchronize()

    def not_verified(self, report: Any, spec: Any) -> list[str]:
        """What this op's verification did not cover, for the certificate."""
        return [
            "bands outside the drawn kinds: entries uniform in [-1, 1] (random, every 7th row "
            "zero, repeated blocks) and the paper's spectra (arithmetic, log decay, quarter "
            f"circle, repeated, rank deficient) built as U S V^T, at n <= {ONE_SPECTRUM_MAX_N} "
            f"only: every spectrum at n <= {ALL_SPECTRA_MAX_N}, one per shape above",
            "NaN or Inf entries in the band (no containment check ran)",
            "a speedup over LAPACK ?gbbrd measured in the same rounds: LAPACK (single-threaded "
            "reference code on the host CPU) was timed on its own, once per (n, bandwidth, "
            "dtype), so the speedup's interval holds the kernel's spread only",
            "writes inside the kernel's padded storage outside the band and its bulges (only "
            "the guard bands around it are compared)",
        ]
