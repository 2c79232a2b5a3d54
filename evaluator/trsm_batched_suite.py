"""trsm_batched's evaluation suite (``evaluator.op_suites.SUITES["trsm_batched"]``): batches of
bounded problems (``evaluator.trsm_batched_inputs``: packed row-major matrices between guard
bands, different data in every batch index), solved in place on raw device pointers
(``driver.solve_raw(a_ptr, b_ptr, m, n, batch)``) and judged batch index by batch index by the
path's check (``evaluator.checks.trsm_batched.check_output``, named ``trsm_batched``); timed by
``evaluator.trsm_batched_timing`` against cuBLAS ``?trsmBatched``.

One bounded problem per seed and shape; the verified shapes (``seeds.trsm_small_batched.spec``)
give the launch geometries their ragged ends (rows across both halves a lane holds, columns
across blocks, batches of 1 and 3 that no batch tile above 1 divides). A launch the device
refuses is ``launch_geometry``. Imports nothing of CUDA at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from evaluator.checks.trsm_batched import shape_words
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from evaluator.trsm_batched_inputs import BatchedProblem, TrsmBatchedShape, make_problem

Shape = tuple[int, ...]
# The seed of the one problem the determinism check solves repeatedly, and of run_once's.
DETERMINISM_SEED = 4242
RUN_ONCE_SEED = 7


def launch(
    solver: Any, problem: BatchedProblem
) -> tuple[CheckFailure | None, tuple[np.ndarray, np.ndarray] | None]:
    """Copy the problem's guarded buffers to the device, launch ``solver.solve_raw`` once on
    them (in place in B) and read both back: ``launch_geometry`` (nothing ran) or None, and the
    host copies of B's (now X's) and A's buffers."""
    import cupy

    from seeds.driver import GeometryError

    a_layout, b_layout = problem.layouts
    a_host, b_host = problem.buffers()
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    try:
        solver.solve_raw(
            a.data.ptr + a_layout.offset(0), b.data.ptr + b_layout.offset(0), *problem.shape
        )
    except GeometryError as error:
        detail = f"{shape_words(problem.shape)}: {error}"
        return CheckFailure("launch_geometry", problem.shape, None, None, detail), None
    cupy.cuda.Device().synchronize()
    return None, (b.get(), a.get())


class TrsmBatchedSuite:
    """The ``trsm_batched`` op's evaluation (module docstring); certificates of format v3."""

    # Nothing beyond the per-problem checks: every verified shape is one batch of bounded
    # problems, different in every batch index.
    added_checks: tuple[str, ...] = ()
    problem_checks = (
        "launch_geometry", "out_of_bounds_write", "input_modified", "non_finite_output",
        "row_relative_error", "timed_output",
    )  # fmt: skip

    def verify(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], seeds: Sequence[int],
        growth: bool, check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]:  # fmt: skip
        """One bounded problem per seed at every shape, each output judged by ``check``
        (``check(problem, x_buffer, a_buffer)``); ``growth`` adds nothing."""
        passed: list[Shape] = []
        for shape in shapes:
            shape3: TrsmBatchedShape = tuple(shape)  # type: ignore[assignment]
            for seed in seeds:
                problem = make_problem(shape3, dtype, seed)
                failure, buffers = launch(driver, problem)
                if failure is None and buffers is not None:
                    failure = check(problem, *buffers)
                if failure:
                    return _located(failure, seed), passed
            passed.append(shape3)
        return None, passed

    def determinism(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], repeats: int
    ) -> CheckFailure | None:
        """One problem per shape solved ``repeats`` times from the same input: the results must
        be bit-identical (``nondeterministic``)."""
        for shape in shapes:
            problem = make_problem(tuple(shape), dtype, DETERMINISM_SEED)  # type: ignore[arg-type]
            outputs = set()
            for _ in range(repeats):
                failure, buffers = launch(driver, problem)
                if failure or buffers is None:
                    return failure
                outputs.add(buffers[0].tobytes())
            if len(outputs) > 1:
                return CheckFailure(
                    "nondeterministic", problem.shape, float(len(outputs)), 1.0,
                    f"{shape_words(problem.shape)}: {len(outputs)} distinct results in "
                    f"{repeats} runs on the same input",
                )  # fmt: skip
        return None

    def time(
        self, driver: Any, spec: Any, dtype: str, shape: Shape, baseline: Any,
        check: Callable[..., CheckFailure | None], rivals: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:  # fmt: skip
        """``evaluator.trsm_batched_timing.time_shape`` with its plan for the shape, the task's
        settings (its seed) over it."""
        from evaluator.trsm_batched_timing import time_shape, timing_plan

        shape3: TrsmBatchedShape = tuple(shape)  # type: ignore[assignment]
        plan = {**timing_plan(shape3, dtype), **settings}
        against = {name: rival.solve_raw for name, rival in rivals.items()}
        return time_shape(shape3, dtype, driver.solve_raw, baseline, check, rivals=against, **plan)

    def input_scales(self, dtype: str, seed: int) -> list[float]:
        """None: no scaled inputs are drawn for this op."""
        return []

    def run_once(self, driver: Any, spec: Any, dtype: str, shape: Shape, repeat: int) -> None:
        """A and B of one problem each in a device allocation of exactly its size, B afresh
        for every launch (the solve overwrites it)."""
        import cupy

        from evaluator.run_once import exact_device_copy

        problem = make_problem(tuple(shape), dtype, RUN_ONCE_SEED)  # type: ignore[arg-type]
        a = exact_device_copy(cupy, problem.a.ravel())
        for _ in range(repeat):
            b = exact_device_copy(cupy, problem.b.ravel())
            driver.solve_raw(a.data.ptr, b.data.ptr, *problem.shape)
        cupy.cuda.Device().synchronize()

    def not_verified(self, report: Any, spec: Any) -> list[str]:
        """What this op's verification did not cover, for the certificate."""
        return [
            "inputs outside the drawn distribution: bounded data (diagonal magnitudes in [1, 2] "
            "with a random sign or phase, strict lower triangle uniform in [-1, 1]/sqrt(m), B "
            "uniform in [-1, 1]) judged row by row in every batch index",
            "NaN or Inf entries in A's lower triangle or in B (no containment check ran)",
            "layouts other than packed row-major batches (the loader sends others to cuBLAS)",
        ]


def _located(failure: CheckFailure, seed: int) -> CheckFailure:
    """``failure`` with the seed of the inputs it was found on appended to its detail."""
    return CheckFailure(
        failure.check, failure.shape, failure.value, failure.bound,
        f"{failure.detail} [bounded inputs, seed {seed}]",
    )  # fmt: skip
