"""``kernevo jobs --watch``: the jobs table redrawn in place, a progress bar per job (rich).

The rows are ``kernevo jobs``'s (the database's or the service's ``GET /v1/jobs``: dicts with
``id``, ``path``, ``dtype``, ``gpu``, ``state``, ``stale``, ``iteration``, ``config.iterations``,
``best_score``, ``best_speedup``, ``programs``, ``claimed_by``, ``attempts``). The watch ends by
itself once no listed job is ``waiting`` or ``running`` (a stale one counts as running: a worker
will take it back), or on Ctrl-C. On a terminal the table is redrawn every ``interval_s``
seconds; anywhere else (a pipe, a file, CI's log) rich draws only the last table, when the watch
ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

Row = Mapping[str, Any]
ACTIVE_STATES = ("waiting", "running")
# Columns of the table drawn when stdout is not a terminal (a pipe, a file, CI's log).
LOG_WIDTH = 200
_STYLE = {
    "waiting": "yellow",
    "running": "cyan",
    "complete": "green",
    "failed": "red",
    "cancelled": "magenta",
    "stale": "bold red",
}


def _total(row: Row) -> int | None:
    total = (row.get("config") or {}).get("iterations")
    return total if isinstance(total, int) and total > 0 else None


def _progress(row: Row) -> Table:
    """A bar of iteration / total, with the figures beside it."""
    total = _total(row)
    iteration = int(row.get("iteration") or 0)
    cell = Table.grid(padding=(0, 1))
    if total is None:
        cell.add_row(Text(f"{iteration}/?"))
        return cell
    bar = ProgressBar(total=total, completed=min(iteration, total), width=24)
    cell.add_row(bar, Text(f"{iteration}/{total}"))
    return cell


def job_table(rows: Sequence[Row]) -> Table:
    """The jobs as a rich table: id, path, dtype, GPU, state (``stale`` for a running job
    whose heartbeat stopped), progress bar, best score and speedup, programs, worker."""
    table = Table(title="kernevo jobs", expand=False)
    for name, justify in (
        ("id", "right"),
        ("path", "left"),
        ("dtype", "left"),
        ("gpu", "left"),
        ("state", "left"),
        ("progress", "left"),
        ("best", "right"),
        ("speedup", "right"),
        ("progs", "right"),
        ("worker (attempt)", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        state = "stale" if row.get("stale") else str(row.get("state"))
        best, speedup = row.get("best_score"), row.get("best_speedup")
        holder = row.get("claimed_by") or "-"
        attempts = row.get("attempts") or 0
        table.add_row(
            str(row.get("id")),
            str(row.get("path")),
            str(row.get("dtype")),
            str(row.get("gpu")),
            Text(state, style=_STYLE.get(state, "")),
            _progress(row),
            f"{best:.3f}" if isinstance(best, int | float) else "-",
            f"{speedup:.2f}x" if isinstance(speedup, int | float) and speedup > 0 else "-",
            str(row.get("programs", 0)),
            f"{holder} ({attempts})" if attempts else holder,
        )
    return table


def active(rows: Sequence[Row]) -> bool:
    """Whether any row is a job still to finish (``waiting`` or ``running``)."""
    return any(row.get("state") in ACTIVE_STATES for row in rows)


def watch_jobs(
    fetch: Callable[[], Sequence[Row]],
    *,
    interval_s: float,
    console: Console | None = None,
) -> int:
    """Redraw :func:`job_table` of ``fetch()`` every ``interval_s`` seconds until no job is
    active or Ctrl-C; returns the number of tables drawn. Errors of ``fetch`` propagate (the
    CLI prints them as one line)."""
    if console is None:
        # Off a terminal rich assumes 80 columns and elides cells; a log has room.
        console = Console() if sys.stdout.isatty() else Console(width=LOG_WIDTH)
    drawn = 0
    rows = fetch()
    try:
        with Live(job_table(rows), console=console, auto_refresh=False) as live:
            drawn = 1
            while active(rows):
                time.sleep(interval_s)
                rows = fetch()
                live.update(job_table(rows), refresh=True)
                drawn += 1
    except KeyboardInterrupt:
        pass  # leaving the watch is not an error
    return drawn
