"""Seconds per candidate that issue 6's checks add, measured on the seed in one process on GPU 0.

    python scripts/check_costs.py [DTYPE ...]     (default: float64 complex64)

Prints a Markdown table per dtype:
- numerics: the wall time of exactly what ``evaluator.gpu_tasks.verify`` adds with ``growth``
  (the trap at m >= 16, scaled inputs per shape, the containment cases, the scale sweep,
  the metamorphic relations), run here on their own over the path's verification shapes;
- noise floor and plausibility: ``evaluator.timing.time_shape`` over the timed shapes, wall time,
  and the share of its graph replays that the candidate's second graph and the empty-kernel
  graph take (2 of the 5 graphs replayed each round: wall x 2/5 of the replay part, whose wall
  is measured as the whole minus the single calls and audits it also runs — an upper bound);
- memcheck before a new job best: ``evaluator.new_best.memcheck`` on the seed's cubin (it runs
  only for a candidate that beats the job's best; the job's mean per candidate is in
  ``scripts/job_stats.py``).
Run on the lent GPU after ``. scripts/device_env.sh``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from evaluator.checks.accuracy import solution_check
from evaluator.compile import compile_cubin
from evaluator.gpu_tasks import (
    check_containment_cases,
    check_relations,
    check_scale_sweep,
    check_scaled,
    relation_shapes,
    solve_checked,
)
from evaluator.inputs import make_problem
from evaluator.new_best import memcheck
from evaluator.timing import time_shape
from seeds.registry import get_path

SEED = 20261130


def _numerics(driver: Any, dtype: str, shapes: list[tuple[int, int]]) -> float:
    t0 = time.perf_counter()
    for m, n in shapes:
        problem = make_problem(m, n, dtype, SEED)
        if m >= 16:
            assert solve_checked(driver, make_problem(m, n, dtype, SEED, kind="trap"))[0] is None
        assert check_scaled(driver, problem) is None
    assert check_containment_cases(driver, dtype, SEED) is None
    assert check_scale_sweep(driver, dtype, SEED) is None
    for shape in relation_shapes(shapes):
        assert check_relations(driver, dtype, shape, SEED) is None
    return time.perf_counter() - t0


def main(dtypes: list[str]) -> None:
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    spec = get_path("trsm_small")
    check = solution_check(spec.reference_check)
    for dtype in dtypes:
        compiled = compile_cubin(spec.seed_source(), spec.compile_options(dtype, "sm_90"), "sm_90")
        driver = spec.driver(compiled.cubin, dtype)
        _numerics(driver, dtype, list(spec.verify_shapes))  # warm: module load, BLAS, caches
        numerics_s = _numerics(driver, dtype, list(spec.verify_shapes))
        baseline = spec.baseline(dtype)
        t0 = time.perf_counter()
        for m, n in spec.timed_shapes:
            _, _, failure = time_shape(m, n, dtype, driver.solve_raw, baseline, check, seed=SEED)
            assert failure is None, failure
        timing_s = time.perf_counter() - t0
        baseline.close()
        t0 = time.perf_counter()
        outcome = memcheck(compiled.cubin, spec, dtype, 0)
        memcheck_s = time.perf_counter() - t0
        assert outcome.ran and outcome.failure is None, outcome
        print(f"\n{dtype}, seed kernel\n")
        print("| check | added seconds per candidate | how |\n|---|---|---|")
        print(
            f"| numerics (scaled, trap, containment, metamorphic) | {numerics_s:.3f} "
            f"| those inputs alone over the {len(spec.verify_shapes)} verification shapes |"
        )
        print(
            f"| noise floor + plausibility (2 of 5 graphs) | <= {timing_s * 2 / 5:.3f} "
            f"| 2/5 of time_shape's {timing_s:.3f} s over {len(spec.timed_shapes)} shapes |"
        )
        print(f"| memcheck before a new job best | {memcheck_s:.3f} "
              "| per new best only (2 shapes) |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:] or ["float64", "complex64"])
