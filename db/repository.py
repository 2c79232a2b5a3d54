"""Reads and writes of the lineage store: the only functions other layers call on the database.

Every function takes an open ``Session`` and never commits: the caller's ``session_scope`` does,
so what one call writes (a champion and its promotion row, say) lands together or not at all.
Timestamps come from the database clock (``func.now()``), never from the caller's host.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from db.errors import (
    BelowMinimumScoreError,
    ChampionMismatchError,
    InvalidTransitionError,
    InvalidValueError,
    NotBetterThanChampionError,
    NotFoundError,
    NotVerifiedError,
    ProgramConflictError,
    PromotionRefusedError,
    UnknownParentError,
)
from db.models import Champion, ChampionPromotion, Evaluation, Job, Program
from db.states import JOB_FAILURE_KINDS, EvaluationState, JobState, job_transition_allowed

__all__ = [
    "MIN_CHAMPION_SCORE",
    "BelowMinimumScoreError",
    "ChampionMismatchError",
    "InvalidTransitionError",
    "InvalidValueError",
    "NotBetterThanChampionError",
    "NotFoundError",
    "NotVerifiedError",
    "ProgramConflictError",
    "PromotionRefusedError",
    "UnknownParentError",
    "best_champion",
    "count_programs",
    "create_job",
    "get_job",
    "get_program",
    "lineage",
    "list_jobs",
    "promote_champion",
    "record_evaluation",
    "record_program",
    "set_job_state",
    "sha256_hex",
    "update_job_progress",
]

# Report keys copied into a champion's metrics; the compile log stays in the evaluation only.
_METRIC_KEYS = ("combined_score", "timings", "phase_seconds", "gpu", "verified_shapes")

# A champion must beat the vendor library: the loader serves it instead of cuBLAS inside its
# envelope, so a kernel whose combined score (geometric-mean speedup over cuBLAS) is at or below
# 1 would only slow its callers down.
MIN_CHAMPION_SCORE = 1.0


def sha256_hex(data: bytes | str) -> str:
    """Lower-case hex SHA-256 of ``data`` (text is encoded as UTF-8)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def _job_state(value: str) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        known = ", ".join(v.value for v in JobState)
        raise InvalidValueError(f"unknown job state {value!r}; expected one of {known}") from None


# --- jobs -------------------------------------------------------------------------------------


def create_job(
    s: Session,
    *,
    path: str,
    dtype: str,
    gpu: str,
    shape_bucket: str,
    config: Mapping[str, Any],
    backend: str,
    model: str | None,
) -> Job:
    """Insert a job in state ``waiting`` and return it (id and ``created_at`` loaded).

    ``gpu`` is the GPU key (``seeds.hardware.normalize_gpu_name``), e.g. ``"nvidia-h200"``;
    ``config`` is the job's validated configuration as a JSON-able mapping; ``backend`` names the
    mutator (an LLM backend or the offline mutator) and ``model`` the LLM model, if any.
    """
    job = Job(
        path=path,
        dtype=dtype,
        gpu_key=gpu,
        shape_bucket=shape_bucket,
        config=_json_safe(dict(config)),
        backend=backend,
        model=model,
        state=JobState.WAITING.value,
        iteration=0,
    )
    s.add(job)
    s.flush()
    s.refresh(job)
    return job


def get_job(s: Session, job_id: int) -> Job:
    """The job with id ``job_id``.

    Raises:
        NotFoundError: no such job.
    """
    job = s.get(Job, job_id)
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    return job


def list_jobs(s: Session, *, state: str | None = None, limit: int | None = None) -> list[Job]:
    """Jobs, newest first; only those in ``state`` when given, at most ``limit`` when given.

    Raises:
        InvalidValueError: ``state`` is not a job state.
    """
    query = select(Job).order_by(Job.id.desc())
    if state is not None:
        query = query.where(Job.state == _job_state(state).value)
    if limit is not None:
        query = query.limit(limit)
    return list(s.scalars(query))


