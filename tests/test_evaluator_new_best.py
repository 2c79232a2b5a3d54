"""Memcheck before a candidate becomes the job's best (evaluator/new_best.py, issue 6).

On CPU: the job-wide record under concurrent processes, the gate's decisions with a fake
memcheck, the real memcheck plumbing with a fake compute-sanitizer executable, and
``openevolve_entry.evaluate`` with a fake evaluator. On the GPU (``gpu``): a kernel that writes
past B and puts back the byte it read passes the pipeline and is stopped by the gate.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import evaluator.new_best as new_best
import evaluator.openevolve_entry as entry
import evaluator.tools as tools
from evaluator.new_best import (
    NO_SANITIZER_NOTE,
    RECORD_NAME,
    JobBest,
    MemcheckOutcome,
    gate_new_best,
    memcheck,
    memcheck_shapes,
)
from evaluator.report import CheckFailure, EvaluationReport
from seeds.registry import get_path

SPEC = get_path("trsm_small")
FINDING = CheckFailure(
    "sanitizer_memcheck", (33, 31), detail="========= Invalid __global__ write of size 1 bytes"
)


def passed(score: float) -> EvaluationReport:
    """A report that passed the pipeline with ``score``."""
    return EvaluationReport(
        "trsm_small", "float64", status="ok", stage="time", combined_score=score
    )


class FakeMemcheck:
    """Stands in for :func:`evaluator.new_best.memcheck`; counts its runs."""

    def __init__(self, outcome: MemcheckOutcome, during: Any = None) -> None:
        self.outcome = outcome
        self.during = during
        self.runs = 0

    def __call__(self) -> MemcheckOutcome:
        self.runs += 1
        if self.during is not None:
            self.during()
        return self.outcome


CLEAN = MemcheckOutcome(
    None, ran=True, shapes=((33, 31), (64, 64)), clean_at="m=33 n=31, m=64 n=64"
)


# --- the job-wide record ----------------------------------------------------------------------


def _record_all(folder: str, scores: list[float], start: Any, out: Any) -> None:
    start.wait()
    best = JobBest(Path(folder), "4242")
    out.put([score for score in scores if best.record(score)])


def _run_concurrently(folder: Path, per_process: list[list[float]]) -> list[list[float]]:
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(len(per_process)), ctx.Queue()
    procs = [
        ctx.Process(target=_record_all, args=(str(folder), scores, start, out))
        for scores in per_process
    ]
    for proc in procs:
        proc.start()
    accepted = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return accepted


def test_concurrent_processes_never_lose_the_best(tmp_path: Path) -> None:
    # Four processes record interleaved rising scores at once: an unlocked read-compare-write
    # lets a lower score overwrite a higher one recorded in between.
    per_process = [[round(0.01 * (4 * i + p), 2) for i in range(60)] for p in range(4)]

    accepted = _run_concurrently(tmp_path, per_process)

    top = max(max(scores) for scores in per_process)
    assert JobBest(tmp_path, "4242").score() == top
    assert sum(top in scores for scores in accepted) == 1
    for scores in accepted:  # each process saw only strictly rising bests
        assert scores == sorted(set(scores))
    assert json.loads((tmp_path / RECORD_NAME).read_text()) == {
        "format": "kernevo.job-best.v1",
        "job_pid": "4242",
        "combined_score": top,
    }


def test_the_same_score_from_every_process_becomes_the_best_once(tmp_path: Path) -> None:
    # Without the lock, one round shows the race about 4 times in 5 here: three rounds.
    for round_ in range(3):
        accepted = _run_concurrently(tmp_path / str(round_), [[1.5]] * 6)

        assert sorted(len(scores) for scores in accepted) == [0, 0, 0, 0, 0, 1]


def test_a_record_of_another_run_or_unreadable_counts_as_none(tmp_path: Path) -> None:
    JobBest(tmp_path, "111").record(2.0)
    assert JobBest(tmp_path, "111").score() == 2.0
    assert JobBest(tmp_path, "222").score() == 0.0  # the job was resumed: a new run
    (tmp_path / RECORD_NAME).write_text("{torn")
    assert JobBest(tmp_path, "111").score() == 0.0
    assert JobBest(tmp_path, "111").record(0.5) is True


def test_without_a_report_folder_the_record_is_per_process() -> None:
    best = JobBest(None)
    assert best.record(1.0) is True and best.record(1.0) is False and best.score() == 1.0
    assert JobBest(None).score() == 0.0


def test_the_record_follows_the_job_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_REPORT_DIR", str(tmp_path))
    monkeypatch.setenv("KERNEVO_JOB_PID", "77")
    JobBest.from_environment().record(1.25)
    assert JobBest(tmp_path, "77").score() == 1.25
    monkeypatch.delenv("KERNEVO_REPORT_DIR")
    assert JobBest.from_environment().score() == 0.0


# --- the gate ---------------------------------------------------------------------------------


def test_a_memcheck_finding_fails_the_report_and_keeps_the_best(tmp_path: Path) -> None:
    best = JobBest(tmp_path, "1")
    best.record(1.2)
    report = passed(1.8)
    run = FakeMemcheck(MemcheckOutcome(FINDING, ran=True))

    assert gate_new_best(report, best, run) is False

    assert run.runs == 1
    assert (report.status, report.failure, report.combined_score) == ("wrong", FINDING, 0.0)
    assert report.metrics()["combined_score"] == 0.0  # OpenEvolve never keeps it as its best
    assert report.phase_seconds["memcheck"] >= 0.0
    assert best.score() == 1.2


def test_a_clean_memcheck_makes_the_new_best(tmp_path: Path) -> None:
    best = JobBest(tmp_path, "1")
    report = passed(1.8)

    assert gate_new_best(report, best, FakeMemcheck(CLEAN)) is True

    assert report.passed and report.combined_score == 1.8
    assert best.score() == 1.8
    assert "memcheck before becoming the job's best: clean at m=33 n=31, m=64 n=64" in report.notes
    assert "memcheck" in report.phase_seconds


@pytest.mark.parametrize(
    "report",
    [passed(1.5), passed(1.0), EvaluationReport("trsm_small", "float64").fail("wrong", FINDING)],
    ids=["equal score", "lower score", "failed"],
)
def test_no_memcheck_unless_the_report_beats_the_best(
    tmp_path: Path, report: EvaluationReport
) -> None:
    best = JobBest(tmp_path, "1")
    best.record(1.5)
    run = FakeMemcheck(MemcheckOutcome(FINDING, ran=True))
    status = report.status

    assert gate_new_best(report, best, run) is False

    assert run.runs == 0 and report.status == status and "memcheck" not in report.phase_seconds
    assert best.score() == 1.5


def test_without_compute_sanitizer_the_score_stands_and_says_so(tmp_path: Path) -> None:
    best = JobBest(tmp_path, "1")
    report = passed(1.3)

    assert gate_new_best(report, best, FakeMemcheck(MemcheckOutcome(None, ran=False))) is True

    assert report.passed and NO_SANITIZER_NOTE in report.notes
    assert "memcheck" not in report.phase_seconds  # the phase records memcheck that ran
    assert best.score() == 1.3


def test_a_better_best_recorded_during_memcheck_wins(tmp_path: Path) -> None:
    best = JobBest(tmp_path, "1")
    report = passed(1.8)
    other_process = JobBest(tmp_path, "1")

    became = gate_new_best(report, best, FakeMemcheck(CLEAN, lambda: other_process.record(2.5)))

    assert became is False and report.passed  # clean, still scored; just not the best
    assert best.score() == 2.5


# --- memcheck itself, with a fake compute-sanitizer -------------------------------------------


def fake_sanitizer(folder: Path, finding_at_m: int | None) -> Path:
    """An executable standing in for compute-sanitizer: logs its arguments, and at
    ``--m finding_at_m`` prints a memcheck error and exits with --error-exitcode."""
    script = folder / "compute-sanitizer"
    log = folder / "calls.log"
    finding = (
        f'case " $* " in *" --m {finding_at_m} "*) '
        'echo "========= Invalid __global__ write of size 1 bytes"; exit "$4";; esac\n'
        if finding_at_m is not None
        else ""
    )
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n{finding}echo "========= ERROR SUMMARY: 0"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def calls(folder: Path) -> list[str]:
    """The runs it was asked for, less the ``--help`` query that looks for its kernel filter."""
    return [line for line in (folder / "calls.log").read_text().splitlines() if line != "--help"]


def test_memcheck_runs_the_ragged_and_the_largest_timed_shape(tmp_path: Path) -> None:
    assert memcheck_shapes(SPEC) == [(33, 31), max(SPEC.timed_shapes, key=lambda s: s[0] * s[1])]

    outcome = memcheck(b"cubin", SPEC, "float64", 0, str(fake_sanitizer(tmp_path, None)))

    assert outcome == MemcheckOutcome(
        None, ran=True, shapes=((33, 31), (64, 64)), clean_at="m=33 n=31, m=64 n=64"
    )
    ran = calls(tmp_path)
    assert len(ran) == 2
    for line, (m, n) in zip(ran, [(33, 31), (64, 64)], strict=True):
        assert line.startswith("--tool memcheck --error-exitcode 97 ")
        assert "-m evaluator.run_once --cubin " in line
        assert f"--path trsm_small --dtype float64 --m {m} --n {n} --repeat 1" in line


def test_a_finding_names_its_shape_and_stops_memcheck(tmp_path: Path) -> None:
    outcome = memcheck(b"cubin", SPEC, "float64", 0, str(fake_sanitizer(tmp_path, 33)))

    assert outcome.ran and outcome.shapes == ()
    assert outcome.failure == CheckFailure(
        "sanitizer_memcheck", (33, 31), detail="========= Invalid __global__ write of size 1 bytes"
    )
    assert len(calls(tmp_path)) == 1


def test_no_compute_sanitizer_means_memcheck_did_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(new_best, "find_tool", lambda name: None)

    assert memcheck(b"cubin", SPEC, "float64", 0) == MemcheckOutcome(None, ran=False)


# --- evaluate(), as OpenEvolve calls it -------------------------------------------------------


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """``openevolve_entry`` in a job: report folder under tmp_path, a fake evaluator whose every
    candidate passes with score 2.0, a fake memcheck and profiler that record their calls."""
    reports = tmp_path / "reports"
    monkeypatch.setenv("KERNEVO_REPORT_DIR", str(reports))
    monkeypatch.setenv("KERNEVO_JOB_PID", str(os.getpid()))
    ns = SimpleNamespace(reports=reports, outcome=CLEAN, memchecked=[], profiled=[])
    fake = SimpleNamespace(
        spec=SPEC,
        dtype="float64",
        gpu_index=0,
        stage1=lambda source: (passed(2.0), b"cubin of " + source.encode()),
        stage2=lambda report, cubin, rival=None, rival_name="champion": report,
    )
    monkeypatch.setattr(entry, "_EVALUATOR", fake)
    monkeypatch.setattr(entry, "_JOB_BEST", None)

    def fake_memcheck(cubin: bytes, spec: Any, dtype: str, gpu_index: int) -> MemcheckOutcome:
        ns.memchecked.append(cubin)
        return ns.outcome

    monkeypatch.setattr(entry, "memcheck", fake_memcheck)
    monkeypatch.setattr(
        entry, "attach_profile", lambda ev, cubin, report: ns.profiled.append(cubin)
    )
    ns.program = tmp_path / "program.cu"
    return ns


def test_evaluate_refuses_a_new_best_that_memcheck_flags(job: SimpleNamespace) -> None:
    job.outcome = MemcheckOutcome(FINDING, ran=True)
    job.program.write_text("kernel A")

    result = entry.evaluate(str(job.program))

    assert result.metrics["combined_score"] == 0.0 and result.metrics["passed"] == 0.0
    assert job.memchecked == [b"cubin of kernel A"] and job.profiled == []
    [written] = [p for p in job.reports.glob("*.json") if p.name != RECORD_NAME]
    report = EvaluationReport.from_json(written.read_text())
    assert (report.status, report.failure.check if report.failure else None) == (
        "wrong",
        "sanitizer_memcheck",
    )
    assert JobBest(job.reports, str(os.getpid())).score() == 0.0


def test_evaluate_memchecks_then_profiles_only_a_new_best(job: SimpleNamespace) -> None:
    job.program.write_text("kernel A")
    first = entry.evaluate(str(job.program))
    job.program.write_text("kernel B")  # scores 2.0 too: not above the best
    second = entry.evaluate(str(job.program))

    assert first.metrics["combined_score"] == second.metrics["combined_score"] == 2.0
    assert job.memchecked == [b"cubin of kernel A"] and job.profiled == [b"cubin of kernel A"]


def test_an_exception_in_the_new_best_gate_is_an_infra_error_not_a_dead_job(
    job: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the H200 the first solve_tri job died at its first new best: the gate raised, and
    OpenEvolve, given no metrics, failed the whole job. The candidate is now an infra_error
    report with every metric OpenEvolve's feature map reads, and the job goes on."""

    def boom(*args: Any) -> None:
        raise ValueError("too many values to unpack (expected 2)")

    monkeypatch.setattr(entry, "memcheck", boom)
    job.program.write_text("kernel A")
    result = entry.evaluate(str(job.program))
    assert result.metrics["combined_score"] == 0.0 and "registers" in result.metrics
    [written] = [p for p in job.reports.glob("*.json") if p.name != RECORD_NAME]
    report = EvaluationReport.from_json(written.read_text())
    assert (report.status, report.failure.check) == ("infra_error", entry.NEW_BEST_ERROR)
    assert "too many values to unpack" in report.failure.detail


