"""Response and request bodies of the REST API, kept apart from the ORM models.

Times are ISO 8601 in UTC; scores are combined scores (geometric-mean speedup over the vendor
library, 0 when a check failed); shapes are ``[m, n]``.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from db.heartbeat import liveness
from db.listing import ProgramRow
from db.models import Champion, Evaluation, Job, Program
from evolver.job_config import JobConfig, LLMSection, shown_config
from seeds.registry import Rule


class Health(BaseModel):
    """Liveness, the database's schema revision, and how healthy the database is: ``status``
    is ``degraded`` when it is ``read_only`` (reads work, writes answer 503); ``integrity`` is
    ``ok`` when SQLite's bounded page check passed, ``unchecked`` when it ran out of time (a
    large file) or on PostgreSQL."""

    status: Literal["ok", "degraded"]
    database: Literal["ok"]
    schema_revision: str | None
    schema_head: str | None
    integrity: Literal["ok", "unchecked"]
    read_only: bool


class EvaluationOut(BaseModel):
    """One evaluation of a program on one GPU, with the evaluator's full report (its compile log
    included: every route serving it needs a ``read`` token)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    program_id: int
    gpu_key: str
    gpu_name: str
    arch: str
    driver_version: str | None
    nvrtc_version: str | None
    score: float
    state: Literal["scored", "failed", "verified"]
    error_kind: str | None
    report: dict[str, Any]
    created_at: datetime


class ProgramSummary(BaseModel):
    """A program without its source: what a lineage listing shows per step."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    uid: str
    job_id: int
    parent_id: int | None
    island: int
    generation: int
    iteration: int
    source_sha256: str
    diff: str | None
    backend: str | None
    model: str | None
    created_at: datetime


class ProgramDetail(ProgramSummary):
    """A program with its source and every evaluation of it, oldest first."""

    source: str
    evaluations: list[EvaluationOut]

    @classmethod
    def from_program(cls, program: Program, evaluations: list[Evaluation]) -> ProgramDetail:
        """Build from the ORM row and its evaluations."""
        summary = ProgramSummary.model_validate(program)
        return cls(
            **summary.model_dump(),
            source=program.source,
            evaluations=[EvaluationOut.model_validate(e) for e in evaluations],
        )


class ProgramListItem(ProgramSummary):
    """A program in ``GET /v1/programs``: its summary, whether it is a re-run after a resume,
    and its latest evaluation (``db.listing``): ``state`` (``unevaluated`` when it has none),
    ``score`` (combined score, 0 on failure), ``evaluation_id``, ``gpu_key``, ``error_kind``."""

    rerun: bool
    state: Literal["scored", "failed", "verified", "unevaluated"]
    score: float | None
    evaluation_id: int | None
    gpu_key: str | None
    error_kind: str | None

    @classmethod
    def from_row(cls, row: ProgramRow) -> ProgramListItem:
        """Build from a ``db.listing.ProgramRow``."""
        return cls(
            **ProgramSummary.model_validate(row.program).model_dump(),
            rerun=row.program.rerun,
            state=row.state,
            score=row.score,
            evaluation_id=row.evaluation_id,
            gpu_key=row.gpu_key,
            error_kind=row.error_kind,
        )


class JobOut(BaseModel):
    """A job and its progress: state, iteration, best scores, heartbeat, programs recorded.

    ``heartbeat_age_s``: seconds since the last heartbeat, on the database clock (``None``: never
    beat). ``stale``: the job is ``running`` but its heartbeat is older than
    ``db.heartbeat.stale_after_s`` (90 s, or three of the job's own heartbeat intervals when
    that is longer): its process is gone, and ``kernevo evolve --resume`` continues it.
    ``best_speedup``: over the vendor library at the bucket's largest timed shape, ``None``
    while no program was timed (a compile-only job, or nothing passed yet: the job row holds
    0.0 then, which a client read as a measured slowdown), as the CLI's ``speedup n/a``.
    """

    id: int
    path: str
    dtype: str
    gpu: str
    shape_bucket: str
    backend: str
    model: str | None
    config: dict[str, Any]
    state: Literal["waiting", "running", "complete", "failed", "cancelled"]
    iteration: int
    best_score: float | None
    best_speedup: float | None
    last_failure_kind: str | None
    # Why a failed job failed, one line (None while it is not failed): the runner's or its
    # worker's error, which otherwise only the worker's stderr shows.
    failure_reason: str | None = None
    programs: int
    heartbeat_at: datetime | None
    heartbeat_age_s: float | None
    stale: bool
    created_at: datetime
    # The job queue (db.queue): when the job entered it (None: run by ``kernevo evolve``), the
    # worker holding it, and how many times a worker claimed it.
    queued_at: datetime | None = None
    claimed_by: str | None = None
    attempts: int = 0

    @classmethod
    def from_job(cls, job: Job, programs: int, now: datetime) -> JobOut:
        """Build from the ORM row, its number of recorded programs and the database time
        ``now`` (``db.heartbeat.database_now``)."""
        live = liveness(job, now)
        return cls(
            id=job.id,
            path=job.path,
            dtype=job.dtype,
            gpu=job.gpu_key,
            shape_bucket=job.shape_bucket,
            backend=job.backend,
            model=job.model,
            config=shown_config(job.config),  # an endpoint's password stays in the database
            state=job.state,  # type: ignore[arg-type]
            iteration=job.iteration,
            best_score=job.best_score,
            best_speedup=job.best_speedup if job.best_speedup else None,  # 0.0: none timed
            last_failure_kind=job.last_failure_kind,
            failure_reason=job.failure_reason,
            programs=programs,
            heartbeat_at=job.heartbeat_at,
            heartbeat_age_s=live.heartbeat_age_s,
            stale=live.stale,
            created_at=job.created_at,
            queued_at=job.queued_at,
            claimed_by=job.claimed_by,
            attempts=job.attempts,
        )


class JobCreate(JobConfig):
    """``POST /v1/jobs`` body: the settings ``kernevo evolve`` takes (``evolver.job_config``:
    every key, its range and its checks, unknown keys refused), except that ``gpu`` names the
    GPU model the job must run on (``"NVIDIA H200"`` or ``"nvidia-h200"``; omitted: any GPU a
    worker has) instead of a device index, which is the worker's business. A ``compile_only``
    job runs on no GPU and takes no ``gpu``."""

    gpu: str | None = Field(  # type: ignore[assignment]
        default=None,
        min_length=1,
        max_length=256,
        description="GPU name or key the job must run on; omitted: any GPU",
    )

    @field_validator("gpu")
    @classmethod
    def _printable_gpu(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("must be printable text (no control characters)")
        return value

    @field_validator("llm")
    @classmethod
    def _printable_model(cls, value: LLMSection) -> LLMSection:
        # The model name is stored in a text column: PostgreSQL refuses a NUL in one (500).
        if value.model is not None and not value.model.isprintable():
            raise ValueError("llm.model must be printable text (no control characters)")
        return value


class JobPatch(BaseModel):
    """``PATCH /v1/jobs/{id}`` body: the only change a client may make is to cancel."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["cancelled"]


