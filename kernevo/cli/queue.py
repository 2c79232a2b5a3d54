"""The job queue's commands: ``kernevo worker`` serves it, ``kernevo cancel`` cancels a queued
or running job (in the database or through the service)."""

from __future__ import annotations

import argparse

from kernevo.cli.cluster import _cluster_options
from kernevo.cli.errors import CliError, UsageError
from kernevo.cli.folders import _check_work_dir
from kernevo.cli.service import (
    _error_detail,
    _json_of,
    _malformed,
    _one_source,
    _service_request,
    _token_hint,
)
from kernevo.cli.store import _JOB_DATABASE_HINT, _store_url
from kernevo.environment import read_settings, without_credentials


def _cmd_worker(args: argparse.Namespace) -> int:
    """Serve the job queue until SIGTERM or Ctrl-C (``evolver.worker``)."""
    from evolver.progress import ConsoleWriter
    from evolver.settings import EvolverSettings
    from evolver.worker import Worker, WorkerOptions

    settings = read_settings(EvolverSettings)
    _check_work_dir(args.work_dir or settings.work_dir)
    cluster = _cluster_options(args, local=False)
    local = () if args.compile_only or cluster is not None else (settings.gpu,)
    options = WorkerOptions(
        database_url=_store_url(args),
        work_dir=args.work_dir or settings.work_dir,
        gpus=args.gpus or local,
        compile_only=args.compile_only,
        heartbeat_s=args.heartbeat_s,
        grace_s=args.grace_s,
        poll_s=args.poll_s,
        max_attempts=args.max_attempts,
        cluster=cluster,
    )
    problem = options.problem()
    if problem is not None:
        args.parser.error(problem)
    from evolver.store import make_sqlite_folder

    # The SQLite file's folder, as open_store would make it: before the worker's lock file there
    # (evolver.worker.check_database), whose errno would otherwise be the line.
    make_sqlite_folder(options.database_url)
    if cluster is not None:
        from evolver.cluster import check_reachable

        check_reachable(str(cluster.scheduler))  # Dask retries a refused connection for 30 s
    return Worker(options, write=ConsoleWriter()).run()


def _cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a job: through the service with ``--api-url`` (``PATCH /v1/jobs/{id}``, the
    bearer token from ``KERNEVO_API_TOKEN``), else in the database (``db.queue.cancel_job``)."""
    _one_source(args)
    if args.api_url:
        return _cancel_through_service(args.api_url.rstrip("/"), args.job)
    from db import queue
    from db.session import session_scope
    from evolver.store import open_store

    # Nothing to cancel in a database that does not exist or holds no kernevo tables: refused,
    # never created nor migrated.
    engine = open_store(
        _store_url(args), create=False, hint=_JOB_DATABASE_HINT, foreign_hint=_JOB_DATABASE_HINT
    )
    try:
        with session_scope(engine) as s:
            outcome = queue.cancel_job(s, args.job)
    finally:
        engine.dispose()
    print(_cancel_line(args.job, outcome))
    return 0


def _cancel_line(job_id: int, outcome: str) -> str:
    """What ``kernevo cancel`` prints for ``outcome`` (``db.queue.CancelOutcome``), the same
    through the service and on the database."""
    if outcome == "already_cancelled":
        return f"job {job_id} was already cancelled; nothing changed"
    return f"job {job_id} cancelled; a running job stops after its iteration in flight"


def _cancel_through_service(base: str, job_id: int) -> int:
    """``PATCH {base}/v1/jobs/{job_id}`` with the write token ``KERNEVO_API_TOKEN``.

    Raises:
        UsageError: no ``KERNEVO_API_TOKEN``: a setting missing, exit 2 before any request.
        CliError: the service refuses (the job's own line as on the database; a token it does
            not know or of scope read, with how to make a write one) or does not answer.
    """
    from api.settings import ApiSettings

    token = ApiSettings().token()
    if token is None:
        raise UsageError(f"cancel through the service needs a token: {_token_hint('write')}")
    url = f"{base}/v1/jobs/{job_id}"
    shown = without_credentials(url)
    answer = _service_request(
        "PATCH",
        url,
        json_body={"state": "cancelled"},
        headers={"Authorization": f"Bearer {token}"},
    )
    detail = _error_detail(answer.body)
    # The service's own line ("job N not found", "job N is complete; …") as the database route
    # prints it; any other 404/409 (a wrong base URL: "Not Found") names where it came from.
    if answer.status_code in (404, 409) and str(detail).startswith(f"job {job_id} "):
        raise CliError(str(detail))
    if answer.status_code in (401, 403):  # unknown or revoked token; a read token
        raise CliError(f"{answer.status_code} from {shown}: {detail}; {_token_hint('write')}")
    if answer.status_code >= 400:
        raise CliError(f"{answer.status_code} from {shown}: {detail}")
    body = _json_of(answer, url)
    if not isinstance(body, dict):
        raise _malformed(url, TypeError(f"expected the job, not {type(body).__name__}"))
    outcome = body.get("outcome")
    if outcome in ("cancelled", "already_cancelled"):
        print(_cancel_line(job_id, outcome))
    elif body.get("state") == "cancelled":  # a service older than the field
        print(f"job {job_id} is cancelled (the service did not say whether it was before)")
    else:  # not a kernevo job: "cancelled" would be a claim nothing backs
        raise _malformed(url, KeyError("neither outcome nor state 'cancelled'"))
    return 0