def test_a_profile_that_raises_leaves_the_new_best_passed_with_a_note(
    job: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any) -> None:
        raise RuntimeError("ncu went away")

    monkeypatch.setattr(entry, "attach_profile", boom)
    job.program.write_text("kernel A")
    assert entry.evaluate(str(job.program)).metrics["combined_score"] == 2.0
    [written] = [p for p in job.reports.glob("*.json") if p.name != RECORD_NAME]
    report = EvaluationReport.from_json(written.read_text())
    assert report.passed and any("ncu went away" in note for note in report.notes)


# --- on the GPU -------------------------------------------------------------------------------

SEED = SPEC.seed_source()
STORE = "if (row < m && col < n) B[(long)col * ldb + row] = b[c][s];"
# One byte past the end of B read and written back unchanged: every guard band keeps its bytes
# (no out_of_bounds_write), the value read is never used (no non_finite_output); volatile keeps
# NVVM from dropping the load and store as a no-op.
RESTORING_WRITE = SEED.replace(
    STORE,
    STORE + " if (row == 0 && col == n - 1) { volatile unsigned char* past = "
    "(volatile unsigned char*)(B + (long)n * ldb); past[0] = past[0]; }",
    1,
)


@pytest.mark.gpu
def test_a_write_past_b_that_restores_the_bytes_is_stopped_before_it_becomes_the_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaluator.pipeline import Evaluator
    from evaluator.tools import find_tool

    if find_tool("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not installed: the gate cannot run memcheck here")
    assert STORE in SEED
    ev = Evaluator("trsm_small", "float64", gpu_index=0)
    try:
        best = JobBest(tmp_path, "1")
        seed_report, seed_cubin = ev.evaluate_with_cubin(SEED)
        assert seed_report.passed, seed_report.failure
        assert gate_new_best(seed_report, best, lambda: memcheck(seed_cubin, SPEC, "float64", 0))
        assert best.score() == seed_report.combined_score

        report, cubin = ev.evaluate_with_cubin(RESTORING_WRITE)
        # What makes the gate necessary: no check of the pipeline sees this write.
        assert report.passed, report.failure
        report.combined_score = seed_report.combined_score * 1.01  # as if it beat the seed
        gated = gate_new_best(report, best, lambda: memcheck(cubin, SPEC, "float64", 0))
    finally:
        ev.close()

    assert gated is False
    assert report.status == "wrong" and report.failure is not None
    assert (report.failure.check, report.failure.shape) == ("sanitizer_memcheck", (33, 31))
    assert best.score() == seed_report.combined_score
    with capsys.disabled():
        print(
            f"\nRESULTS memcheck before best: seed clean in "
            f"{seed_report.phase_seconds['memcheck']:.1f} s (2 shapes); restoring write past B "
            f"caught in {report.phase_seconds['memcheck']:.1f} s: {report.failure.detail[:120]}"
        )