class Launch(BaseModel):
    """Kernel names the path's driver launches: the solve kernel and the geometry kernel."""

    model_config = ConfigDict(extra="allow")

    kernel: str
    config_kernel: str


class Envelope(BaseModel):
    """Shapes the champion was verified for: the loader dispatches only inside them. Besides
    ``verified_shapes`` (each a list of the op's shape parameters in order), one integer
    ``<param>_max`` per shape parameter of the path's op and, where the path has one, a
    ``<param>_min`` (1 when absent): trsm's ``m_max``, ``n_max`` (and ``m_min``); solve_tri's
    ``n_max``, ``k_max``, ``b2_max``, ``b3_max``; band_bidiag's ``n_max``, ``bandwidth_max``."""

    model_config = ConfigDict(extra="allow")

    verified_shapes: list[list[int]]


class CandidateOut(BaseModel):
    """One path that serves the problem, as the best-kernel query compared it
    (``seeds.registry.fastest``): ``status`` is ``chosen`` (its champion is the answer),
    ``compared`` (it has a champion, measured slower than the chosen one),
    ``slower_than_vendor`` (its champion's own evaluation timed it slower than the vendor
    library at this very shape, beyond its noise floor: it never answers there) or
    ``no_champion`` (none yet for this dtype, GPU and shape bucket: the other fields null).
    ``combined_score`` is the champion's geometric-mean speedup over the vendor library at its
    own timed shapes; ``time_us`` its median time per call (µs) at the requested shape, null
    unless its evaluation timed that shape."""

    path: str
    shape_bucket: str
    status: Literal["chosen", "compared", "slower_than_vendor", "no_champion"]
    program_id: int | None
    combined_score: float | None
    time_us: float | None


