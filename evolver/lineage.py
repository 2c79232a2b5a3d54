"""The lineage recorder: every program OpenEvolve makes goes into the lineage store, failures too.

OpenEvolve has no per-program callback. Two public hooks together see everything, and both run in
the controller's own process, one result at a time:

* The ``PopulationStrategy.admit`` hook of the program database sees every *evaluated* program
  the moment ``ProgramDatabase.add`` receives it, before MAP-Elites binning or a novelty check
  could drop it: the seed, every child (compile errors and wrong answers included: they come back
  with score 0 and their feature dimensions) and every migrant copy. It never rejects.
* The evolution tracer sees each child again right after it was stored (``log_trace``, with the
  iteration number, which ``admit`` is not told) and every iteration that produced *no* program
  (``log_failure``: LLM errors, responses without a diff, SEARCH blocks that match nothing, edits
  outside the EVOLVE-BLOCK, worker crashes), which never reach ``admit``. The recorder taps the
  controller's tracer and passes every call on to it unchanged, so the trace files stay complete.

Seeds and migrant copies are recorded in ``admit``; a child is held there and recorded by
``log_trace`` with its iteration (or by the ``log_failure`` that follows when storing it raised).
A parent is always recorded before its children: a program can only be sampled as a parent after
``add`` returned, by which time it is in the store. Programs in a checkpoint were recorded before
the checkpoint was written (tracing precedes checkpointing in OpenEvolve's loop), so a resumed
job's parents are all present. ``record_program`` is idempotent on the OpenEvolve program id.
Iterations after that checkpoint which the killed run had already recorded run again with new
program ids: their programs are new rows marked ``rerun``, next to the first run's.

Evaluations come from the evaluator's full report, ``$KERNEVO_REPORT_DIR/<sha256 of source>.json``:
status ``ok`` is a ``scored`` evaluation, ``compiled`` (a compile-only evaluation that compiled)
a ``scored`` one with score 0 and no error kind, any other status a ``failed`` one whose
``error_kind`` is the status.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from openevolve.population import PopulationSnapshot, PopulationStrategy, ProgramState
from sqlalchemy import Engine, select

SEED_BACKEND = "seed"
# Report status of a compile-only evaluation that compiled (no GPU: nothing ran, score 0).
COMPILED_STATUS = "compiled"
MIGRATION_BACKEND = "migration"
# Stored in place of a diff for iterations that produced no program: what the LLM answered.
_MAX_RESPONSE_CHARS = 64_000

RecordKind = Literal["seed", "child", "migrant", "failure", "lost"]


@dataclass(frozen=True)
class RecordContext:
    """Where and under which identity one job's programs are recorded.

    ``gpu_key``/``gpu_name``/``arch`` fill evaluation rows whose report names no GPU (compile-only
    evaluations, iterations that produced no program). ``rerun_through``: on a resume, the
    newest iteration the job recorded before; programs of iterations up to it ran again (the
    job was killed after its last checkpoint) and are recorded with ``rerun=True``.
    """

    engine: Engine
    job_id: int
    path_id: str
    dtype: str
    report_dir: Path
    backend: str
    model: str
    gpu_key: str
    gpu_name: str
    arch: str
    rerun_through: int | None = None

    def is_rerun(self, iteration: int) -> bool:
        """Whether ``iteration`` ran before this run (a resumed job repeating it)."""
        return self.rerun_through is not None and iteration <= self.rerun_through


@dataclass(frozen=True)
class Recorded:
    """One recorded outcome, as the progress reporter hears it.

    ``kind`` "lost" is an iteration that failed before its parent was known (a crashed worker,
    OpenEvolve's own timeout): nothing could be recorded for it. ``score`` is the combined score
    (0 on failure); ``speedup`` the speedup at the largest timed shape; ``status`` the
    evaluation report's status (``ok``, ``compiled``, ``compile_error``, …) when there was one;
    ``rerun`` that the iteration ran before the resume.
    """

    kind: RecordKind
    iteration: int
    uid: str | None = None
    source: str | None = None
    score: float = 0.0
    speedup: float = 0.0
    error_kind: str | None = None
    check: str | None = None
    new: bool = True
    status: str | None = None
    rerun: bool = False


def source_sha256(source: str) -> str:
    """The evaluator's report key: SHA-256 of the source as UTF-8."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def classify_iteration_error(error: str) -> str:
    """``error_kind`` of an iteration that produced no program, from OpenEvolve's message."""
    return "llm_error" if error.startswith("LLM ") else "diff_error"


def unified_diff(parent: str | None, child: str, parent_uid: str | None, uid: str) -> str | None:
    """The change from parent to child as a unified diff (``None`` for a seed)."""
    if parent is None:
        return None
    lines = difflib.unified_diff(
        parent.splitlines(keepends=True),
        child.splitlines(keepends=True),
        fromfile=f"{parent_uid}.cu",
        tofile=f"{uid}.cu",
    )
    return "".join(lines)


@dataclass(frozen=True)
class _Row:
    """One program row as ``record_program`` takes it."""

    kind: RecordKind
    uid: str
    source: str
    parent_uid: str | None
    island: int
    generation: int
    iteration: int
    backend: str
    model: str | None
    diff: str | None = None


def _failure(check: str, detail: str) -> dict[str, Any]:
    """A report's ``failure`` entry (``evaluator.report.CheckFailure`` as JSON)."""
    return {"check": check, "shape": None, "value": None, "bound": None, "detail": detail}


@dataclass(frozen=True)
class _Evaluation:
    """An evaluation row as ``record_evaluation`` takes it, plus the speedup for progress."""

    report: dict[str, Any]
    score: float
    speedup: float
    state: str
    error_kind: str | None

    @property
    def status(self) -> str:
        """The report's status (``ok``, ``compiled``, ``compile_error``, …)."""
        return str(self.report.get("status", "infra_error"))

    @property
    def check(self) -> str | None:
        """Name of the first failing check (``None`` when the evaluation passed)."""
        failure = self.report.get("failure")
        return str(failure.get("check")) if isinstance(failure, dict) else None


def _metric(metrics: dict[str, Any] | None, name: str) -> float:
    value = (metrics or {}).get(name, 0.0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


class LineageRecorder:
    """Feeds the lineage store from OpenEvolve's admit hook and evolution tracer.

    ``listener`` hears each :class:`Recorded` outcome (progress, heartbeat, champion checks).
    A database error inside a tracer call cannot propagate through OpenEvolve's loop (it would be
    logged as one more failed iteration), so it is kept in :attr:`fatal` and ``stop`` is called;
    the runner re-raises it once the loop has returned.
    """

    def __init__(
        self,
        ctx: RecordContext,
        listener: Callable[[Recorded], None],
        stop: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self._listener = listener
        self._stop = stop
        self.fatal: BaseException | None = None
        self._known: dict[str, tuple[str, int]] = {}  # uid → (source, generation)
        self._pending: dict[str, tuple[ProgramState, int]] = {}  # admitted, not yet traced
        self._openevolve_db: Any = None

    # -- installation ------------------------------------------------------------------------

    def population_strategy(self) -> PopulationStrategy:
        """The strategy to hand to ``OpenEvolve(population_strategy=...)``: admit only."""
        return PopulationStrategy(admit=self._admit)

    def bind(self, openevolve: Any) -> None:
        """Tap ``openevolve``'s evolution tracer (built when ``evolution_trace.enabled``).

        Raises:
            RuntimeError: tracing is off, so failed iterations would go unrecorded.
        """
        tracer = getattr(openevolve, "evolution_tracer", None)
        if tracer is None:
            raise RuntimeError("OpenEvolve's evolution trace is off; the lineage recorder needs it")
        openevolve.evolution_tracer = _TracerTap(tracer, self)
        self._openevolve_db = openevolve.database

    # -- OpenEvolve hooks --------------------------------------------------------------------

    def _admit(self, snapshot: PopulationSnapshot, candidate: ProgramState, island: int) -> bool:
        self._flush_pending(snapshot.last_iteration)
        if candidate.parent_id is None or candidate.metadata.get("migrant"):
            seed = candidate.parent_id is None
            row = _Row(
                kind="seed" if seed else "migrant",
                uid=candidate.id,
                source=candidate.code,
                parent_uid=candidate.parent_id,
                island=island,
                generation=candidate.generation,
                iteration=snapshot.last_iteration,
                backend=SEED_BACKEND if seed else MIGRATION_BACKEND,
                model=None,
            )
            # A migrant copy was not evaluated again: its origin's evaluation stands.
            self._record(row, dict(candidate.metrics) if seed else None, None)
        else:
            self._pending[candidate.id] = (candidate, island)
        return True

    def on_trace(self, iteration: int, child: Any, artifacts: dict[str, Any] | None) -> None:
        """``log_trace``: a child was stored at ``iteration``; record it with its diff."""
        self._pending.pop(child.id, None)
        self._flush_pending(iteration)
        row = _Row(
            kind="child",
            uid=child.id,
            source=child.code,
            parent_uid=child.parent_id,
            island=int(child.metadata.get("island", 0)),
            generation=child.generation,
            iteration=iteration,
            backend=self.ctx.backend,
            model=child.metadata.get("llm_model") or self.ctx.model,
        )
        self._record(row, child.metrics, artifacts)

    def on_failure(
        self,
        iteration: int,
        error: str,
        parent_id: str | None,
        island_id: int | None,
        llm_response: str | None,
    ) -> None:
        """``log_failure``: iteration ``iteration`` produced no stored program."""
        if self._pending:
            # A child was admitted but storing it raised: record it, it was evaluated.
            self._flush_pending(iteration)
            return
        if parent_id is None:
            self._listener(Recorded("lost", iteration, error_kind="infra_error"))
            return
        kind = classify_iteration_error(error)
        _, parent_generation = self._lookup(parent_id)
        report = {
            "path_id": self.ctx.path_id,
            "dtype": self.ctx.dtype,
            "status": kind,
            "stage": "mutation",
            "combined_score": 0.0,
            "failure": _failure(kind, error),
        }
        row = _Row(
            kind="failure",
            uid=f"failed-{uuid.uuid4()}",
            source="",
            parent_uid=parent_id,
            island=island_id or 0,
            generation=parent_generation + 1,
            iteration=iteration,
            backend=self.ctx.backend,
            model=self.ctx.model,
            diff=(llm_response or "")[:_MAX_RESPONSE_CHARS] or None,
        )
        self._write(row, _Evaluation(report, 0.0, 0.0, "failed", kind))

    # -- recording ---------------------------------------------------------------------------

    def _flush_pending(self, iteration: int) -> None:
        """Record children admitted earlier that never reached the tracer."""
        while self._pending:
            _, (candidate, island) = self._pending.popitem()
            row = _Row(
                kind="child",
                uid=candidate.id,
                source=candidate.code,
                parent_uid=candidate.parent_id,
                island=island,
                generation=candidate.generation,
                iteration=iteration,
                backend=self.ctx.backend,
                model=candidate.metadata.get("llm_model") or self.ctx.model,
            )
            self._record(row, dict(candidate.metrics), None)

    def _record(
        self, row: _Row, metrics: dict[str, Any] | None, artifacts: dict[str, Any] | None
    ) -> None:
        """Record an evaluated program (``metrics`` ``None``: not evaluated, a migrant copy)."""
        if row.parent_uid is not None:
            parent_source, _ = self._lookup(row.parent_uid)
            row = replace(
                row, diff=unified_diff(parent_source, row.source, row.parent_uid, row.uid)
            )
        evaluation = None if metrics is None else self._evaluation(row.source, metrics, artifacts)
        self._write(row, evaluation)

    def _write(self, row: _Row, evaluation: _Evaluation | None) -> None:
        from db import repository
        from db.session import session_scope

        ctx = self.ctx
        with session_scope(ctx.engine) as s:
            program, created = repository.record_program(
                s,
                job_id=ctx.job_id,
                uid=row.uid,
                source=row.source,
                parent_uid=row.parent_uid,
                island=row.island,
                generation=row.generation,
                iteration=row.iteration,
                diff=row.diff,
                backend=row.backend,
                model=row.model,
                rerun=ctx.is_rerun(row.iteration),
            )
            if created and evaluation is not None:
                report = evaluation.report
                gpu = report.get("gpu") or {}
                compiled = report.get("compile") or {}
                repository.record_evaluation(
                    s,
                    program_id=program.id,
                    report_json=report,
                    gpu_key=gpu.get("key") or ctx.gpu_key,
                    gpu_name=gpu.get("name") or ctx.gpu_name,
                    arch=gpu.get("arch") or compiled.get("arch") or ctx.arch,
                    driver_version=_text(gpu.get("driver_version")),
                    nvrtc_version=_text(compiled.get("nvrtc_version")),
                    score=evaluation.score,
                    state=evaluation.state,
                    error_kind=evaluation.error_kind,
                )
        if row.kind != "failure":
            self._known[row.uid] = (row.source, row.generation)
        self._listener(
            Recorded(
                row.kind,
                row.iteration,
                uid=row.uid,
                source=row.source if row.kind != "failure" else None,
                score=evaluation.score if evaluation else 0.0,
                speedup=evaluation.speedup if evaluation else 0.0,
                error_kind=evaluation.error_kind if evaluation else None,
                check=evaluation.check if evaluation else None,
                new=created,
                status=evaluation.status if evaluation else None,
                rerun=created and ctx.is_rerun(row.iteration),
            )
        )

    def _evaluation(
        self, source: str, metrics: dict[str, Any], artifacts: dict[str, Any] | None
    ) -> _Evaluation:
        """The evaluation of ``source`` from the evaluator's report file; without one (the
        evaluator raised, or OpenEvolve's own timeout fired) a report is made from the metrics."""
        report = None
        # The evaluator may read the file in text mode, which folds \r\n into \n.
        for text in dict.fromkeys((source, source.replace("\r\n", "\n").replace("\r", "\n"))):
            path = self.ctx.report_dir / f"{source_sha256(text)}.json"
            try:
                report = json.loads(path.read_text())
                break
            except (OSError, ValueError):
                continue
        if not isinstance(report, dict):
            status = "timeout" if metrics.get("timeout") else "infra_error"
            detail = ""
            for key in ("stderr", "error_type", "failure_stage"):
                if artifacts and artifacts.get(key):
                    detail = str(artifacts[key]).splitlines()[0]
                    break
            report = {
                "path_id": self.ctx.path_id,
                "dtype": self.ctx.dtype,
                "status": status,
                "stage": "evaluation",
                "combined_score": 0.0,
                "failure": _failure("evaluator", detail or "no evaluation report was written"),
            }
        status = str(report.get("status", "infra_error"))
        ok = status == "ok"
        # A compile-only evaluation that compiled is no failure (nothing ran, so score 0).
        passed = ok or status == COMPILED_STATUS
        score = float(report.get("combined_score") or 0.0) if ok else 0.0
        return _Evaluation(
            report=report,
            score=score,
            speedup=_metric(metrics, "speedup_64") if ok else 0.0,
            state="scored" if passed else "failed",
            error_kind=None if passed else status,
        )

    def _lookup(self, uid: str) -> tuple[str | None, int]:
        """Source and generation of a recorded program: this process's cache, then OpenEvolve's
        database, then the lineage store (a parent recorded before a resume)."""
        if uid in self._known:
            return self._known[uid]
        programs = getattr(self._openevolve_db, "programs", {}) or {}
        if uid in programs:
            program = programs[uid]
            return program.code, int(program.generation)
        from db.models import Program
        from db.session import session_scope

        with session_scope(self.ctx.engine) as s:
            row = s.execute(
                select(Program.source, Program.generation).where(Program.uid == uid)
            ).first()
        if row is None:
            return None, 0
        return row.source, int(row.generation)


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


class _TracerTap:
    """Stands in for OpenEvolve's ``EvolutionTracer``: tells the recorder, then forwards."""

    def __init__(self, inner: Any, recorder: LineageRecorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _guard(self, call: Callable[[], None]) -> None:
        if self._recorder.fatal is not None:
            return
        try:
            call()
        except Exception as error:  # a lineage-store failure: stop the job, re-raised later
            self._recorder.fatal = error
            self._recorder._stop()

    def log_trace(
        self,
        iteration: int,
        parent_program: Any,
        child_program: Any,
        prompt: dict[str, str] | None = None,
        llm_response: str | None = None,
        artifacts: dict[str, Any] | None = None,
        island_id: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._guard(lambda: self._recorder.on_trace(iteration, child_program, artifacts))
        self._inner.log_trace(
            iteration=iteration,
            parent_program=parent_program,
            child_program=child_program,
            prompt=prompt,
            llm_response=llm_response,
            artifacts=artifacts,
            island_id=island_id,
            metadata=metadata,
        )

    def log_failure(
        self,
        iteration: int,
        error: str,
        parent_id: str | None = None,
        evolution_mode: str | None = None,
        prompt: dict[str, str] | None = None,
        llm_response: str | None = None,
        token_usage: dict[str, Any] | None = None,
        island_id: int | None = None,
    ) -> None:
        self._guard(
            lambda: self._recorder.on_failure(iteration, error, parent_id, island_id, llm_response)
        )
        self._inner.log_failure(
            iteration=iteration,
            error=error,
            parent_id=parent_id,
            evolution_mode=evolution_mode,
            prompt=prompt,
            llm_response=llm_response,
            token_usage=token_usage,
            island_id=island_id,
        )