def count_programs(s: Session, job_ids: Iterable[int]) -> dict[int, int]:
    """Number of recorded programs per job id (0 for a job with none)."""
    ids = list(job_ids)
    counts = dict.fromkeys(ids, 0)
    if ids:
        rows = s.execute(
            select(Program.job_id, func.count(Program.id))
            .where(Program.job_id.in_(ids))
            .group_by(Program.job_id)
        )
        counts.update({job_id: n for job_id, n in rows})
    return counts


def _locked_job(s: Session, job_id: int) -> Job:
    """The job row, locked for update on PostgreSQL (SQLite writers hold the database lock)."""
    job = s.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    return job


def _move(job: Job, state: str) -> None:
    new = _job_state(state)
    current = JobState(job.state)
    if not job_transition_allowed(current, new):
        raise InvalidTransitionError(f"job {job.id} is {current.value}; cannot become {new.value}")
    job.state = new.value
    if new is not JobState.FAILED:  # a reason describes the failure it came with, no later state
        job.failure_reason = None
    if new in (JobState.RUNNING, JobState.WAITING) and job.last_failure_kind in JOB_FAILURE_KINDS:
        job.last_failure_kind = None  # the job's own failure is behind it once it runs again


# A stored failure reason longer than this is cut: it is one line for a table and an API answer.
FAILURE_REASON_MAX = 2000


def failure_text(reason: str) -> str:
    """``reason`` as the one line stored in ``job.failure_reason``: whitespace runs made one
    space, at most :data:`FAILURE_REASON_MAX` characters (a cut one ends with ``…``)."""
    line = " ".join(reason.split())
    return line if len(line) <= FAILURE_REASON_MAX else f"{line[: FAILURE_REASON_MAX - 1]}…"


