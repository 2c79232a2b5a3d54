"""The table ``python -m evaluator.bench`` prints: each timed shape in its op's own parameters."""

from __future__ import annotations

from types import SimpleNamespace

from evaluator.bench import format_rows
from evaluator.report import ShapeTiming


def timing(m: int, n: int, shape: tuple[int, ...] = ()) -> ShapeTiming:
    return ShapeTiming(
        m=m, n=n, shape=shape, candidate_us=12.3, candidate_spread_us=0.3, baseline_us=36.1,
        baseline_spread_us=0.3, candidate_single_call_us=39.6, baseline_single_call_us=98.1,
    )  # fmt: skip


def test_an_ops_shape_is_printed_by_its_own_parameters():
    """On the H200, evaluator.bench printed solve_tri's four timed shapes as 0×0 (trsm's m and n
    fields, which the other ops leave at 0)."""
    report = SimpleNamespace(passed=True, dtype="float32", timings=[timing(0, 0, (64, 6, 4, 2))])
    (row,) = format_rows("seed", report)
    assert "| 64×6×4×2 |" in row and "0×0" not in row


def test_a_trsm_shape_is_m_by_n():
    report = SimpleNamespace(passed=True, dtype="complex128", timings=[timing(64, 16)])
    (row,) = format_rows("seed", report)
    assert "| 64×16 |" in row
