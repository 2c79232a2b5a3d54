"""``kernevo jobs``: list jobs and their progress, from the database or the service, once or
redrawn until they end (``--watch``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from kernevo.cli.errors import EXIT_INTERRUPTED
from kernevo.cli.job_table import _jobs_lines
from kernevo.cli.parser import DEFAULT_WATCH_INTERVAL_S
from kernevo.cli.service import _get_json, _malformed, _one_source
from kernevo.cli.store import _store_url


def _job_rows_from_db(url: str, state: str | None, limit: int) -> list[dict[str, Any]]:
    from db import repository
    from db.heartbeat import database_now, liveness
    from db.session import read_scope
    from evolver.store import open_existing_store

    engine = open_existing_store(url)  # read-only: never creates, migrates or writes a database
    try:
        with read_scope(engine) as s:
            jobs = repository.list_jobs(s, state=state, limit=limit)
            counts = repository.count_programs(s, (j.id for j in jobs))
            now = database_now(s)  # heartbeats are on the database clock
            return [
                {
                    "id": j.id,
                    "path": j.path,
                    "shape_bucket": j.shape_bucket,
                    "dtype": j.dtype,
                    "gpu": j.gpu_key,
                    "state": j.state,
                    "iteration": j.iteration,
                    "config": j.config,
                    "best_score": j.best_score,
                    "best_speedup": j.best_speedup,
                    "last_failure_kind": j.last_failure_kind,
                    "failure_reason": j.failure_reason,
                    "programs": counts[j.id],
                    "backend": j.backend,
                    "model": j.model,
                    "heartbeat_at": j.heartbeat_at.isoformat() if j.heartbeat_at else None,
                    "heartbeat_age_s": live.heartbeat_age_s,
                    "stale": live.stale,
                    "claimed_by": j.claimed_by,
                    "attempts": j.attempts,
                    "queued_at": j.queued_at.isoformat() if j.queued_at else None,
                }
                for j in jobs
                for live in (liveness(j, now),)
            ]
    finally:
        engine.dispose()


# The fields of a ``GET /v1/jobs`` row that ``kernevo jobs`` cannot list a job without.
_JOB_KEYS = ("id", "path", "dtype", "gpu", "state", "iteration")


# The most rows one ``GET /v1/jobs`` answers (api.pagination.MAX_LIMIT; not imported: that
# would import FastAPI into every ``kernevo jobs``).
_SERVICE_PAGE = 1000


def _job_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``kernevo jobs``'s rows: from the service (``--api-url``) or the database. The service
    answers at most :data:`_SERVICE_PAGE` rows a request, so a larger ``--limit`` is asked page
    by page (``offset``), until ``--limit`` rows or a short page: the same newest rows the
    database path lists (a job created meanwhile may shift a row onto the next page; one seen
    twice is listed once)."""
    if args.api_url:
        url = f"{args.api_url.rstrip('/')}/v1/jobs"
        rows: list[dict[str, Any]] = []
        seen: set[Any] = set()
        offset = 0
        while len(rows) < args.limit:
            asked = min(args.limit - len(rows), _SERVICE_PAGE)
            params: dict[str, Any] = {"limit": asked}
            if offset:
                params["offset"] = offset
            if args.state:
                params["state"] = args.state
            page = _service_rows(url, params)
            rows += [row for row in page if row["id"] not in seen]
            seen.update(row["id"] for row in page)
            if len(page) < asked:
                break
            offset += len(page)
        return rows[: args.limit]

    url = _store_url(args)
    return _job_rows_from_db(url, args.state, args.limit)


def _service_rows(url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """One page of ``GET /v1/jobs``.

    Raises:
        CliError: the service's error, or an answer that is not a list of jobs.
    """
    rows = _get_json(url, params)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise _malformed(url, TypeError(f"expected a list of jobs, not {type(rows).__name__}"))
    for row in rows:
        missing = [key for key in _JOB_KEYS if key not in row]
        if missing:
            raise _malformed(url, KeyError(f"a job without {', '.join(missing)}"))
    return rows


def _cmd_jobs(args: argparse.Namespace) -> int:
    _one_source(args)
    if args.interval is not None and not args.watch:
        args.parser.error("--interval is --watch's refresh; add --watch or leave it out")
    rows = _job_rows(args)
    if args.watch:
        interval = DEFAULT_WATCH_INTERVAL_S if args.interval is None else args.interval
        if _watch_jobs(args, rows, interval):
            return EXIT_INTERRUPTED  # Ctrl-C's status, as every command's; the listing stays
    else:
        print("\n".join(_jobs_lines(args, rows)))
    return 0


def _watch_jobs(args: argparse.Namespace, rows: list[dict[str, Any]], interval_s: float) -> bool:
    """``kernevo jobs --watch``: ``job_table._jobs_lines`` of ``rows``, then of a new fetch every
    ``interval_s`` seconds, until no listed job is waiting or running (a stale one counts as
    running: a worker takes it back; ``evolver.watch.active``) or Ctrl-C. On a terminal each
    frame is redrawn in place (rich ``Live``), every line cut at the terminal's right edge so
    that a frame keeps its height, and the last listing is printed whole at the end; anywhere
    else (a pipe, a file, a CI log) only the last frame is printed, as plain ``kernevo jobs``
    prints it. Returns whether Ctrl-C ended the watch (the command then exits 130)."""
    import time

    from rich.live import Live
    from rich.text import Text

    from evolver.watch import active

    Rows = list[dict[str, Any]]

    interrupted = False

    def refreshed(rows: Rows, show: Callable[[Rows], None]) -> Rows:
        # The rows last fetched once no job is active or on Ctrl-C (the last listing is still
        # printed), each fetch shown as it comes.
        nonlocal interrupted
        try:
            while active(rows):
                time.sleep(interval_s)
                rows = _job_rows(args)
                show(rows)
        except KeyboardInterrupt:
            interrupted = True
        return rows

    console = _watch_console()
    if not console.is_terminal:
        rows = refreshed(rows, lambda rows: None)
        print("\n".join(_jobs_lines(args, rows)))
        return interrupted

    def frame(rows: Sequence[dict[str, Any]]) -> Text:
        text = "\n".join(_jobs_lines(args, rows))
        return Text(text, no_wrap=True, overflow="crop", end="")

    # Transient: the frames (cut at the terminal's edge) are erased at the end, and the last
    # listing is printed whole, as plain ``kernevo jobs`` prints it, to stay on screen.
    with Live(frame(rows), console=console, auto_refresh=False, transient=True) as live:
        rows = refreshed(rows, lambda rows: live.update(frame(rows), refresh=True))
    console.print("\n".join(_jobs_lines(args, rows)), soft_wrap=True, markup=False, highlight=False)
    return interrupted


def _watch_console() -> Any:
    """The rich console ``jobs --watch`` draws on: stdout's (a test gives a terminal's)."""
    from rich.console import Console

    return Console()
