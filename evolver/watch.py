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


BAR_WIDTH = 24
# Columns left out, in this order, while the table is wider than the terminal; id, state and
# best always stay. Without this a narrow terminal (60 columns) folded every row over several
# lines, cells shrunk to nothing.
DROP_ORDER = ("worker (attempt)", "gpu", "progs", "dtype", "speedup", "path", "progress")
_COLUMNS = (
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
)


def _progress(row: Row) -> tuple[Table, int]:
    """A bar of iteration / total, with the figures beside it, and its width in columns."""
    total = _total(row)
    iteration = int(row.get("iteration") or 0)
    cell = Table.grid(padding=(0, 1))
    if total is None:
        figures = f"{iteration}/?"
        cell.add_row(Text(figures))
        return cell, len(figures)
    figures = f"{iteration}/{total}"
    bar = ProgressBar(total=total, completed=min(iteration, total), width=BAR_WIDTH)
    cell.add_row(bar, Text(figures))
    return cell, BAR_WIDTH + 1 + len(figures)


def _cells(row: Row) -> dict[str, tuple[Any, int]]:
    """One row's cells by column name, each with its width in columns."""
    state = "stale" if row.get("stale") else str(row.get("state"))
    best, speedup = row.get("best_score"), row.get("best_speedup")
    holder = row.get("claimed_by") or "-"
    attempts = row.get("attempts") or 0
    texts = {
        "id": str(row.get("id")),
        "path": str(row.get("path")),
        "dtype": str(row.get("dtype")),
        "gpu": str(row.get("gpu")),
        "best": f"{best:.3f}" if isinstance(best, int | float) else "-",
        "speedup": (f"{speedup:.2f}x" if isinstance(speedup, int | float) and speedup > 0 else "-"),
        "progs": str(row.get("programs", 0)),
        "worker (attempt)": f"{holder} ({attempts})" if attempts else holder,
    }
    cells: dict[str, tuple[Any, int]] = {name: (text, len(text)) for name, text in texts.items()}
    cells["state"] = (Text(state, style=_STYLE.get(state, "")), len(state))
    cells["progress"] = _progress(row)
    return cells


def job_table(rows: Sequence[Row], width: int | None = None) -> Table:
    """The jobs as a rich table: id, path, dtype, GPU, state (``stale`` for a running job
    whose heartbeat stopped), progress bar, best score and speedup, programs, worker. With
    ``width`` (the terminal's columns), columns are left out in :data:`DROP_ORDER` until every
    row fits on one line."""
    cells = [_cells(row) for row in rows]
    widths = {name: max([len(name), *(row[name][1] for row in cells)]) for name, _ in _COLUMNS}
    shown = [name for name, _ in _COLUMNS]

    def drawn_width() -> int:
        # A column takes its widest cell, one space of padding each side and one rule.
        return sum(widths[name] + 3 for name in shown) + 1

    for name in DROP_ORDER:
        if width is None or drawn_width() <= width:
            break
        shown.remove(name)
    table = Table(title="kernevo jobs", expand=False)
    for name, justify in _COLUMNS:
        if name in shown:
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in cells:
        table.add_row(*(row[name][0] for name in shown))
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
        with Live(job_table(rows, console.width), console=console, auto_refresh=False) as live:
            drawn = 1
            while active(rows):
                time.sleep(interval_s)
                rows = fetch()
                live.update(job_table(rows, console.width), refresh=True)
                drawn += 1
    except KeyboardInterrupt:
        pass  # leaving the watch is not an error
    return drawn
