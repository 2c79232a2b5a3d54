"""The `band_bidiag` schedule (``seeds.band_bidiag.schedule``): stages, sweeps, steps and
launches, checked against brute force — the launch count the paper gives, the sweeps each launch
runs, disjoint rows within a launch under the three-cycle rule (and overlapping ones under two
cycles where the target is bidiagonal, which is why the rule is three), the room the bulges need
in the padded layout, and the grid bound the launch-config kernel computes.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeds.band_bidiag import schedule
from seeds.band_bidiag.layout import PaddedLayout
from seeds.band_bidiag.schedule import Stage

SHAPES = [(n, bw, tw) for n, bw, tw in itertools.product(
    (2, 3, 5, 17, 64, 101), (1, 2, 3, 7, 32, 40), (1, 2, 4, 16, 32))]  # fmt: skip


def brute_active(n: int, stage: Stage, cycle: int, separation: int = 3) -> list[int]:
    """Every sweep R whose step cycle − separation·R exists, highest first."""
    return [
        r
        for r in range(schedule.last_sweep(n, stage), -1, -1)
        if 0 <= cycle - separation * r < schedule.sweep_steps(n, stage, r)
    ]


def test_stages_reduce_the_bandwidth_to_one_by_tw():
    assert schedule.stages(1000, 32, 32) == [Stage(32, 31)]
    assert schedule.stages(1000, 64, 16) == [Stage(64, 16), Stage(48, 16), Stage(32, 16),
                                             Stage(16, 15)]  # fmt: skip
    assert schedule.stages(1000, 40, 32) == [Stage(40, 32), Stage(8, 7)]
    assert schedule.stages(10, 1, 32) == []  # already bidiagonal
    assert schedule.stages(5, 64, 2) == [Stage(4, 2), Stage(2, 1)]  # bandwidth clipped to n − 1
    assert schedule.stages(1, 3, 8) == []
    with pytest.raises(ValueError):
        schedule.stages(10, 4, 0)
    with pytest.raises(ValueError):
        schedule.effective_bandwidth(0, 4)


@pytest.mark.parametrize(("n", "bw", "tw"), SHAPES)
def test_launches_active_sweeps_and_steps(n, bw, tw):
    for stage in schedule.stages(n, bw, tw):
        last = schedule.last_sweep(n, stage)
        cycles = schedule.stage_cycles(n, stage)
        done = set()
        for cycle in range(cycles + 6):  # a few past the end: nothing runs there
            active = schedule.active_sweeps(n, stage, cycle)
            assert active == brute_active(n, stage, cycle)
            if cycle >= cycles:
                assert active == []
            done.update((r, cycle - 3 * r) for r in active)
        # Every step of every sweep runs exactly once; the last sweep is the last to finish.
        steps = [schedule.sweep_steps(n, stage, r) for r in range(last + 1)]
        expected = {(r, k) for r in range(last + 1) for k in range(steps[r])}
        assert done == expected
        if last >= 0:
            assert schedule.sweep_steps(n, stage, last) == 1
            assert cycles == 3 * last + 1


def test_launch_count_is_about_three_n_bw_over_tw():
    # The paper's estimate 3·(n − 1)·BW/TW; exact: Σ over stages of 3·(n − 2 − (b − t)) + 1.
    assert schedule.launches(8192, 32, 32) == 3 * (8192 - 2 - 1) + 1
    for n, bw, tw in ((8192, 32, 32), (16384, 128, 32), (4096, 64, 16)):
        estimate = 3 * (n - 1) * bw / tw
        assert 0.9 * estimate < schedule.launches(n, bw, tw) <= 1.05 * estimate


@pytest.mark.parametrize(("n", "bw", "tw"), SHAPES)
def test_three_cycles_keep_the_tasks_of_a_launch_on_disjoint_rows(n, bw, tw):
    for stage in schedule.stages(n, bw, tw):
        for cycle in range(schedule.stage_cycles(n, stage)):
            spans = sorted(t.rows() for t in schedule.cycle_tasks(n, stage, cycle))
            for (_, hi), (lo, _) in itertools.pairwise(spans):
                assert hi < lo, (stage, cycle, spans)


def overlap_under(separation: int, n: int, stage: Stage) -> bool:
    """Whether some launch's tasks share rows when sweeps start ``separation`` apart."""
    last = schedule.last_sweep(n, stage)
    for cycle in range(separation * last + 1):
        rows = sorted(
            schedule.task(n, stage, r, cycle - separation * r).rows()
            for r in brute_active(n, stage, cycle, separation)
        )
        if any(lo <= hi for (_, hi), (lo, _) in itertools.pairwise(rows)):
            return True
    return False


def test_two_cycles_overlap_exactly_when_the_target_is_bidiagonal():
    # The paper: R + n·BW > R + 1 + BW + TW fails for n = 2 unless b − t > 1.
    assert overlap_under(2, 200, Stage(32, 31))  # b − t = 1: the last stage always
    assert overlap_under(2, 200, Stage(8, 7))
    assert not overlap_under(2, 200, Stage(32, 16))  # b − t = 16 > 1
    assert not overlap_under(3, 200, Stage(32, 31))
    assert overlap_under(1, 200, Stage(32, 16))


@pytest.mark.parametrize(("n", "bw", "tw"), SHAPES)
def test_the_bulges_fit_the_padded_layout(n, bw, tw):
    """Every entry a task reads or writes lies within −ku ≤ j − i… of the padded band: the
    row task's rows row..c1 × columns c0..c1 and the column task's rows c0..c1 × columns
    c0..min(c1 + b, n − 1)."""
    layout = PaddedLayout.of(n, bw)
    above, below = layout.ku, layout.ldab - 1 - layout.ku
    for stage in schedule.stages(n, bw, tw):
        for r in range(schedule.last_sweep(n, stage) + 1):
            for k in range(schedule.sweep_steps(n, stage, r)):
                t = schedule.task(n, stage, r, k)
                assert t.row <= t.c0 < t.c1 <= n - 1
                _, c_end = t.columns(stage.b, n)
                assert c_end - t.c0 <= above  # column task, row c0
                assert t.c1 - t.row <= above  # row task, row `row`
                assert t.c1 - t.c0 <= below  # row task, row c1 at column c0


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20000), bw=st.integers(0, 300), tw=st.integers(1, 128))
def test_max_active_bounds_every_launch(n, bw, tw):
    """``max_active`` (what the launch-config kernel computes) is at least the number of sweeps
    of any launch, and reached by some launch (checked on a sample of cycles for speed)."""
    most = schedule.max_active(n, bw, tw)
    seen = 1
    for stage in schedule.stages(n, bw, tw):
        cycles = schedule.stage_cycles(n, stage)
        for cycle in {0, 1, 2, cycles // 3, cycles // 2, cycles - 1, *range(3 * 40, 3 * 44)}:
            if 0 <= cycle < cycles:
                seen = max(seen, len(schedule.active_sweeps(n, stage, cycle)))
    assert seen <= most
    if n < 400:  # exhaustive at small n: the bound is reached
        full = 1
        for stage, cycle in schedule.all_cycles(n, bw, tw):
            full = max(full, len(schedule.active_sweeps(n, stage, cycle)))
        assert full == most
