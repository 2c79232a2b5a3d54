"""solve_tri's evaluation suite (``evaluator.op_suites.SUITES["solve_tri"]``): ggml's SOLVE_TRI
problems of ``seeds.solve_tri.inputs`` (guarded ggml tensors, different data per batch, strides
that are not the packed ones), run on raw device pointers and judged batch by batch by the
path's check (``evaluator.checks.solve_tri.check_output``, named ``solve_tri``); timed by
``evaluator.solve_tri_timing`` against cuBLAS ``strsmBatched`` (``CublasSolveTri``).

What one verification runs, per shape (docs/EVALUATOR.md, "The solve_tri op's checks"):

- one bounded problem per seed, the layouts rotating with the seed's position (``padded``,
  ``batch_swapped``, ``packed``: the quick check's one seed gets the padded layout);
- with ``growth`` (the full verification and the champion's held-out shapes), from the first
  seed: the layouts no seed took, an in-place solve (X = B, padded), and at n ≤ 64 ggml's own
  inputs, cuBLAS first run on the same data so that its per-batch NMSE widens the bound where
  it exceeds 1e-7 (issue 8).

Every output is X's whole buffer after one launch (guard bands and padding included), with A's
and B's buffers: ``out_of_bounds_write``, ``input_modified``, ``non_finite_output``, then
``row_relative_error`` (bounded data) or ``ggml_nmse`` (ggml's data). A launch the device
refuses is ``launch_geometry``. Failures carry the shape (n, k, b2, b3) and name the
parameters, the layout and the batch in their detail.

Each shape's problems are drawn in the host pool (``evaluator.host_pool``), all shapes at once
from the start, while the GPU solves the shapes before it; launches and checks run in order in
the calling thread, as before.

Imports nothing of CUDA at import time (the pipeline's process builds suites too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from evaluator import host_pool
from evaluator.checks.solve_tri import GGML_NMSE_MAX_N, shape_words
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from seeds.solve_tri.inputs import LAYOUTS, Problem, make_problem
from seeds.solve_tri.layout import packed_strides
from seeds.solve_tri.reference import forward_substitution, nmse

Shape = tuple[int, ...]
SolveTriShape = tuple[int, int, int, int]

# The layout of the i-th seed's bounded problem: the padded one first (row, matrix and batch
# padding filled with guard NaNs: the strongest test of strides), so the quick check has it.
LAYOUT_ORDER: tuple[str, ...] = ("padded", "batch_swapped", "packed")
assert set(LAYOUT_ORDER) == set(LAYOUTS)
# The seed of the one problem the determinism check solves repeatedly, and of run_once's.
DETERMINISM_SEED = 4242
RUN_ONCE_SEED = 7


def problems(shape: SolveTriShape, seeds: Sequence[int], growth: bool) -> list[Problem]:
    """The problems one verification solves at ``shape`` (module docstring), in order."""
    found = [
        make_problem(shape, seed, "bounded", LAYOUT_ORDER[i % len(LAYOUT_ORDER)])
        for i, seed in enumerate(seeds)
    ]
    if growth:
        first = seeds[0]
        used = {problem.layout for problem in found}
        unused = [layout for layout in LAYOUT_ORDER if layout not in used]
        found += [make_problem(shape, first, "bounded", layout) for layout in unused]
        found.append(make_problem(shape, first, "bounded", "padded", in_place=True))
        if shape[0] <= GGML_NMSE_MAX_N:
            found.append(make_problem(shape, first, "ggml", "padded"))
    return found


def describe_problem(problem: Problem) -> str:
    """Where a failure was found: the data kind, layout, in place or not, and the seed."""
    place = ", in place" if problem.in_place else ""
    return f"{problem.kind} inputs, {problem.layout} layout{place}, seed {problem.seed}"


def located(failure: CheckFailure, where: str) -> CheckFailure:
    """``failure`` with the inputs it was found on appended to its detail."""
    return CheckFailure(
        failure.check, failure.shape, failure.value, failure.bound, f"{failure.detail} [{where}]"
    )


def launch(
    solver: Any, problem: Problem
) -> tuple[CheckFailure | None, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """Copy the problem's buffers (guard bands and padding included) to the device, launch
    ``solver.solve_raw`` (the candidate's driver or the cuBLAS baseline, on its current or
    bound stream) once on their tensors, and read the buffers back.

    Returns ``launch_geometry`` (nothing ran) or None, and the host copies of X's, A's and B's
    buffers after the run (X's is B's for an in-place problem).
    """
    import cupy

    from seeds.driver import GeometryError

    a = cupy.asarray(problem.a.buffer)
    b = cupy.asarray(problem.b.buffer)
    x = b if problem.in_place else cupy.asarray(problem.x.buffer)
    args = (
        a.data.ptr + 4 * problem.a.offset, b.data.ptr + 4 * problem.b.offset,
        x.data.ptr + 4 * problem.x.offset, *problem.shape, problem.a.nb, problem.b.nb,
        problem.x.nb,
    )  # fmt: skip
    try:
        solver.solve_raw(*args)
    except GeometryError as error:
        detail = f"{shape_words(problem.shape)}: {error}"
        return CheckFailure("launch_geometry", problem.shape, None, None, detail), None
    cupy.cuda.Device().synchronize()
    return None, (x.get(), a.get(), b.get())


def baseline_nmse(baseline: Any, problem: Problem) -> np.ndarray:
    """cuBLAS's per-batch NMSE (b3, b2) against float64 on ``problem``'s own data (its X a
    fresh copy of the problem's buffers): the baseline of the ``ggml_nmse`` bound. The float64
    X is ``reference.reference``'s first result (the same ``forward_substitution``), without
    the |A⁻¹|·|A|·|X| it also computes and an NMSE does not use."""
    _, buffers = launch(baseline, problem)
    assert buffers is not None  # the baseline raises, never a geometry failure
    x_ref = forward_substitution(problem.a.view(), problem.b.view())
    return nmse(problem.x.view(buffers[0]), x_ref)


class SolveTriSuite:
    """The ``solve_tri`` op's evaluation (module docstring): the per-problem checks of
    ``evaluator.checks.solve_tri``, the layouts, in-place and ggml inputs of the full
    verification, determinism over repeated launches, timing by graph replay with fresh inputs
    per replay (``evaluator.solve_tri_timing``), certificates of format v3."""

    # What the full verification runs on top of the per-problem checks: every verified shape
    # solved in the packed, padded and batch-swapped layouts, and in place (X = B).
    added_checks = ("strided_layouts", "in_place_solve")
    # The checks every output gets (the certificate's): the memory checks, the numerical ones
    # (row_relative_error on bounded data, ggml_nmse on ggml's at n <= 64) and the audit of
    # the timed outputs.
    problem_checks = (
        "launch_geometry", "out_of_bounds_write", "input_modified", "non_finite_output",
        "row_relative_error", "ggml_nmse", "timed_output",
    )  # fmt: skip

    def verify(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], seeds: Sequence[int],
        growth: bool, check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]:  # fmt: skip
        """Every problem of :func:`problems` at every shape, each output judged by ``check``
        (``evaluator.checks.solve_tri.check_output``: ``check(problem, x_buffer, a_buffer,
        b_buffer, baseline_nmse)``); cuBLAS (``spec.baseline``) is loaded for ggml's inputs
        only, and closed here."""
        passed: list[Shape] = []
        baseline = None
        shapes4: list[SolveTriShape] = [tuple(shape) for shape in shapes]  # type: ignore[misc]
        calls = [partial(problems, shape4, list(seeds), growth) for shape4 in shapes4]
        try:
            with host_pool.prefetched(calls) as drawn:
                for shape4, ready in zip(shapes4, drawn, strict=True):
                    for problem in ready.result():
                        base = None
                        if problem.kind == "ggml":
                            baseline = baseline or spec.baseline(dtype)
                            base = baseline_nmse(baseline, problem)
                        failure, buffers = launch(driver, problem)
                        if failure is None and buffers is not None:
                            failure = check(problem, *buffers, base)
                        if failure:
                            return located(failure, describe_problem(problem)), passed
                    passed.append(shape4)
        finally:
            if baseline is not None:
                baseline.close()
        return None, passed

    def determinism(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], repeats: int
    ) -> CheckFailure | None:
        """One bounded problem per shape (padded layout) solved ``repeats`` times, X's buffer
        poisoned afresh each time: the results must be bit-identical (``nondeterministic``)."""
        for shape in shapes:
            problem = make_problem(tuple(shape), DETERMINISM_SEED, "bounded", "padded")  # type: ignore[arg-type]
            outputs = set()
            for _ in range(repeats):
                failure, buffers = launch(driver, problem)
                if failure or buffers is None:
                    return failure
                outputs.add(buffers[0].tobytes())
            if len(outputs) > 1:
                return CheckFailure(
                    "nondeterministic", problem.shape, float(len(outputs)), 1.0,
                    f"{shape_words(problem.shape)}: {len(outputs)} distinct results in {repeats} "
                    "runs on the same input",
                )  # fmt: skip
        return None

    def time(
        self, driver: Any, spec: Any, dtype: str, shape: Shape, baseline: Any,
        check: Callable[..., CheckFailure | None], rivals: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:  # fmt: skip
        """``evaluator.solve_tri_timing.time_shape`` at ``shape`` with its plan for the shape
        (:func:`~evaluator.solve_tri_timing.timing_plan`), the task's settings (its seed) over
        it."""
        from evaluator.solve_tri_timing import time_shape, timing_plan

        shape4: SolveTriShape = tuple(shape)  # type: ignore[assignment]
        plan = {**timing_plan(shape4), **settings}
        against = {name: rival.solve_raw for name, rival in rivals.items()}
        return time_shape(shape4, driver.solve_raw, baseline, check, rivals=against, **plan)

    def input_scales(self, dtype: str, seed: int) -> list[float]:
        """None: no scaled inputs are drawn for this op."""
        return []

    def run_once(self, driver: Any, spec: Any, dtype: str, shape: Shape, repeat: int) -> None:
        """A bounded problem's A and B (packed, ggml's own layout) each in a device allocation
        of exactly its size, X in another, launched ``repeat`` times (X is written whole every
        time; B only read)."""
        import cupy

        from evaluator.run_once import exact_device_copy

        n, k, b2, b3 = shape
        problem = make_problem((n, k, b2, b3), RUN_ONCE_SEED, "bounded", "packed")
        a = exact_device_copy(cupy, np.ascontiguousarray(problem.a.view()).ravel())
        b = exact_device_copy(cupy, np.ascontiguousarray(problem.b.view()).ravel())
        x = exact_device_copy(cupy, np.zeros(n * k * b2 * b3, dtype=np.float32))
        nb_a, nb_b = packed_strides(n, n, b2), packed_strides(k, n, b2)
        for _ in range(repeat):
            driver.solve_raw(a.data.ptr, b.data.ptr, x.data.ptr, n, k, b2, b3, nb_a, nb_b, nb_b)
        cupy.cuda.Device().synchronize()

    def not_verified(self, report: Any, spec: Any) -> list[str]:
        """What this op's verification did not cover, for the certificate."""
        return [
            "inputs outside the drawn distributions: bounded data (diagonal magnitudes in "
            "[1, 2] with a random sign, strict lower triangle uniform in [-1, 1]/sqrt(n), B "
            "uniform in [-1, 1]) judged row by row, and ggml's (A's lower triangle uniform in "
            "[0.1, 1], B in [-1, 1]) judged by NMSE at n <= 64 only",
            "NaN or Inf entries in A's lower triangle or in B (no containment check ran)",
            "strides other than the packed, padded and batch-swapped (b3 inner) layouts drawn; "
            "an X overlapping B other than exactly in place, or A (the driver refuses both)",
        ]