# --- the versions a certificate records -------------------------------------------------------


def executable(folder: Path, name: str, body: str) -> str:
    script = folder / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_sanitizer_version_is_its_version_line(tmp_path: Path) -> None:
    banner = (
        'echo "NVIDIA (R) Compute Sanitizer"; echo "Copyright (c) 2020-2025 NVIDIA Corporation"; '
        'echo "Version 2025.3.1.0 (build 36398880) (public-release)"\n'
    )
    assert tools.sanitizer_version(executable(tmp_path, "a", banner)) == "2025.3.1.0"
    assert tools.sanitizer_version(executable(tmp_path, "b", "echo nothing useful\n")) is None
    assert tools.sanitizer_version(str(tmp_path / "missing")) is None


def test_the_driver_version_falls_back_to_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tools, "proc_driver_version", lambda: "580.95.05")
    assert tools.nvidia_driver_version() == "580.95.05"  # /proc first: no process started

    monkeypatch.setattr(tools, "proc_driver_version", lambda: "")
    smi = executable(tmp_path, "nvidia-smi", 'echo "575.57.08"; echo "575.57.08"\n')
    monkeypatch.setattr(tools, "find_tool", lambda name: smi if name == "nvidia-smi" else None)
    assert tools.nvidia_driver_version() == "575.57.08"

    failing = executable(tmp_path, "smi-fails", 'echo "NVIDIA-SMI has failed"; exit 9\n')
    monkeypatch.setattr(tools, "find_tool", lambda name: failing)
    assert tools.nvidia_driver_version() is None
    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    assert tools.nvidia_driver_version() is None


