"""The red-team corpus without a GPU: every entry is a candidate an LLM could hand in (it passes
the screen and compiles with NVRTC for its dtype), the corpus covers every kind of cheat issue 6
lists, and the cubin check refuses exactly the entries expected at ``device_global_state``, so
that every other entry's GPU expectation (``tests/test_redteam_gpu.py``) tests a run-time check.
"""

from __future__ import annotations

import pytest
from redteam.corpus import ENTRIES, ISSUE_KINDS, STAGES, Entry

from evaluator.checks.device_state import device_state_failure
from evaluator.compile import compile_cubin
from evaluator.pipeline import Evaluator
from evaluator.screen import screen
from seeds.registry import get_path

SPEC = get_path("trsm_small")
IDS = [entry.name for entry in ENTRIES]


def _cubin(entry: Entry, tmp_path) -> bytes:
    result = compile_cubin(entry.source(), SPEC.compile_options(entry.dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    return result.cubin


def test_the_corpus_covers_every_kind_of_issue_6_with_distinct_entries():
    assert len(ENTRIES) >= 16 and len(set(IDS)) == len(IDS)
    assert {entry.kind for entry in ENTRIES} - {None} == set(ISSUE_KINDS)
    assert len(ISSUE_KINDS) == 16
    assert len({entry.block for entry in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        assert entry.stage in STAGES and entry.mechanism and entry.dtype in SPEC.dtypes
        assert (entry.stage == "compile") == (entry.check == "device_global_state")
        assert (entry.status == "contract_error") == (entry.stage == "compile")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_changes_only_the_block_and_passes_the_screen(entry):
    source = entry.source()
    assert screen(source, SPEC.seed_source()) is None
    # Everything outside the block is the seed's: only the block's text differs.
    seed = SPEC.seed_source()
    before, after = seed.split("// EVOLVE-BLOCK-START\n")[0], seed.split("// EVOLVE-BLOCK-END")[1]
    assert source.startswith(before) and source.endswith(after) and entry.block in source


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_compiles_and_the_cubin_check_refuses_exactly_the_device_state(entry, tmp_path):
    failure = device_state_failure(_cubin(entry, tmp_path))
    if entry.check != "device_global_state":
        assert failure is None, failure
        return
    assert failure is not None and failure.check == "device_global_state"
    for part in entry.detail:
        assert part in failure.detail, failure.detail


def test_compile_only_pipeline_refuses_the_device_state_entries():
    """What CI sees of the compile-stage entries: the pipeline's own report, status and check
    as the GPU run gives them (stage ``compile``, nothing run)."""
    evaluators: dict[str, Evaluator] = {}
    try:
        for entry in ENTRIES:
            if entry.stage != "compile":
                continue
            evaluator = evaluators.setdefault(
                entry.dtype, Evaluator("trsm_small", entry.dtype, gpu_index=None)
            )
            report = evaluator.evaluate(entry.source())
            assert (report.status, report.failure.check) == (entry.status, entry.check), entry.name
            assert report.stage == "compile" and report.combined_score == 0
    finally:
        for evaluator in evaluators.values():
            evaluator.close()


def test_the_whitelist_entry_knows_no_held_out_shape():
    """The champion stage can only catch it if the held-out shapes are outside its list."""
    (entry,) = [e for e in ENTRIES if e.name == "shape_whitelist"]
    for m, n in SPEC.held_out_shapes:
        assert f"{{{m}, {n}}}" not in entry.block
    for m, n in SPEC.verify_shapes:
        assert f"{{{m}, {n}}}" in entry.block


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_the_whitelist_knows_every_shape_the_full_verification_solves(dtype, monkeypatch):
    """The entry stands for a kernel right on every shape scoring runs; when the pipeline adds
    inputs at a new shape (the scale sweep's 33x2 did), the whitelist must learn it, or the
    entry is refused before the champion stage for another reason. Records the shapes the real
    ``verify`` (full, with issue 6's inputs) and the quick check solve, on a host stand-in for
    the candidate (exact substitution in float64/complex128)."""
    import numpy as np
    from scipy.linalg import solve_triangular

    import evaluator.gpu_tasks as gpu_tasks

    solved: set[tuple[int, int]] = set()

    def run_candidate(driver, problem):
        solved.add(problem.shape)
        wide = np.complex128 if np.iscomplexobj(problem.a) else np.float64
        a = np.tril(np.nan_to_num(problem.a.astype(wide), nan=0.0, posinf=np.inf))
        with np.errstate(all="ignore"):
            x = solve_triangular(a, problem.b.astype(wide), lower=True, check_finite=False)
        return None, np.asfortranarray(x.astype(problem.b.dtype))

    monkeypatch.setattr(gpu_tasks, "run_candidate", run_candidate)
    failure, _ = gpu_tasks.verify(None, dtype, list(SPEC.verify_shapes), [11, 12, 13], True)
    assert failure is None, failure  # every input was reached
    assert gpu_tasks.verify(None, dtype, list(SPEC.quick_shapes), [14], False)[0] is None
    (entry,) = [e for e in ENTRIES if e.name == "shape_whitelist"]
    assert solved, "verify solved nothing"
    for m, n in sorted(solved):
        assert f"{{{m}, {n}}}" in entry.block, (m, n)
