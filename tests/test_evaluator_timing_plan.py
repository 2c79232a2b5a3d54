"""The timing plan (evaluator/timing_plan.py): the small paths keep the plan they were measured
with; large shapes get bounded memory, work per graph and replay time."""

from __future__ import annotations

import pytest

from evaluator.timing import REPLAYS_PER_DRAW
from evaluator.timing_plan import (
    DRAW_ELEMENTS,
    GRAPHS_PER_ROUND,
    MIN_CALLS,
    MIN_SAMPLES,
    ROUNDS_SECONDS,
    SLOW_RATE,
    TimingPlan,
    timing_plan,
    trsm_flops,
)
from seeds.registry import PATHS


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (16, 16), (33, 2), (64, 64), (64, 33)])
def test_small_shapes_keep_the_measured_plan(m, n, dtype):
    assert timing_plan(m, n, dtype) == TimingPlan(32, 60, 5, 30, REPLAYS_PER_DRAW)


SHAPES = [(256, 256), (1024, 1024), (2048, 256), (4096, 17), (129, 8192), (8192, 8192),
          (16384, 16384), (16384, 1)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
@pytest.mark.parametrize(("m", "n"), SHAPES)
def test_large_shapes_are_bounded(m, n, dtype):
    plan = timing_plan(m, n, dtype)
    per_set = m * m + m * n
    assert plan.calls >= MIN_CALLS and plan.single_calls <= plan.calls
    # What is drawn at once stays bounded, but never below one graph of two sets.
    drawn = plan.calls * plan.replays_per_draw * per_set
    assert drawn <= max(DRAW_ELEMENTS, MIN_CALLS * per_set)
    # The rounds' estimated replay time stays bounded unless 12 rounds alone exceed it.
    solve_s = trsm_flops(m, n, dtype) / SLOW_RATE
    replay_s = plan.samples * GRAPHS_PER_ROUND * plan.calls * solve_s
    assert replay_s <= ROUNDS_SECONDS or plan.samples == MIN_SAMPLES


def test_every_timed_shape_of_every_path_gets_a_plan():
    # timing_plan is trsm's (m, n); other ops' suites plan their own timing.
    for spec in (spec for spec in PATHS.values() if spec.op == "trsm"):
        for dtype in spec.dtypes:
            for m, n in spec.timed_shapes:
                assert timing_plan(m, n, dtype).calls >= MIN_CALLS


def test_the_largest_shape_is_two_sets_of_twelve_rounds():
    assert timing_plan(16384, 16384, "complex128") == TimingPlan(2, 12, 2, 2, 1)


@pytest.mark.parametrize(("m", "n"), [(0, 1), (1, 0), (-3, 4)])
def test_no_plan_for_an_empty_shape(m, n):
    with pytest.raises(ValueError, match="no timing plan"):
        timing_plan(m, n, "float64")
