"""The end of a job's summary line counts its programs in good English."""

from __future__ import annotations

import pytest

from evolver.runner import programs_recorded


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 programs recorded"), (1, "1 program recorded"), (2, "2 programs recorded")],
)
def test_programs_recorded(count: int, text: str) -> None:
    assert programs_recorded(count) == text