@pytest.mark.parametrize(
    ("path_id", "shapes", "text"),
    [
        ("trsm_small", ((33, 31),), "m=33 n=31"),
        ("solve_tri", ((64, 6, 4, 2), (7, 3, 1, 1)), "n=64 k=6 b2=4 b3=2, n=7 k=3 b2=1 b3=1"),
        ("band_bidiag", ((1024, 32),), "n=1024 bandwidth=32"),
    ],
)
def test_the_memcheck_note_names_each_ops_own_shape_terms(path_id, shapes, text, monkeypatch):
    """On the H200 the first solve_tri job failed at its first new best: the note unpacked every
    shape as trsm's (m, n) and a 4-parameter shape raised ValueError."""
    spec = get_path(path_id)
    monkeypatch.setattr(new_best, "memcheck_shapes", lambda _spec: list(shapes))
    monkeypatch.setattr(new_best, "run_sanitizer", lambda *args: None)
    outcome = new_best.memcheck(b"", spec, spec.dtypes[0], 0, sanitizer="compute-sanitizer")
    assert outcome == MemcheckOutcome(None, ran=True, shapes=shapes, clean_at=text)
    report = passed(3.0)
    assert gate_new_best(report, JobBest(None), lambda: outcome)
    assert f"memcheck before becoming the job's best: clean at {text}" in report.notes
