"""The lineage store's tables: jobs, programs, evaluations, champions and their promotions.

Programs and evaluations describe finished things and never change after they are written
(enforced by a ``before_update`` hook); jobs carry an explicit state machine (``db.states``) and a
heartbeat taken from the database clock; a champion row is replaced in place on promotion and every
promotion is kept in ``champion_promotion``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    event,
    false,
    func,
)
from sqlalchemy.orm import Mapped, Mapper, mapped_column, object_session, relationship

from db.base import Base
from db.columns import JSONDocument, SignedJSONDocument, UTCDateTime
from db.states import EvaluationState, JobState

_JOB_STATES = ", ".join(f"'{s.value}'" for s in JobState)
_EVALUATION_STATES = ", ".join(f"'{s.value}'" for s in EvaluationState)


def new_work_key() -> str:
    """A job's work key: a random UUID4 as 32 lowercase hex digits, drawn once with the row.

    Job ids restart at 1 in every database; the key is what tells job 1 of one database from job 1
    of another, so it names the job's work folder (``evolver.work_folder``).
    """
    return uuid.uuid4().hex


class ImmutableRowError(RuntimeError):
    """An attempt to change a program or evaluation row after it was written."""


class Job(Base):
    """One evolution run of one path in one dtype on one GPU model and shape bucket."""

    __tablename__ = "job"
    __table_args__ = (
        CheckConstraint(f"state IN ({_JOB_STATES})", name="state"),
        Index("ix_job_queue", "state", "queued_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    gpu_key: Mapped[str] = mapped_column(String(128))
    shape_bucket: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    backend: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    state: Mapped[str] = mapped_column(String(16), server_default=JobState.WAITING.value)
    iteration: Mapped[int] = mapped_column(Integer, server_default="0")
    best_score: Mapped[float | None] = mapped_column(Float)
    best_speedup: Mapped[float | None] = mapped_column(Float)
    last_failure_kind: Mapped[str | None] = mapped_column(String(64))
    # Why a failed job failed, one line (the runner's or the worker's error, ``worker_lost``'s
    # count); NULL while the job is not failed (cleared when it runs again).
    failure_reason: Mapped[str | None] = mapped_column(Text)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())
    # The job queue (db.queue): queued_at is set for a job that workers may claim (created through
    # the API, or returned to the queue by the reaper); None for a job ``kernevo evolve`` runs in
    # its own process. claimed_by names the worker holding it (host:pid:token).
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_gpu: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    # Seconds between the heartbeats of the process responsible for the job (the claiming
    # worker's --heartbeat-s, or kernevo evolve's 30 s); None: not recorded. The reaper and the
    # stale flag wait for three of them (db.queue, db.heartbeat).
    heartbeat_interval_s: Mapped[float | None] = mapped_column(Float)
    # A random UUID (32 hex digits) drawn when the row is created (migration 3c8e5b1d9a27 drew
    # one for every older row): with the id it names the job's work folder,
    # $KERNEVO_WORK_DIR/job-<id>-<first 12 digits>/, which evolver.work_folder marks with it.
    # (The lambda looks new_work_key up at each insert, so a test can fix the key.)
    work_key: Mapped[str] = mapped_column(String(32), unique=True, default=lambda: new_work_key())

    programs: Mapped[list[Program]] = relationship(back_populates="job", order_by="Program.id")


class Program(Base):
    """One candidate kernel source, as OpenEvolve produced it (immutable)."""

    __tablename__ = "program"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(128), unique=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"), index=True)
    source: Mapped[str] = mapped_column(Text)
    source_sha256: Mapped[str] = mapped_column(String(64), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("program.id"), index=True)
    island: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    iteration: Mapped[int] = mapped_column(Integer)
    diff: Mapped[str | None] = mapped_column(Text)
    backend: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    # True for a program of an iteration that ran again after a kill and a resume from an
    # earlier checkpoint (the first run's program, if recorded, keeps its own row).
    rerun: Mapped[bool] = mapped_column(Boolean, server_default=false(), default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())

    job: Mapped[Job] = relationship(back_populates="programs")
    parent: Mapped[Program | None] = relationship(remote_side=[id])
    evaluations: Mapped[list[Evaluation]] = relationship(
        back_populates="program", order_by="Evaluation.id"
    )


class Evaluation(Base):
    """One evaluation of a program on one GPU; ``report`` is the evaluator's full report."""

    __tablename__ = "evaluation"
    __table_args__ = (CheckConstraint(f"state IN ({_EVALUATION_STATES})", name="state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("program.id"), index=True)
    gpu_key: Mapped[str] = mapped_column(String(128))
    gpu_name: Mapped[str] = mapped_column(String(256))
    arch: Mapped[str] = mapped_column(String(16))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    nvrtc_version: Mapped[str | None] = mapped_column(String(64))
    score: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    error_kind: Mapped[str | None] = mapped_column(String(64))
    report: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())

    program: Mapped[Program] = relationship(back_populates="evaluations")


class Champion(Base):
    """The best verified kernel for one key (path, dtype, GPU key, shape bucket)."""

    __tablename__ = "champion"
    __table_args__ = (UniqueConstraint("path", "dtype", "gpu_key", "shape_bucket"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    gpu_key: Mapped[str] = mapped_column(String(128))
    shape_bucket: Mapped[str] = mapped_column(String(64))
    program_id: Mapped[int] = mapped_column(ForeignKey("program.id"))
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluation.id"))
    cubin: Mapped[bytes] = mapped_column(LargeBinary)
    cubin_sha256: Mapped[str] = mapped_column(String(64))
    arch: Mapped[str] = mapped_column(String(16))
    nvrtc_version: Mapped[str | None] = mapped_column(String(64))
    compile_options: Mapped[list[str]] = mapped_column(JSONDocument)
    launch: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    envelope: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    # Base64 Ed25519 signature over kernevo.signature's payload, and the sha256 fingerprint of
    # the public key that checks it; None for a champion promoted without a signing key.
    signature: Mapped[str | None] = mapped_column(Text)
    signing_key_id: Mapped[str | None] = mapped_column(String(64))
    # kernevo.certificate.Certificate as JSON (what verification ran and did not cover), built at
    # promotion and covered by the signature; None for a champion promoted before certificates.
    certificate: Mapped[dict[str, Any] | None] = mapped_column(SignedJSONDocument)
    promoted_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())

    program: Mapped[Program] = relationship()
    evaluation: Mapped[Evaluation] = relationship()


class ChampionPromotion(Base):
    """History: one row per promotion of a program to champion of a key."""

    __tablename__ = "champion_promotion"
    __table_args__ = (
        Index("ix_champion_promotion_key", "path", "dtype", "gpu_key", "shape_bucket"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    gpu_key: Mapped[str] = mapped_column(String(128))
    shape_bucket: Mapped[str] = mapped_column(String(64))
    program_id: Mapped[int] = mapped_column(ForeignKey("program.id"))
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluation.id"))
    cubin_sha256: Mapped[str] = mapped_column(String(64))
    score: Mapped[float] = mapped_column(Float)
    signing_key_id: Mapped[str | None] = mapped_column(String(64))
    promoted_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())


class ApiToken(Base):
    """A bearer token of the REST API (``db.tokens``): its scope, ``read`` or ``write``, and the
    SHA-256 of its secret; the secret itself is never stored. A revoked token keeps its row
    (``revoked_at`` set) so that ``kernevo token list`` still shows it."""

    __tablename__ = "api_token"
    __table_args__ = (CheckConstraint("scope IN ('read', 'write')", name="scope"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(8))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


@event.listens_for(Program, "before_update")
@event.listens_for(Evaluation, "before_update")
def _refuse_update(mapper: Mapper[Any], connection: Any, target: Program | Evaluation) -> None:
    """Programs and finished evaluations are immutable; a column change is our own bug."""
    session = object_session(target)
    if session is not None and session.is_modified(target, include_collections=False):
        raise ImmutableRowError(f"{type(target).__name__} {target.id} is immutable")