class ChampionOut(BaseModel):
    """A verified champion kernel: cubin (base64) and everything needed to check and launch it.
    ``signature`` is the base64 Ed25519 signature made at promotion over
    ``kernevo.signature.signed_payload`` and ``signing_key_id`` the sha256 (hex) of the signer's
    raw public key; both ``null`` for a champion promoted unsigned (loaders refuse it).
    ``certificate`` is the JSON certificate stored at promotion (``kernevo.certificate``: checks
    passed, seeds, shapes, GPU, driver and NVRTC versions, timings, what was not verified), as
    stored: the signature covers its sha256; ``null`` for a champion promoted before it."""

    path: str
    dtype: str
    gpu: str
    shape_bucket: str
    program_id: int
    program_uid: str
    arch: str
    nvrtc_version: str | None
    cubin_b64: str
    cubin_sha256: str
    source: str
    source_sha256: str
    compile_options: list[str]
    launch: Launch
    envelope: Envelope
    metrics: dict[str, Any]
    promoted_at: datetime
    signature: str | None
    signing_key_id: str | None
    certificate: dict[str, Any] | None

    @staticmethod
    def fields_of(champion: Champion, program: Program) -> dict[str, Any]:
        """The champion's fields from its row and its program's."""
        return {
            "path": champion.path,
            "dtype": champion.dtype,
            "gpu": champion.gpu_key,
            "shape_bucket": champion.shape_bucket,
            "program_id": program.id,
            "program_uid": program.uid,
            "arch": champion.arch,
            "nvrtc_version": champion.nvrtc_version,
            "cubin_b64": base64.b64encode(champion.cubin).decode("ascii"),
            "cubin_sha256": champion.cubin_sha256,
            "source": program.source,
            "source_sha256": program.source_sha256,
            "compile_options": champion.compile_options,
            "launch": Launch.model_validate(champion.launch),
            "envelope": Envelope.model_validate(champion.envelope),
            "metrics": champion.metrics,
            "promoted_at": champion.promoted_at,
            "signature": champion.signature,
            "signing_key_id": champion.signing_key_id,
            "certificate": champion.certificate,
        }


class KernelOut(ChampionOut):
    """The champion serving one problem (``GET /v1/kernels/best``), with the comparison that
    chose it: ``candidates`` are the serving paths compared, in registry order, and
    ``compared_by`` the rule that chose among them (``seeds.registry.Rule``: ``only_champion``,
    ``time_at_shape`` or ``combined_score``)."""

    candidates: list[CandidateOut]
    compared_by: Rule

    @classmethod
    def from_champion(
        cls,
        champion: Champion,
        program: Program,
        *,
        candidates: list[CandidateOut],
        compared_by: Rule,
    ) -> KernelOut:
        """Build from the champion row, its program and the comparison that chose it."""
        return cls(
            **ChampionOut.fields_of(champion, program),
            candidates=candidates,
            compared_by=compared_by,
        )


class ManifestOut(BaseModel):
    """``GET /v1/manifest``: every champion for one GPU, for a loader to prefetch in one request.

    ``format`` is ``kernevo.manifest.v1``; ``gpu`` the normalized GPU key; ``champions`` ordered
    by (path, dtype, shape bucket). The answer's ``ETag`` is ``etag`` quoted: the sha256 of
    every champion's fields (``api.routes.manifest``), so ``If-None-Match`` with it answers 304
    until a champion of the GPU changes."""

    format: Literal["kernevo.manifest.v1"]
    gpu: str
    etag: str
    champions: list[ChampionOut]


class VersionOut(BaseModel):
    """``GET /v1/version``: the service's distribution and version, the REST API's version and
    the newest database schema revision the code knows (``schema_head``)."""

    service: str
    version: str
    api: Literal["v1"]
    schema_head: str | None


class TokenOut(BaseModel):
    """``GET /v1/token``: the token a request carries: its ``scope``, ``name`` and ``id`` (null
    for the configured ``KERNEVO_API_TOKEN``)."""

    id: int | None
    name: str
    scope: Literal["read", "write"]
