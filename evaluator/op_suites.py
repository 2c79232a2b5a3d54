"""What the evaluator does that depends on the op: the inputs it draws, the checks it applies
to outputs, how it times a kernel against the baseline, and how it launches one problem for
compute-sanitizer and Nsight Compute. Everything else — screen, compile, the cubin's contract
check, the worker process, drivers and baselines loaded through the path's spec and released
at the end of a task, the order of stages, the score — is the pipeline's, the same for every op.

An op's suite (:class:`OpSuite`) is named in :data:`SUITES` by the op's name
(``"module:attribute"``, an absolute module name, imported on first use so that the pipeline's
process never imports CuPy through it). trsm's, :class:`TrsmSuite`, is the evaluator as it was
(``evaluator.gpu_tasks.verify`` and ``check_determinism``, ``evaluator.timing.time_shape`` on
``timing_plan``'s settings, ``evaluator.run_once``'s A and B): its reports are what they were.
A new op brings a module of its own with a suite and one entry here (docs/CONTRACTS.md,
"Adding an op"): solve_tri's is ``evaluator.solve_tri_suite`` (timed by
``evaluator.solve_tri_timing``), band_bidiag's ``evaluator.band_bidiag_suite`` (timed by
``evaluator.band_bidiag_timing``), trsm_batched's ``evaluator.trsm_batched_suite`` (timed by
``evaluator.trsm_batched_timing``; both batched solves' timing is ``evaluator.set_timing``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from kernevo.certificate import CERTIFICATE_FORMAT

Shape = tuple[int, ...]


class OpSuite(Protocol):
    """The op-specific parts of an evaluation (all run in the GPU worker, but
    :attr:`added_checks` and :meth:`input_scales`, which the pipeline reads).

    - ``added_checks``: the names of the checks the full verification runs beyond the
      per-problem ones (trsm: scale invariance, non-finite containment, three metamorphic
      relations); a passing report lists them in ``checks_run`` after the reference check's own.
    - ``verify(driver, spec, dtype, shapes, seeds, growth, check)``: check every shape on fresh
      inputs of every seed (``growth``: the full verification's extra inputs and checks, not
      the quick check's nor the re-check's), each output judged by ``check`` (the path's
      reference check, ``evaluator.checks.accuracy.SOLUTION_CHECKS[spec.reference_check]``)
      and by the memory checks (guard bands, inputs unchanged); returns the first failure (or
      ``None``) and the shapes that passed.
    - ``determinism(driver, spec, dtype, shapes, repeats)``: one input per shape solved
      ``repeats`` times must give bit-identical outputs (``nondeterministic`` otherwise).
    - ``time(driver, spec, dtype, shape, baseline, check, rivals, settings)``: the candidate
      against the path's baseline (``spec.baseline(dtype)``) and the ``rivals`` (name →
      driver: the champion's or the parent's) in the same rounds at ``shape``; ``settings``
      are the task's own (its ``seed``), which win over the suite's plan. Returns the
      candidate's :class:`ShapeTiming`, one :class:`RivalTiming` per rival and the first
      failure (its timed outputs audited by ``check``, then ``implausible_time``).
    - ``input_scales(dtype, seed)``: the factors of the scaled inputs the full verification of
      ``seed`` checked (empty when it scales none).
    - ``run_once(driver, spec, dtype, shape, repeat)``: one problem at ``shape``, launched
      ``repeat`` times with every input and output its own device allocation of exactly its
      size (CuPy's pool is off), for compute-sanitizer and ncu (``evaluator.run_once``).
    - ``problem_checks``: the names of the checks ``verify`` and ``time`` apply to every
      output (the memory checks ``out_of_bounds_write`` and ``input_modified`` among them:
      the certificate requires them), which a champion's certificate lists between the
      pipeline's ``screen compile device_global_state`` and ``recheck_after_timing``.
    - optional ``certificate_format`` (default ``kernevo.certificate.CERTIFICATE_V3``; trsm's
      is v2) and ``not_verified(report, spec) -> list[str]`` (statements the certificate adds
      to the pipeline's about what this op's verification did not cover).
    """

    added_checks: tuple[str, ...]
    problem_checks: tuple[str, ...]

    def verify(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], seeds: Sequence[int],
        growth: bool, check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]: ...  # fmt: skip

    def determinism(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], repeats: int
    ) -> CheckFailure | None: ...

    def time(
        self, driver: Any, spec: Any, dtype: str, shape: Shape, baseline: Any,
        check: Callable[..., CheckFailure | None], rivals: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]: ...  # fmt: skip

    def input_scales(self, dtype: str, seed: int) -> list[float]: ...

    def run_once(self, driver: Any, spec: Any, dtype: str, shape: Shape, repeat: int) -> None: ...


class TrsmSuite:
    """trsm's evaluation (docs/EVALUATOR.md): A m×m lower triangular and B m×n, column-major,
    launched on raw pointers (``driver.solve_raw(a_ptr, b_ptr, m, n, lda, ldb)``), X in B; the
    path's ``verify_kinds``; issue 6's scaled inputs, containment cases and metamorphic
    relations; timed by graph replay with fresh inputs per replay."""

    # What the full verification (verify with growth) runs on top of the per-problem checks.
    added_checks = (
        "scale_invariance", "nonfinite_containment", "metamorphic_linearity",
        "metamorphic_row_scaling", "metamorphic_column_permutation",
    )  # fmt: skip
    # The per-problem checks and the timing's audit (evaluator.certificate.PIPELINE_CHECKS
    # names them between the pipeline's own).
    problem_checks = (
        "launch_geometry", "non_finite_output", "out_of_bounds_write", "input_modified",
        "scaled_residual", "forward_error", "replayed_result", "timed_output",
    )  # fmt: skip
    # trsm's certificates stay in format v2 (kernevo.certificate), byte for byte.
    certificate_format = CERTIFICATE_FORMAT

    def verify(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], seeds: Sequence[int],
        growth: bool, check: Callable[..., CheckFailure | None],
    ) -> tuple[CheckFailure | None, list[Shape]]:  # fmt: skip
        """``evaluator.gpu_tasks.verify`` with the path's ``verify_kinds``, the problems of its
        shape loop built ahead in the host pool (:func:`verify_problem_keys`,
        ``evaluator.inputs.ProblemPrefetch``): the same inputs, drawn while the GPU and the
        checks work on the ones before."""
        from evaluator import gpu_tasks
        from evaluator.inputs import ProblemPrefetch

        shapes = [tuple(s) for s in shapes]
        keys = verify_problem_keys(dtype, shapes, seeds, growth, spec.verify_kinds)
        with ProblemPrefetch(keys):
            return gpu_tasks.verify(
                driver, dtype, shapes, list(seeds), growth, check, spec.verify_kinds,
            )  # type: ignore[return-value]  # fmt: skip

    def determinism(
        self, driver: Any, spec: Any, dtype: str, shapes: Sequence[Shape], repeats: int
    ) -> CheckFailure | None:
        """``evaluator.gpu_tasks.check_determinism``."""
        from evaluator import gpu_tasks

        return gpu_tasks.check_determinism(driver, dtype, [tuple(s) for s in shapes], repeats)  # type: ignore[misc]

    def time(
        self, driver: Any, spec: Any, dtype: str, shape: Shape, baseline: Any,
        check: Callable[..., CheckFailure | None], rivals: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:  # fmt: skip
        """``evaluator.timing.time_shape`` (reached through ``evaluator.gpu_tasks``) on the
        drivers' ``solve_raw``, with ``timing_plan``'s settings for the shape and the task's
        over them."""
        from evaluator import gpu_tasks
        from evaluator.timing_plan import timing_plan

        m, n = shape
        plan = {**timing_plan(m, n, dtype).as_kwargs(), **settings}
        against = {name: rival.solve_raw for name, rival in rivals.items()}
        return gpu_tasks.time_shape(  # type: ignore[no-any-return]
            m, n, dtype, driver.solve_raw, baseline, check, rivals=against, **plan
        )

    def input_scales(self, dtype: str, seed: int) -> list[float]:
        """Every scale the verification checked: the extremes at each shape and the sweep
        once, drawn from ``seed`` (``evaluator.inputs.scale_exponents``)."""
        from evaluator.inputs import scale_exponents

        return [2.0**e for e in scale_exponents(dtype, seed)]

    def run_once(self, driver: Any, spec: Any, dtype: str, shape: Shape, repeat: int) -> None:
        """A and B of ``make_problem(m, n, dtype, seed=7)`` at their exact sizes, B afresh for
        every launch (TRSM overwrites it), launched on raw pointers as the verification
        launches (the sanitizer shape (33, 31) lies outside the envelope of a path that serves
        m = 64 only, trsm_small_z64, which ``solve`` refuses, yet the verification runs such a
        path there too)."""
        import cupy

        from evaluator.inputs import make_problem
        from evaluator.run_once import exact_device_copy

        m, n = shape
        problem = make_problem(m, n, dtype, seed=7)
        a = exact_device_copy(cupy, problem.a)
        for _ in range(repeat):
            b = exact_device_copy(cupy, problem.b)
            driver.solve_raw(a.data.ptr, b.data.ptr, m, n, m, m)
        cupy.cuda.Device().synchronize()


def verify_problem_keys(
    dtype: str, shapes: Sequence[Shape], seeds: Sequence[int], growth: bool,
    kinds: Sequence[str],
) -> list[tuple[int, int, str, int, str]]:  # fmt: skip
    """The ``make_problem`` calls of ``evaluator.gpu_tasks.verify``'s shape loop, in its
    order, as ``evaluator.inputs.ProblemKey``: per shape (m, n), the bounded problem of every
    seed, with ``growth`` and m ≥ 16 the problems of ``kinds`` on the first seed, and for
    m ≥ 2 the fresh draw of the first problem's audit partner (``checks.replay.audit_partner``:
    the first seed mixed with its partner mix, kind bounded). Not the few calls after the
    loop, made once and small (the scale sweep's 33×2, the containment cases' 64×8, the
    metamorphic relations' at m ≤ 1024). ``tests/test_trsm_prefetch.py`` pins this list
    against the calls verify makes."""
    from evaluator.checks.replay import _PARTNER_SEED_MIX

    if not seeds:
        return []
    first = seeds[0]
    keys: list[tuple[int, int, str, int, str]] = []
    for m, n in shapes:
        keys += [(m, n, dtype, seed, "bounded") for seed in seeds]
        if growth and m >= 16:
            keys += [(m, n, dtype, first, kind) for kind in kinds]
        if m >= 2:
            keys.append((m, n, dtype, first ^ _PARTNER_SEED_MIX, "bounded"))
    return keys


SUITES: dict[str, str] = {
    "trsm": "evaluator.op_suites:TrsmSuite",
    "solve_tri": "evaluator.solve_tri_suite:SolveTriSuite",
    "band_bidiag": "evaluator.band_bidiag_suite:BandBidiagSuite",
    "trsm_batched": "evaluator.trsm_batched_suite:TrsmBatchedSuite",
}
"""Each op's suite by the op's name: ``"module:attribute"`` naming a class (constructed with no
argument) or an object; absolute module names. Every op with a registered path has one
(``tests/test_ops_registered.py``)."""


class UnknownSuiteError(ValueError):
    """An op the evaluator has no suite for: its paths cannot be evaluated yet."""


def suite_for(op: str) -> OpSuite:
    """The evaluation suite of ``op``.

    Raises:
        UnknownSuiteError: no entry in :data:`SUITES` (one line naming the ops that have one).
        ModuleNotFoundError, AttributeError: the entry names no such module or attribute.
    """
    name = SUITES.get(op)
    if name is None:
        raise UnknownSuiteError(
            f"the evaluator has no suite for op {op!r} (evaluator.op_suites.SUITES: "
            f"{', '.join(SUITES)}); docs/CONTRACTS.md, 'Adding an op', says what it needs"
        )
    module_name, _, attribute = name.partition(":")
    found = getattr(importlib.import_module(module_name), attribute)
    return found() if isinstance(found, type) else found  # type: ignore[no-any-return]
