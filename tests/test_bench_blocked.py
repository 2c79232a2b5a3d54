"""``scripts/bench_blocked.py``'s accuracy column without a GPU: its ``trt02_ratio`` is the
evaluator's LAPACK xTRT02 ratio (``evaluator.checks.lapack_ratio``) run with NumPy, the largest
over B's columns, inf for a non-finite solution, and judged against the evaluator's threshold.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from evaluator.checks import lapack_ratio
from evaluator.inputs import make_problem
from seeds.spec import DTYPES

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_blocked.py"


def load_script():  # noqa: ANN201  (the script's module)
    spec = importlib.util.spec_from_file_location("bench_blocked", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


bench = load_script()


def substitution(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SciPy's triangular solve in the working precision (backward stable)."""
    return solve_triangular(np.tril(np.nan_to_num(a)), b, lower=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ratio_is_the_evaluators_largest_column_ratio(dtype):
    problem = make_problem(96, 9, dtype, seed=4)
    x = substitution(problem.a, problem.b)
    x[:, 3] *= 1 + 1e-3  # one column well above rounding, so the maximum is that column's
    ratios = lapack_ratio.lapack_ratios(problem.a, problem.b, x, np)
    assert int(np.argmax(ratios)) == 3
    assert bench.trt02_ratio(problem.a, problem.b, x) == float(ratios.max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_correct_solve_passes_the_evaluators_threshold(dtype):
    problem = make_problem(300, 17, dtype, seed=2)
    ratio = bench.trt02_ratio(problem.a, problem.b, substitution(problem.a, problem.b))
    assert bench.LAPACK_THRESHOLD is lapack_ratio.LAPACK_THRESHOLD
    assert 0 <= ratio < 3.0  # a tenth of the threshold (tests/test_lapack_ratio.py's bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_solution_reads_inf(dtype, bad):
    problem = make_problem(40, 3, dtype, seed=5)
    x = substitution(problem.a, problem.b)
    x[7, 1] = bad
    assert bench.trt02_ratio(problem.a, problem.b, x) == math.inf


@pytest.mark.parametrize(("m", "dtype"), [(512, "float32"), (1024, "float64")])
def test_an_error_the_m_scaled_ratio_missed_now_fails(m, dtype):
    """The script once divided by m and used ε = 2u: a column off by a relative 1e-4 (float32)
    or 1e-13 (float64) read under 1 there, and reads over the threshold now."""
    problem = make_problem(m, 4, dtype, seed=m)
    x = substitution(problem.a, problem.b)
    x[:, 2] *= 1 + (1e-4 if dtype == "float32" else 1e-13)
    ratio = bench.trt02_ratio(problem.a, problem.b, x)
    assert ratio >= bench.LAPACK_THRESHOLD
    assert ratio / (2 * m) < 1  # the old formula's reading of the same solution
