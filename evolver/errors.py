"""Errors a user can cause and fix: each one is a single line the CLI prints as is."""

from __future__ import annotations


class EvolverError(Exception):
    """Base of every error the evolver raises on purpose (bad input, missing infrastructure)."""


class JobConfigError(EvolverError, ValueError):
    """A job file or option that does not validate (misspelt key, value out of range)."""


class NoGpuError(EvolverError, RuntimeError):
    """No CUDA GPU (or not the requested index) is visible to this machine."""


class LLMEndpointError(EvolverError, RuntimeError):
    """The configured OpenAI-compatible endpoint is unreachable, refuses the key or the model;
    or, mid-job, one request failed (``evolver.llm.EndpointLLM``: no answer in time, an HTTP
    error, an answer that is not a chat completion), which fails that iteration only."""


class ResumeError(EvolverError, LookupError):
    """``--resume`` names a job that does not exist, is finished, or has nothing to resume."""


class JobBusyError(ResumeError):
    """Another process runs the job: it holds the job's lock (``job.lock`` in its work folder).
    A worker that claimed the job leaves it to that process instead of failing it."""


class StoreError(EvolverError, RuntimeError):
    """The lineage store cannot be opened or migrated (wrong URL, server down, bad schema)."""


class JobFailedError(EvolverError, RuntimeError):
    """A job stopped on an unexpected error after its row was created; it can be resumed.

    The message is one line; the original exception is the ``__cause__`` and the details are in
    the job's OpenEvolve log.
    """


class WorkDirError(EvolverError, RuntimeError):
    """The work folder (``KERNEVO_WORK_DIR`` or ``--work-dir``) cannot be created or written."""


class SeedScreenError(EvolverError, ValueError):
    """The job's seed (its ``initial_program.cu``) fails the evaluator's screen against the
    path's seed: every candidate, made from it, would fail the same check, so the job does not
    run. Either the path's seed file breaks the screen itself, or it changed outside its
    EVOLVE-BLOCK since the job began."""


class SigningKeyError(EvolverError, ValueError):
    """``KERNEVO_SIGNING_KEY`` names a file that is not a usable Ed25519 private key."""


class WorkerError(EvolverError, RuntimeError):
    """``kernevo worker`` cannot serve the queue as asked (a second worker on one SQLite file,
    several slots on SQLite, options that contradict each other)."""


class ClusterError(EvolverError, RuntimeError):
    """The Dask cluster a job was told to evaluate on cannot serve it: its scheduler does not
    answer, no worker of the job's GPU key joins, or the cluster's GPU models are ambiguous."""
