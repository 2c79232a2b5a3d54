"""The red-team corpus on a real GPU: each entry refused by the check it names, at the stage it
names (``redteam.runner``: the pipeline, the memcheck before a new job best, or the champion
checks), in a job of its own path, and each path's control (the solver its entries start from,
with nothing planted) passing all of them, so that every refusal is its fault's doing.
``scripts/redteam_table.py`` runs the same and writes the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from redteam.corpus import CONTROLS, ENTRIES, with_block
from redteam.runner import evaluate_entry

from evaluator.champion import verify_champion
from evaluator.pipeline import Evaluator
from seeds.registry import get_path

pytestmark = pytest.mark.gpu
IDS = [entry.name for entry in ENTRIES]
CONTROL_RUNS = [(path, dtype) for path in CONTROLS for dtype in get_path(path).dtypes]
# The champion checks of each control, in the dtype its path's entries are mostly run in.
CONTROL_CHAMPIONS = {
    "trsm_small": "float64",
    "trsm_blocked": "float64",
    "trsm_small_z64": "complex128",
}
USED = sorted({(entry.path, entry.dtype) for entry in ENTRIES})


@pytest.fixture(scope="module")
def path_evaluators() -> Iterator[Callable[[str, str], Evaluator]]:
    """``get(path, dtype)``: one Evaluator on GPU 0 per (path, dtype) for this module, closed
    (its worker stopped) when the module is done."""
    made: dict[tuple[str, str], Evaluator] = {}

    def get(path: str, dtype: str) -> Evaluator:
        if (path, dtype) not in made:
            made[(path, dtype)] = Evaluator(path, dtype, gpu_index=0)
        return made[(path, dtype)]

    yield get
    for evaluator in made.values():
        evaluator.close()


def test_every_path_has_a_control_and_its_champion_dtype():
    assert set(CONTROL_CHAMPIONS) == set(CONTROLS) == {entry.path for entry in ENTRIES}


@pytest.mark.parametrize(("path", "dtype"), CONTROL_RUNS, ids=[f"{p}-{d}" for p, d in CONTROL_RUNS])
def test_each_paths_control_passes_the_pipeline(path_evaluators, path, dtype):
    report = path_evaluators(path, dtype).evaluate(with_block(CONTROLS[path], path))
    assert report.status == "ok", report.failure
    assert report.combined_score > 0


@pytest.mark.parametrize("path", sorted(CONTROL_CHAMPIONS))
def test_each_paths_control_passes_the_champion_checks(path):
    report = verify_champion(with_block(CONTROLS[path], path), path, CONTROL_CHAMPIONS[path], 0)
    assert report.status == "ok", report.failure


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_is_refused_by_its_check(path_evaluators, entry):
    outcome = evaluate_entry(entry, path_evaluators, gpu_index=0)
    assert (outcome.status, outcome.check) == (entry.status, entry.check), outcome.detail
    if entry.shape is not None:
        assert outcome.shape == entry.shape, outcome.detail
    for part in entry.detail:
        assert part in outcome.detail, outcome.detail


@pytest.mark.parametrize(("path", "dtype"), USED, ids=[f"{p}-{d}" for p, d in USED])
def test_the_workers_still_evaluate_the_control_after_the_corpus(path_evaluators, path, dtype):
    """Faults and timeouts retire a worker: the next evaluation gets a fresh one."""
    report = path_evaluators(path, dtype).evaluate(with_block(CONTROLS[path], path))
    assert report.status == "ok", report.failure
