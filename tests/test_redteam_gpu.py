"""The red-team corpus on a real GPU: each entry refused by the check it names, at the stage it
names (``redteam.runner``: the pipeline, the memcheck before a new job best, or the champion
checks), and the corpus's own solver with nothing planted passing all of them, so that every
refusal is its fault's doing. ``scripts/redteam_table.py`` runs the same and writes the table.
"""

from __future__ import annotations

import pytest
from redteam.corpus import CONTROL, ENTRIES, with_block
from redteam.runner import evaluate_entry

from evaluator.champion import verify_champion

pytestmark = pytest.mark.gpu
IDS = [entry.name for entry in ENTRIES]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_the_corpus_solver_alone_passes_the_pipeline(evaluators, dtype):
    report = evaluators(dtype).evaluate(with_block(CONTROL))
    assert report.status == "ok", report.failure
    assert report.combined_score > 0


def test_the_corpus_solver_alone_passes_the_champion_checks():
    report = verify_champion(with_block(CONTROL), "trsm_small", "float64", 0)
    assert report.status == "ok", report.failure


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_is_refused_by_its_check(evaluators, entry):
    outcome = evaluate_entry(entry, evaluators, gpu_index=0)
    assert (outcome.status, outcome.check) == (entry.status, entry.check), outcome.detail
    if entry.shape is not None:
        assert outcome.shape == entry.shape, outcome.detail
    for part in entry.detail:
        assert part in outcome.detail, outcome.detail


@pytest.mark.parametrize("dtype", sorted({entry.dtype for entry in ENTRIES}))
def test_the_workers_still_evaluate_the_control_after_the_corpus(evaluators, dtype):
    """Faults and timeouts retire a worker: the next evaluation gets a fresh one."""
    assert evaluators(dtype).evaluate(with_block(CONTROL)).status == "ok"
