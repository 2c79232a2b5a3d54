"""``kernevo jobs --watch``'s table (evolver.watch): one line per job at any terminal width, and
the watch ending once no job is active."""

from __future__ import annotations

import pytest
from rich.console import Console

from evolver.watch import DROP_ORDER, job_table, watch_jobs

ROWS = [
    {"id": 12, "path": "trsm_small_batched", "dtype": "complex128", "gpu": "nvidia-h200",
     "state": "running", "iteration": 17, "config": {"iterations": 60}, "best_score": 2.5641,
     "best_speedup": 2.04, "programs": 33, "claimed_by": "host-gpu1", "attempts": 2},
    {"id": 3, "path": "trsm_small", "dtype": "float64", "gpu": "nvidia-h200",
     "state": "complete", "iteration": 60, "config": {"iterations": 60}, "best_score": 1.5,
     "best_speedup": 1.2, "programs": 62},
]  # fmt: skip


def _drawn(width: int, rows=ROWS) -> list[str]:
    console = Console(width=width, record=True, force_terminal=False)
    console.print(job_table(rows, width))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [200, 120, 80, 60, 40, 30])
def test_every_job_is_one_line_that_fits_the_terminal(width: int) -> None:
    lines = _drawn(width)
    # Title, top rule, header, header rule, one line per job, bottom rule.
    assert len(lines) == 5 + len(ROWS), "\n".join(lines)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    assert any(" 12 " in line and "2.564" in line for line in lines)


def test_narrow_terminals_lose_the_least_needed_columns_first() -> None:
    wide = "\n".join(_drawn(200))
    assert all(name in wide for name in ("worker (attempt)", "gpu", "progs", "17/60"))
    sixty = "\n".join(_drawn(60))
    assert "17/60" in sixty and "running" in sixty  # the progress stays longest
    assert not any(name in sixty for name in ("worker", "nvidia-h200", "complex128"))
    assert DROP_ORDER[-1] == "progress"


def test_without_a_width_every_column_is_drawn() -> None:
    console = Console(width=300, record=True, force_terminal=False)
    console.print(job_table(ROWS))
    assert "host-gpu1 (2)" in console.export_text()


def test_the_watch_ends_once_no_job_is_active() -> None:
    states = iter(["running", "running", "complete"])

    def fetch():
        state = next(states)
        return [{**ROWS[0], "state": state}]

    console = Console(width=60, record=True, force_terminal=False)
    assert watch_jobs(fetch, interval_s=0.0, console=console) == 3
    assert "complete" in console.export_text()