def update_job_progress(
    s: Session,
    job_id: int,
    *,
    state: str | None = None,
    iteration: int | None = None,
    best_score: float | None = None,
    best_speedup: float | None = None,
    last_failure_kind: str | None = None,
    failure_reason: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Job:
    """Record a running job's progress and take its heartbeat from the database clock.

    Arguments left ``None`` keep their stored value; a move to a state other than ``failed``
    clears ``failure_reason``, which ``failure_reason`` sets (one line, :func:`failure_text`)
    when the job is or becomes ``failed``. A cancelled or complete job keeps its state:
    progress can still be written to it, but a state change is refused, so a worker that writes
    ``state="running"`` after the API cancelled the job gets ``InvalidTransitionError`` and should
    stop. ``best_score`` is the combined score (geometric-mean speedup over cuBLAS, 0 on failure),
    ``best_speedup`` the speedup at the largest timed shape. ``config`` replaces the stored job
    configuration (a resume's ``--iterations``, ``--gpu``, ``--in-flight``: the run's own, so a
    later resume, ``kernevo jobs`` and the API read what ran).

    Raises:
        NotFoundError: no such job.
        InvalidValueError: ``state`` is not a job state, or a best figure is not finite.
        InvalidTransitionError: the state change is not allowed (``db.states.JOB_TRANSITIONS``).
    """
    _finite("best_score", best_score)
    _finite("best_speedup", best_speedup)
    job = _locked_job(s, job_id)
    if state is not None:
        _move(job, state)
    if iteration is not None:
        job.iteration = iteration
    if best_score is not None:
        job.best_score = best_score
    if best_speedup is not None:
        job.best_speedup = best_speedup
    if last_failure_kind is not None:
        job.last_failure_kind = last_failure_kind
    if failure_reason is not None and job.state == JobState.FAILED.value:
        job.failure_reason = failure_text(failure_reason)
    if config is not None:
        job.config = dict(config)
    job.heartbeat_at = func.now()
    s.flush()
    s.refresh(job)
    return job


def set_job_state(s: Session, job_id: int, state: str) -> Job:
    """Change a job's state without touching its heartbeat (the API's cancel uses this).

    Raises:
        NotFoundError: no such job.
        InvalidValueError: ``state`` is not a job state.
        InvalidTransitionError: the state change is not allowed (``db.states.JOB_TRANSITIONS``).
    """
    job = _locked_job(s, job_id)
    _move(job, state)
    s.flush()
    s.refresh(job)
    return job


# --- programs and evaluations -----------------------------------------------------------------


def get_program(s: Session, program_id: int) -> Program:
    """The program with id ``program_id``.

    Raises:
        NotFoundError: no such program.
    """
    program = s.get(Program, program_id)
    if program is None:
        raise NotFoundError(f"program {program_id} not found")
    return program


def _program_by_uid(s: Session, uid: str) -> Program | None:
    return s.scalar(select(Program).where(Program.uid == uid))


def _same_program(existing: Program, source_sha256: str) -> Program:
    if existing.source_sha256 != source_sha256:
        raise ProgramConflictError(
            f"program uid {existing.uid!r} already recorded with source sha256 "
            f"{existing.source_sha256[:12]}…, not {source_sha256[:12]}…"
        )
    return existing


def record_program(
    s: Session,
    *,
    job_id: int,
    uid: str,
    source: str,
    parent_uid: str | None,
    island: int,
    generation: int,
    iteration: int,
    diff: str | None,
    backend: str | None,
    model: str | None,
    rerun: bool = False,
) -> tuple[Program, bool]:
    """Record a program once; idempotent on ``uid`` (the OpenEvolve program id).

    Returns ``(program, created)``: ``created`` is False when ``uid`` was already recorded (a
    resumed job replaying its checkpoint, or a concurrent writer that got there first), in which
    case the stored row is returned unchanged. The seed has ``parent_uid=None``. ``rerun`` marks
    a program of an iteration that ran again after a kill and a resume from an earlier
    checkpoint.

    Raises:
        NotFoundError: no job ``job_id``.
        UnknownParentError: ``parent_uid`` is not a recorded program (record parents first).
        ProgramConflictError: ``uid`` is recorded with a different source.
    """
    digest = sha256_hex(source)
    existing = _program_by_uid(s, uid)
    if existing is not None:
        return _same_program(existing, digest), False
    get_job(s, job_id)
    parent_id: int | None = None
    if parent_uid is not None:
        parent = _program_by_uid(s, parent_uid)
        if parent is None:
            raise UnknownParentError(
                f"program {uid!r}: parent uid {parent_uid!r} is not recorded; "
                "record the parent first"
            )
        parent_id = parent.id
    program = Program(
        uid=uid,
        job_id=job_id,
        source=source,
        source_sha256=digest,
        parent_id=parent_id,
        island=island,
        generation=generation,
        iteration=iteration,
        diff=diff,
        backend=backend,
        model=model,
        rerun=rerun,
    )
    try:
        with s.begin_nested():
            s.add(program)
    except IntegrityError:
        # A concurrent writer committed the same uid between our read and our insert.
        existing = _program_by_uid(s, uid)
        if existing is None:
            raise
        return _same_program(existing, digest), False
    s.refresh(program)
    return program, True


def record_evaluation(
    s: Session,
    *,
    program_id: int,
    report_json: Mapping[str, Any] | str,
    gpu_key: str,
    gpu_name: str,
    arch: str,
    driver_version: str | None,
    nvrtc_version: str | None,
    score: float,
    state: str,
    error_kind: str | None,
) -> Evaluation:
    """Record one finished evaluation of a program (rows are never changed afterwards).

    ``report_json`` is ``EvaluationReport.to_json()`` (a JSON string) or the decoded mapping;
    ``score`` is the combined score (0 when a check failed); ``state`` is ``scored``, ``failed``
    or ``verified``; ``error_kind`` (the report's status, e.g. ``compile_error``) is required when
    the state is ``failed``. NaN and ±inf inside the report are stored as the strings "NaN",
    "Infinity" and "-Infinity" (JSON has no such numbers); NUL characters are removed from its
    strings (PostgreSQL's jsonb refuses them).

    Raises:
        NotFoundError: no program ``program_id``.
        InvalidValueError: unknown ``state``, a failed evaluation without ``error_kind``, a score
            that is not finite, or a report that is not a JSON object.
    """
    try:
        ev_state = EvaluationState(state)
    except ValueError:
        known = ", ".join(v.value for v in EvaluationState)
        raise InvalidValueError(
            f"unknown evaluation state {state!r}; expected one of {known}"
        ) from None
    if ev_state is EvaluationState.FAILED and not error_kind:
        raise InvalidValueError("a failed evaluation needs an error_kind")
    _finite("score", score)
    report = _decode_report(report_json)
    get_program(s, program_id)
    evaluation = Evaluation(
        program_id=program_id,
        gpu_key=gpu_key,
        gpu_name=gpu_name,
        arch=arch,
        driver_version=driver_version,
        nvrtc_version=nvrtc_version,
        score=float(score),
        state=ev_state.value,
        error_kind=error_kind,
        report=report,
    )
    s.add(evaluation)
    s.flush()
    s.refresh(evaluation)
    return evaluation


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and ±inf floats replaced by the strings "NaN", "Infinity", "-Infinity":
    JSON has no such numbers, PostgreSQL's jsonb refuses them and API responses could not carry
    them, yet a wrong kernel's residual is often NaN. NUL characters are removed from every
    string (keys too): PostgreSQL's jsonb refuses ``\u0000``, and compiler logs can hold one."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, Mapping):
        return {str(k).replace("\x00", ""): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _finite(name: str, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise InvalidValueError(f"{name} must be a finite number, got {value!r}")
    return value


def _decode_report(report_json: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(report_json, str):
        try:
            decoded = json.loads(report_json)
        except json.JSONDecodeError as exc:
            raise InvalidValueError(f"report is not valid JSON: {exc}") from None
    else:
        decoded = dict(report_json)
    if not isinstance(decoded, dict):
        raise InvalidValueError(f"report must be a JSON object, got {type(decoded).__name__}")
    return _json_safe(decoded)


def lineage(s: Session, program_id: int) -> list[Program]:
    """The program, then its parent, grandparent, … back to the seed (one recursive query).

    Raises:
        NotFoundError: no program ``program_id``.
    """
    ancestry = (
        select(Program.id, Program.parent_id, literal(0).label("depth"))
        .where(Program.id == program_id)
        .cte("ancestry", recursive=True)
    )
    parent = aliased(Program)
    ancestry = ancestry.union_all(
        select(parent.id, parent.parent_id, (ancestry.c.depth + 1).label("depth")).where(
            parent.id == ancestry.c.parent_id
        )
    )
    programs = list(
        s.scalars(
            select(Program).join(ancestry, Program.id == ancestry.c.id).order_by(ancestry.c.depth)
        )
    )
    if not programs:
        raise NotFoundError(f"program {program_id} not found")
    return programs


# --- champions --------------------------------------------------------------------------------


def _check_launch(launch: Mapping[str, Any]) -> dict[str, Any]:
    missing = [k for k in ("kernel", "config_kernel") if not isinstance(launch.get(k), str)]
    if missing:
        raise InvalidValueError(
            f"launch needs string keys kernel and config_kernel; missing {missing}"
        )
    return dict(launch)


def _check_envelope(
    envelope: Mapping[str, Any], report: Mapping[str, Any], path: str
) -> dict[str, Any]:
    """The envelope to store: an integer ``<param>_max`` for every shape parameter of the
    path's op (``seeds.registry``: trsm's ``m_max`` and ``n_max``; for a path the registry does
    not hold, at least one), every bound an integer (a ``<param>_min`` may be null: absent),
    ``verified_shapes`` from the report when missing."""
    from seeds.ops import BOUND_KEY
    from seeds.registry import PATHS

    spec = PATHS.get(path)
    required = [f"{p}_max" for p in spec.params] if spec is not None else []
    bounds = {k: v for k, v in envelope.items() if isinstance(k, str) and BOUND_KEY.match(k)}
    bad = [k for k in required if k not in bounds]
    bad += [
        k
        for k, v in bounds.items()
        if not (isinstance(v, int) and not isinstance(v, bool))
        and not (v is None and k.endswith("_min"))
    ]
    if bad or not any(k.endswith("_max") for k in bounds):
        wanted = " and ".join(required) or "a <param>_max per shape parameter"
        raise InvalidValueError(f"envelope needs integer {wanted}; bad or missing {bad}")
    shapes: Sequence[Any] = envelope.get("verified_shapes", report.get("verified_shapes", []))
    return {**envelope, "verified_shapes": [list(shape) for shape in shapes]}


def _metrics(evaluation: Evaluation) -> dict[str, Any]:
    report = evaluation.report
    metrics: dict[str, Any] = {"score": evaluation.score}
    metrics.update({k: report[k] for k in _METRIC_KEYS if k in report})
    compile_info = report.get("compile")
    if isinstance(compile_info, dict):
        metrics["compile"] = {k: v for k, v in compile_info.items() if k != "log"}
    return metrics


def _check_promotion(
    evaluation: Evaluation,
    *,
    path: str,
    dtype: str,
    gpu_key: str,
    shape_bucket: str,
    cubin_sha256: str,
) -> None:
    if evaluation.state != EvaluationState.VERIFIED.value:
        raise NotVerifiedError(
            f"evaluation {evaluation.id} is {evaluation.state}, not verified; "
            "only verified evaluations can be promoted",
            score=evaluation.score,
        )
    if evaluation.gpu_key != gpu_key:
        raise ChampionMismatchError(
            f"evaluation {evaluation.id} ran on {evaluation.gpu_key}, not {gpu_key}"
        )
    job = evaluation.program.job
    if (job.path, job.dtype, job.shape_bucket) != (path, dtype, shape_bucket):
        raise ChampionMismatchError(
            f"program {evaluation.program_id} belongs to "
            f"{job.path}/{job.dtype}/{job.shape_bucket}, not {path}/{dtype}/{shape_bucket}"
        )
    compile_info = evaluation.report.get("compile")
    reported = compile_info.get("cubin_sha256") if isinstance(compile_info, dict) else None
    if reported and reported != cubin_sha256:
        raise ChampionMismatchError(
            f"cubin sha256 {cubin_sha256[:12]}… differs from the verified one {reported[:12]}…"
        )
    if not evaluation.score > MIN_CHAMPION_SCORE:
        raise BelowMinimumScoreError(
            f"evaluation {evaluation.id} scores {evaluation.score:.3f}, not above "
            f"{MIN_CHAMPION_SCORE:.1f} (a champion must be faster than the vendor library)",
            score=evaluation.score,
        )


def promote_champion(
    s: Session,
    *,
    evaluation_id: int,
    path: str,
    dtype: str,
    gpu_key: str,
    shape_bucket: str,
    cubin: bytes,
    launch: Mapping[str, Any],
    envelope: Mapping[str, Any],
    compile_options: Sequence[str],
    signature: str | None = None,
    signing_key_id: str | None = None,
    certificate: Mapping[str, Any] | None = None,
) -> Champion:
    """Make the evaluated program the champion of (path, dtype, gpu_key, shape_bucket), if it is
    better: champions only improve.

    Refused unless the evaluation is ``verified``, scores above ``MIN_CHAMPION_SCORE`` and above
    the current champion's evaluation. The comparison is made under the champion row's lock
    (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the writer's ``BEGIN IMMEDIATE`` already
    holds the database), so two promotions of one key racing end with the better one whatever
    their order; when the key has no champion yet, the loser of the race to insert it gets the
    unique-constraint violation, re-reads the winner's row under the lock and compares.

    Upserts the ``champion`` row and appends a ``champion_promotion`` row in the caller's
    transaction; a refusal writes nothing. The cubin's sha256 is computed here; arch and NVRTC
    version come from the evaluation; ``metrics`` are the evaluation's score plus the report's
    ``combined_score``, ``timings``, ``phase_seconds``, ``gpu``, ``verified_shapes`` and compile
    figures (no log).
    ``launch`` must hold ``kernel`` and ``config_kernel`` names; ``envelope`` must hold an
    integer ``<param>_max`` per shape parameter of the path's op (trsm: ``m_max`` and ``n_max``)
    and gets ``verified_shapes`` from the report when it has none.
    ``signature`` (base64 Ed25519 over ``kernevo.signature.signed_payload``) and
    ``signing_key_id`` (sha256 hex of the signer's raw public key) are stored as given (the
    signer checks them against the stored row); ``None`` stores an unsigned champion, which
    loaders refuse. ``certificate`` (``kernevo.certificate.Certificate`` as JSON, which the
    signature covers) is stored as given.

    Raises:
        NotFoundError: no evaluation ``evaluation_id``.
        PromotionRefusedError: its ``check`` names the rule not met; one of
            NotVerifiedError (``verified``): the evaluation's state is not ``verified``;
            BelowMinimumScoreError (``min_score``): its score is not above 1.0;
            NotBetterThanChampionError (``beats_champion``): its score is not above the current
            champion's (``champion_score``).
        ChampionMismatchError: the evaluation ran on another GPU, its program's job is another
            path or dtype, or the report's ``compile.cubin_sha256`` differs from ``cubin``'s.
        InvalidValueError: ``launch`` or ``envelope`` is malformed.
    """
    evaluation = s.get(Evaluation, evaluation_id)
    if evaluation is None:
        raise NotFoundError(f"evaluation {evaluation_id} not found")
    digest = sha256_hex(cubin)
    _check_promotion(
        evaluation,
        path=path,
        dtype=dtype,
        gpu_key=gpu_key,
        shape_bucket=shape_bucket,
        cubin_sha256=digest,
    )
    fields: dict[str, Any] = {
        "program_id": evaluation.program_id,
        "evaluation_id": evaluation.id,
        "cubin": bytes(cubin),
        "cubin_sha256": digest,
        "arch": evaluation.arch,
        "nvrtc_version": evaluation.nvrtc_version,
        "compile_options": list(compile_options),
        "launch": _check_launch(launch),
        "envelope": _check_envelope(envelope, evaluation.report, path),
        "metrics": _metrics(evaluation),
        "signature": signature,
        "signing_key_id": signing_key_id,
        "certificate": None if certificate is None else dict(certificate),
    }
    key = {"path": path, "dtype": dtype, "gpu_key": gpu_key, "shape_bucket": shape_bucket}
    champion = _upsert_champion(s, key, fields, score=evaluation.score)
    s.add(
        ChampionPromotion(
            **key,
            program_id=evaluation.program_id,
            evaluation_id=evaluation.id,
            cubin_sha256=digest,
            score=evaluation.score,
            signing_key_id=signing_key_id,
        )
    )
    s.flush()
    s.refresh(champion)
    return champion


def _champion_for_update(s: Session, key: Mapping[str, str]) -> Champion | None:
    """The key's champion row, locked, with its columns as committed now: populate_existing
    overwrites a copy the session loaded before the lock was granted (e.g. by best_champion)."""
    query = (
        select(Champion)
        .filter_by(**key)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return s.scalar(query)


def _refuse_unless_better(s: Session, champion: Champion, score: float) -> None:
    current = s.scalar(select(Evaluation.score).where(Evaluation.id == champion.evaluation_id))
    if current is not None and not score > current:
        raise NotBetterThanChampionError(
            f"score {score:.3f} is not above the champion's {current:.3f} "
            f"(program {champion.program_id}, evaluation {champion.evaluation_id})",
            score=score,
            champion_score=current,
        )


def _upsert_champion(
    s: Session, key: Mapping[str, str], fields: Mapping[str, Any], *, score: float
) -> Champion:
    champion = _champion_for_update(s, key)
    if champion is None:
        champion = Champion(**key, **fields)
        try:
            with s.begin_nested():
                s.add(champion)
            return champion
        except IntegrityError:
            # A concurrent promotion inserted this key first (PostgreSQL made our insert wait
            # for its commit): compare with its row, under the lock, instead.
            champion = _champion_for_update(s, key)
            if champion is None:
                raise
    _refuse_unless_better(s, champion, score)
    for name, value in fields.items():
        setattr(champion, name, value)
    champion.promoted_at = func.now()
    return champion


def best_champion(
    s: Session, *, path: str, dtype: str, gpu_key: str, shape_bucket: str
) -> Champion | None:
    """The champion of (path, dtype, gpu_key, shape_bucket), or ``None`` when there is none."""
    return s.scalar(
        select(Champion).filter_by(
            path=path, dtype=dtype, gpu_key=gpu_key, shape_bucket=shape_bucket
        )
    )
