"""A job that failed on its own error after running all its iterations is not resumed.

A fresh-user trial: a job whose 3 iterations all failed at the LLM ended ``failed`` at 3/3;
``kernevo evolve --resume --path trsm_small --dtype float64`` picked it as the newest unfinished
job and ran its 3 iterations again, every LLM call repeated, to the same failure, each resume
recording another copy of the seed. The automatic pick now passes over such a job, a resume by
id refuses it unless ``--iterations`` extends it, and the picked job is named before anything
is checked (the endpoint's refusal had not said which job it was about). A job interrupted at
its last iteration still resumes: it only finishes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from job_store import job_row, offline_settings, set_job_state, small_job

from evolver.errors import ResumeError
from evolver.runner import resume_job, start_job

PICK = {"path": "trsm_small", "dtype": "float32"}


def _resume(url: str, root: Path, job_id: int | None, lines: list[str], **given: object):
    return resume_job(
        job_id, overrides=given, settings=offline_settings(root), database_url=url,
        write=lines.append,
    )  # fmt: skip


def test_a_job_that_ran_all_its_iterations_is_not_resumed(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    url = fresh_database_url
    assert start_job(small_job(), settings=offline_settings(root), database_url=url,
                     write=print).state == "complete"  # fmt: skip
    # At iteration 2 of 2, ended by its own error, as a job whose every iteration failed.
    set_job_state(url, "failed", last_failure_kind="error")
    lines: list[str] = []
    with pytest.raises(ResumeError) as picked:
        _resume(url, root, None, lines, **PICK)
    assert str(picked.value) == (
        "no unfinished trsm_small float32 job to resume (job 1 failed after running all its "
        "iterations)"
    )
    with pytest.raises(ResumeError) as by_id:
        _resume(url, root, 1, lines)
    assert str(by_id.value) == (
        "job 1 failed after running all its 2 iterations; a resume would run them again (start "
        "a new job, or --iterations N, more than 2, extends it)"
    )
    assert lines == []  # nothing ran
    extended = _resume(url, root, 1, lines, iterations=3)
    assert (extended.state, extended.iteration) == ("complete", 3)


def test_the_automatic_pick_passes_over_it_to_a_job_with_iterations_left_and_names_it(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    url = fresh_database_url
    for _ in range(2):
        start_job(small_job(), settings=offline_settings(root), database_url=url, write=print)
    set_job_state(url, "failed", job_id=1, iteration=1)  # stopped after its first checkpoint
    set_job_state(url, "failed", job_id=2, last_failure_kind="error")  # the newer one ran all
    lines: list[str] = []
    outcome = _resume(url, root, None, lines, **PICK)
    assert lines[0] == (
        "resuming job 1, the newest unfinished trsm_small float32 job (failed, at iteration 1/2)"
    )
    assert (outcome.job_id, outcome.state, outcome.iteration) == (1, "complete", 2)


def test_a_job_interrupted_after_its_last_iteration_only_finishes(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    url = fresh_database_url
    first = start_job(small_job(), settings=offline_settings(root), database_url=url, write=print)
    set_job_state(url, "failed", last_failure_kind="interrupted")
    lines: list[str] = []
    again = _resume(url, root, None, lines, **PICK)
    assert lines[0].startswith("resuming job 1, the newest unfinished trsm_small float32 job")
    assert "0 iterations from checkpoint at iteration 2" in lines[1]
    assert (again.state, again.iteration) == ("complete", 2)
    assert again.programs_recorded == first.programs_recorded


def test_a_job_whose_every_llm_answer_failed_is_refused_as_it_was_left(tmp_path: Path) -> None:
    """The real path, not a row set by hand (a second trial: the finished run left its last
    iteration's ``llm_error`` as the job's failure kind, so the rule never matched): an endpoint
    answering ``choices: []`` fails both iterations, the job ends ``failed`` with kind
    ``error``, and neither resume runs it again."""
    from http_stub import StubServer
    from openai_stub import MODEL, endpoint, no_choices

    from evolver.job_config import LLMSection

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    root = tmp_path / "runs"
    with StubServer(endpoint(no_choices), methods=("GET", "POST")) as server:
        job = small_job(llm=LLMSection(base_url=f"{server.url}/v1", model=MODEL, retries=0))
        outcome = start_job(job, settings=offline_settings(root), database_url=url, write=print)
        assert (outcome.state, outcome.iteration) == ("failed", 2)
        row = job_row(url)
        assert (row.state, row.last_failure_kind) == ("failed", "error")
        lines: list[str] = []
        with pytest.raises(ResumeError, match="failed after running all its 2 iterations"):
            _resume(url, root, 1, lines)
        with pytest.raises(ResumeError, match="job 1 failed after running all its iterations"):
            _resume(url, root, None, lines, **PICK)
        assert lines == []


def test_iterations_cannot_shrink_a_job_below_the_iteration_it_recorded(
    fresh_database_url: str, tmp_path: Path
) -> None:
    """A second trial: an interrupted re-run from an earlier checkpoint left the row at a lower
    iteration than the job had recorded, and ``--iterations`` below that was then taken."""
    from evolver.runner import ResumeOptionError

    root = tmp_path / "runs"
    url = fresh_database_url
    start_job(small_job(), settings=offline_settings(root), database_url=url, write=print)
    set_job_state(url, "failed", iteration=0, last_failure_kind="interrupted")  # rewound
    with pytest.raises(ResumeOptionError) as caught:
        _resume(url, root, 1, [], iterations=1)
    assert str(caught.value) == (
        "job 1 is at iteration 2: --iterations 1 must exceed it (it extends the job)"
    )
