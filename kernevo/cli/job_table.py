"""``kernevo jobs``'s output: the table of jobs, the failed jobs' reasons and the stale jobs'
hints (one renderer, for the plain listing and ``--watch``'s frames alike)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from kernevo.cli.service import _MALFORMED, _malformed


def _jobs_lines(args: argparse.Namespace, rows: Sequence[dict[str, Any]]) -> list[str]:
    """``kernevo jobs``'s output for ``rows``, the one renderer of the plain listing and of
    ``--watch``'s frames: the table (path/bucket, dtype, GPU, state, heartbeat age, iteration,
    best, speedup, programs, last failure, backend/model), then a ``job N failed: <reason>``
    line per failed job and the stale jobs' hints; ``no jobs`` when there is none.

    Raises:
        CliError: a service's row lacks a field or holds one of the wrong type (``--api-url``).
    """
    if not rows:
        return ["no jobs"]
    try:
        # The path column fits its longest path/bucket (trsm_small_batched/m64n64 is 25).
        width = max(14, *(len(_path_bucket(row)) for row in rows))
        header = (
            f"{'id':>4}  {'path/bucket':<{width}} {'dtype':<10} {'gpu':<14} {'state':<9} "
            f"{'beat':>5} {'iter':>9}  {'best':>6} {'speedup':>7}  {'progs':>5}  "
            f"{'last failure':<14} backend/model"
        )
        lines = [header, *(_job_line(row, width) for row in rows)]
    except _MALFORMED as error:
        if not args.api_url:
            raise
        raise _malformed(f"{args.api_url.rstrip('/')}/v1/jobs", error) from None
    return [*lines, *_failure_lines(rows), *_stale_hints(rows)]


def _age(seconds: float | None) -> str:
    """A heartbeat age in the largest whole unit: ``41s``, ``15m``, ``3h``, ``2d``."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _failure_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``job N failed: <reason>`` for each listed failed job with a stored reason
    (``job.failure_reason``; a service older than the field sends none), one printable line
    each, at most :data:`_FAILURE_LINE_MAX` characters (the reason is whole in the API)."""
    from kernevo.text import printable

    lines = []
    for row in rows:
        if row.get("state") == "failed" and row.get("failure_reason"):
            line = printable(f"job {row['id']} failed: {row['failure_reason']}", 10_000)
            if len(line) > _FAILURE_LINE_MAX:
                line = f"{line[: _FAILURE_LINE_MAX - 1]}…"
            lines.append(line)
    return lines


# Characters a failure line of ``kernevo jobs`` may take: a reason quoting a long error must
# not bury the table under it.
_FAILURE_LINE_MAX = 300


def _path_bucket(row: dict[str, Any]) -> str:
    """A job's path and shape bucket, ``band_bidiag/n2049_16384`` (the path alone from a service
    that sends no bucket): two jobs of one path on different buckets are told apart."""
    bucket = row.get("shape_bucket")
    return f"{row['path']}/{bucket}" if bucket else str(row["path"])


def _job_line(row: dict[str, Any], width: int = 14) -> str:
    """One row of ``kernevo jobs``'s table, its path/bucket column ``width`` wide."""
    total = (row.get("config") or {}).get("iterations", "?")
    best = row.get("best_score")
    speedup = row.get("best_speedup")
    state = "stale" if row.get("stale") else row["state"]
    return (
        f"{row['id']:>4}  {_path_bucket(row):<{width}} {row['dtype']:<10} {row['gpu']:<14} "
        f"{state:<9} {_age(row.get('heartbeat_age_s')):>5} "
        f"{str(row['iteration']) + '/' + str(total):>9}  "
        f"{(f'{best:.3f}' if best is not None else '-'):>6} "
        f"{(f'{speedup:.2f}x' if speedup else '-'):>7}  "  # 0: nothing timed yet
        f"{row.get('programs', 0):>5}  {(row.get('last_failure_kind') or '-'):<14} "
        f"{row.get('backend')}/{row.get('model') or '-'}"
    )


def _stale_hints(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What to do about the stale jobs listed: resume a ``kernevo evolve`` job by hand; a job
    queued through the API (``queued_at`` set) needs nothing, a worker's reaper returns it to
    the queue and a worker resumes it."""
    from db.heartbeat import STALE_AFTER_S

    stale = [row for row in rows if row.get("stale")]
    by_hand = [str(row["id"]) for row in stale if not row.get("queued_at")]
    queued = [str(row["id"]) for row in stale if row.get("queued_at")]
    head = f"stale: running, but no heartbeat for over {STALE_AFTER_S:.0f} s: its process is gone"
    lines = []
    if by_hand:
        lines.append(
            f"{head}; 'kernevo evolve --resume ID' continues it (job {', '.join(by_hand)})"
        )
    if queued:
        lines.append(
            f"{head if not by_hand else 'stale'} (queued job {', '.join(queued)}): a worker "
            "returns it to the queue once its heartbeat is older than the worker's --grace-s, "
            "and a worker resumes it; nothing to do while a worker runs"
        )
    return lines
