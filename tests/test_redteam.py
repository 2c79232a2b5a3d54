"""The red-team corpus without a GPU: every entry is a candidate an LLM could hand in for its path
(it passes the screen and compiles with NVRTC in every dtype it is written for), each path's
control compiles in every dtype of the path, the corpus covers every kind of cheat its path's
issue lists (issue 6 for trsm_small, issue 7 item 6 for trsm_blocked and trsm_small_z64), every
expected check is a name the evaluator reports, and the cubin check refuses exactly the entries
expected at ``device_global_state``, so that every other entry's GPU expectation
(``tests/test_redteam_gpu.py``) tests a run-time check. Where a fault can be modelled on the host
(the trsm_blocked faults that change X), the evaluator's own verification, run on the model,
must refuse it with the entry's check at the entry's shape.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest
from redteam import blocked, z64
from redteam.corpus import CONTROLS, ENTRIES, ISSUE_KINDS, PATH_KINDS, STAGES, with_block
from redteam.models import BlockedModel

import evaluator.gpu_tasks as gpu_tasks
from evaluator.champion import SANITIZER_TOOLS, sanitizer_plan
from evaluator.checks.accuracy import SOLUTION_CHECKS
from evaluator.checks.device_state import device_state_failure
from evaluator.checks.integrity import GUARD_ELEMENTS
from evaluator.compile import compile_cubin
from evaluator.inputs import make_problem
from evaluator.new_best import memcheck_shapes
from evaluator.pipeline import NUMERIC_CHECKS, VERIFY_SEED_COUNT, Evaluator
from evaluator.screen import screen
from seeds.registry import get_path

ROOT = Path(__file__).resolve().parents[1]
SPEC = get_path("trsm_small")
IDS = [entry.name for entry in ENTRIES]
COMPILES = [(entry, dtype) for entry in ENTRIES for dtype in entry.dtypes]
CONTROL_COMPILES = [(path, dtype) for path in CONTROLS for dtype in get_path(path).dtypes]


def _cubin(source: str, path: str, dtype: str, tmp_path) -> bytes:
    spec = get_path(path)
    result = compile_cubin(source, spec.compile_options(dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    return result.cubin


def evaluator_check_names() -> tuple[set[str], set[str]]:
    """The check names the evaluator's failures carry, read from its source: every first
    argument of a ``CheckFailure(...)`` call that is a string or a module constant, plus the
    numerical checks of the full verification (``NUMERIC_CHECKS``: the metamorphic relations
    name theirs through an attribute); and the prefixes of the names built at run time
    (``f"sanitizer_{tool}"``, ``"timed_output_" + check``)."""
    names, prefixes = set(NUMERIC_CHECKS), set()
    for file in sorted((ROOT / "evaluator").rglob("*.py")):
        module = ".".join(file.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(file.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            if getattr(node.func, "id", None) != "CheckFailure":
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
            elif isinstance(first, ast.Name):
                value = getattr(importlib.import_module(module), first.id, None)
                if isinstance(value, str):
                    names.add(value)
            elif isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant):
                prefixes.add(first.values[0].value)
            elif isinstance(first, ast.BinOp) and isinstance(first.left, ast.Constant):
                prefixes.add(first.left.value)
    return names, prefixes


def test_the_corpus_covers_every_kind_of_every_path_with_distinct_entries():
    assert len(ENTRIES) >= 16 + 4 and len(set(IDS)) == len(IDS)
    assert len(ISSUE_KINDS) == 16 and set(PATH_KINDS) == set(CONTROLS)
    for path, kinds in PATH_KINDS.items():
        covered = {entry.kind for entry in ENTRIES if entry.path == path} - {None}
        assert covered == set(kinds), path
    assert len({(entry.path, entry.block) for entry in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        spec = get_path(entry.path)
        assert entry.stage in STAGES and entry.mechanism and entry.dtype in entry.dtypes
        assert set(entry.dtypes) <= set(spec.dtypes), entry.name
        assert (entry.stage == "compile") == (entry.check == "device_global_state")
        assert (entry.status == "contract_error") == (entry.stage == "compile")
        assert entry.block not in CONTROLS.values()


def test_every_expected_check_is_one_the_evaluator_reports():
    names, prefixes = evaluator_check_names()
    # The scan finds what it must, or the test below would pass on an empty set.
    assert {"scaled_residual", "replayed_result", "device_global_state", "cuda_error"} <= names
    assert {"sanitizer_", "timed_output_"} <= prefixes
    for entry in ENTRIES:
        check = entry.check
        built = any(
            check.startswith(prefix) and check[len(prefix) :] in names | set(SANITIZER_TOOLS)
            for prefix in prefixes
        )
        assert check in names or built, f"{entry.name}: no check of the evaluator is {check!r}"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_changes_only_the_block_and_passes_the_screen(entry):
    source = entry.source()
    seed = get_path(entry.path).seed_source()
    assert screen(source, seed) is None
    # Everything outside the block is the seed's: only the block's text differs.
    before, after = seed.split("// EVOLVE-BLOCK-START\n")[0], seed.split("// EVOLVE-BLOCK-END")[1]
    assert source.startswith(before) and source.endswith(after) and entry.block in source


@pytest.mark.parametrize(
    ("entry", "dtype"), COMPILES, ids=[f"{entry.name}-{dtype}" for entry, dtype in COMPILES]
)
def test_entry_compiles_and_the_cubin_check_refuses_exactly_the_device_state(
    entry, dtype, tmp_path
):
    failure = device_state_failure(_cubin(entry.source(), entry.path, dtype, tmp_path))
    if entry.check != "device_global_state":
        assert failure is None, failure
        return
    assert failure is not None and failure.check == "device_global_state"
    for part in entry.detail:
        assert part in failure.detail, failure.detail


@pytest.mark.parametrize(
    ("path", "dtype"), CONTROL_COMPILES, ids=[f"{p}-{d}" for p, d in CONTROL_COMPILES]
)
def test_each_paths_control_passes_the_screen_and_compiles_without_device_state(
    path, dtype, tmp_path
):
    source = with_block(CONTROLS[path], path)
    assert screen(source, get_path(path).seed_source()) is None
    assert device_state_failure(_cubin(source, path, dtype, tmp_path)) is None


def test_compile_only_pipeline_refuses_the_device_state_entries():
    """What CI sees of the compile-stage entries: the pipeline's own report, status and check
    as the GPU run gives them (stage ``compile``, nothing run)."""
    evaluators: dict[tuple[str, str], Evaluator] = {}
    try:
        for entry in ENTRIES:
            if entry.stage != "compile":
                continue
            evaluator = evaluators.setdefault(
                (entry.path, entry.dtype), Evaluator(entry.path, entry.dtype, gpu_index=None)
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


def _host_solve(driver, problem):
    """A host stand-in for the candidate (exact substitution in float64/complex128)."""
    from scipy.linalg import solve_triangular

    wide = np.complex128 if np.iscomplexobj(problem.a) else np.float64
    a = np.tril(np.nan_to_num(problem.a.astype(wide), nan=0.0, posinf=np.inf))
    with np.errstate(all="ignore"):
        x = solve_triangular(a, problem.b.astype(wide), lower=True, check_finite=False)
    return np.asfortranarray(x.astype(problem.b.dtype))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_the_whitelist_knows_every_shape_the_full_verification_solves(dtype, monkeypatch):
    """The entry stands for a kernel right on every shape scoring runs; when the pipeline adds
    inputs at a new shape (the scale sweep's 33x2 did), the whitelist must learn it, or the
    entry is refused before the champion stage for another reason. Records the shapes the real
    ``verify`` (full, with issue 6's inputs) and the quick check solve, on a host stand-in for
    the candidate (exact substitution in float64/complex128)."""
    solved: set[tuple[int, int]] = set()

    def run_candidate(driver, problem):
        solved.add(problem.shape)
        return None, _host_solve(driver, problem)

    monkeypatch.setattr(gpu_tasks, "run_candidate", run_candidate)
    failure, _ = gpu_tasks.verify(None, dtype, list(SPEC.verify_shapes), [11, 12, 13], True)
    assert failure is None, failure  # every input was reached
    assert gpu_tasks.verify(None, dtype, list(SPEC.quick_shapes), [14], False)[0] is None
    (entry,) = [e for e in ENTRIES if e.name == "shape_whitelist"]
    assert solved, "verify solved nothing"
    for m, n in sorted(solved):
        assert f"{{{m}, {n}}}" in entry.block, (m, n)


# ---- trsm_blocked: the faults that change X, through the evaluator's own verification -------

BLOCKED_MODELS = {
    "blocked_skips_last_block_row": ("skips_last_block_row",),
    "blocked_reuses_inverses": ("reuses_inverses",),
    "blocked_ragged_block_shifted": ("ragged_block_shifted",),
}


# The reference checks the model tests run under: the spec's, and every other one the evaluator
# has and the corpus knows (the path is moving to LAPACK's ratio: its entries must be refused
# under either, by the name ACCURACY_CHECKS gives).
REFERENCE_CHECKS = sorted(set(SOLUTION_CHECKS) & set(blocked.ACCURACY_CHECKS))


def _verify_as_the_pipeline(
    fault: str, dtype: str, monkeypatch, reference_check: str | None = None
):
    """The first failure (a dict, as the worker returns it; None when none) of trsm_blocked's
    quick check and then of its full verification, run by the GPU worker's own task code
    (``evaluator.gpu_tasks.run``: the spec's reference check, the spec's shapes and whatever
    inputs ``verify`` builds for them) on :class:`BlockedModel` as the driver, each task with a
    driver of its own as the worker loads one per task; and those drivers. The full task is run
    as a ``check`` task with the full verification's shapes, seeds and growth (a ``full`` task
    would go on to time on the GPU). ``reference_check``: the spec's, or the one named."""
    spec = get_path(blocked.PATH_ID)
    if reference_check is not None:
        spec = dataclasses.replace(spec, reference_check=reference_check)
        monkeypatch.setattr(gpu_tasks, "get_path", lambda path_id: spec)
    models: list[BlockedModel] = []

    def driver(self, cubin, dtype):
        models.append(BlockedModel(fault, blocked.NB))
        return models[-1]

    monkeypatch.setattr(type(spec), "driver", driver)
    monkeypatch.setattr(gpu_tasks, "run_candidate", lambda model, p: (None, model.solve(p)))
    task = {"kind": "check", "cubin": b"", "path_id": spec.path_id, "dtype": dtype}
    quick = {"shapes": list(spec.quick_shapes), "seeds": [101], "growth": False}
    seeds = list(range(201, 201 + VERIFY_SEED_COUNT))
    full = {"shapes": list(spec.verify_shapes), "seeds": seeds, "growth": True}
    failure = gpu_tasks.run({**task, **quick})["failure"]
    if failure is None:
        failure = gpu_tasks.run({**task, **full})["failure"]
    return failure, models


@pytest.mark.parametrize("reference_check", REFERENCE_CHECKS)
@pytest.mark.parametrize("name", sorted(BLOCKED_MODELS))
def test_the_evaluator_refuses_the_modelled_blocked_fault_where_the_entry_says(
    name, reference_check, monkeypatch
):
    entry = next(e for e in ENTRIES if e.name == name)
    failure, _ = _verify_as_the_pipeline(
        *BLOCKED_MODELS[name], entry.dtype, monkeypatch, reference_check
    )
    assert failure is not None, f"{name}: the model passes the verification"
    expected = entry.check.replace(
        blocked.accuracy_check(), blocked.ACCURACY_CHECKS[reference_check]
    )
    assert (failure["check"], tuple(failure["shape"])) == (expected, entry.shape), failure
    for part in entry.detail:
        assert part in failure["detail"], failure["detail"]


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_the_blocked_model_without_a_fault_passes_the_quick_check(dtype, monkeypatch):
    """The control of the model: the refusals above are the faults', not the model's (the quick
    check is where they are refused with the spec's shapes as they are)."""
    spec = get_path(blocked.PATH_ID)
    model = BlockedModel("none", blocked.NB)
    monkeypatch.setattr(type(spec), "driver", lambda self, cubin, dtype: model)
    monkeypatch.setattr(gpu_tasks, "run_candidate", lambda model, p: (None, model.solve(p)))
    task = {"kind": "check", "cubin": b"", "path_id": spec.path_id, "dtype": dtype}
    result = gpu_tasks.run({**task, "shapes": list(spec.quick_shapes), "seeds": [101],
                            "growth": False})  # fmt: skip
    assert result["failure"] is None, result["failure"]
    assert [tuple(s) for s in result["verified_shapes"]] == list(spec.quick_shapes)


def test_the_blocked_accuracy_check_is_known_for_the_paths_reference_check():
    """The expected check of the blocked entries refused for a wrong X follows the path's
    reference check; a reference check the corpus does not know would leave them expecting a
    name nothing reports."""
    assert get_path(blocked.PATH_ID).reference_check in blocked.ACCURACY_CHECKS


def test_the_ragged_fault_is_right_when_nb_divides_m():
    """The entry's claim, on the model: at m = 2·NB the slid block is the block itself."""
    m, n = 2 * blocked.NB, 5
    problem = make_problem(m, n, "float64", 7)
    shifted = BlockedModel("ragged_block_shifted", blocked.NB).solve(problem)
    exact = BlockedModel("none", blocked.NB).solve(problem)
    np.testing.assert_array_equal(shifted, exact)
    ragged = make_problem(m + 3, n, "float64", 7)
    assert not np.allclose(
        BlockedModel("ragged_block_shifted", blocked.NB).solve(ragged),
        BlockedModel("none", blocked.NB).solve(ragged),
    )


def test_the_blocked_memcheck_fault_reaches_past_a_at_the_sanitizer_shape_only_in_the_guard():
    """``blocked_reads_past_a`` reads up to NB − (m mod NB) elements past A's end when NB does
    not divide m: the sanitizer shape must be such an m (else memcheck sees nothing there, and
    the largest timed shape, memcheck's other one, may be a multiple of NB), and the overrun
    (at most NB − 1) must stay inside the guard bands verification and timing put after A (else
    it would read memory that may not be mapped there)."""
    spec = get_path(blocked.PATH_ID)
    (entry,) = [e for e in ENTRIES if e.name == "blocked_reads_past_a"]
    assert entry.shape == tuple(spec.sanitizer_shape) == memcheck_shapes(spec)[0]
    assert spec.sanitizer_shape[0] % blocked.NB != 0, spec.sanitizer_shape
    assert blocked.NB - 1 < GUARD_ELEMENTS


# ---- trsm_small_z64 ----------------------------------------------------------------------------


def test_racecheck_runs_for_z64_where_the_missing_barrier_is_crossed():
    """compute-sanitizer's racecheck is in the champion's plan for this path at its sanitizer
    shape, after memcheck, and that shape has a bottom half (m > 32: the loaders write the
    bottom block into the B region in phase 3 and the computing warps read it in phase 4), the
    two sides of the dropped barrier."""
    evaluator = Evaluator(z64.PATH_ID, "complex128", gpu_index=None)
    try:
        plan = sanitizer_plan(evaluator)
    finally:
        evaluator.close()
    (entry,) = [e for e in ENTRIES if e.name == "z64_missing_barrier"]
    assert ("racecheck", entry.shape) in plan
    assert plan.index(("racecheck", entry.shape)) > max(
        i for i, (tool, _) in enumerate(plan) if tool == "memcheck"
    )
    m, n = entry.shape
    assert 32 < m <= 64 and 1 <= n <= 64
    assert "tz_barrier(3)" not in entry.block and "tz_barrier(4)" in entry.block


def test_the_z64_upper_triangle_is_nan_in_the_first_quick_problem():
    (entry,) = [e for e in ENTRIES if e.name == "z64_reads_upper_triangle"]
    problem = make_problem(*entry.shape, "complex128", 1)
    assert np.isnan(problem.a[np.triu_indices(entry.shape[0], 1)]).all()


def test_entries_of_the_issue_7_paths_start_from_their_control():
    """Each is its control with its fault patched in: every line of the control but a few."""
    for entry in ENTRIES:
        if entry.path == "trsm_small":
            continue
        control = set(CONTROLS[entry.path].splitlines())
        kept = [line for line in entry.block.splitlines() if line in control]
        assert len(kept) >= len(control) - 5, entry.name
