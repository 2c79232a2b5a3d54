"""``kernevo jobs --watch`` ended by Ctrl-C exits 130, as every command does (README: 130 for
Ctrl-C); a fresh-user trial saw 0. The last listing is still printed."""

from __future__ import annotations

import io
import time

import pytest
from job_store import enqueue_jobs
from rich.console import Console
from sqlalchemy import Engine

from db.session import session_scope
from kernevo import cli
from kernevo.cli import jobs


def _ctrl_c(seconds: float) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("terminal", [False, True])
def test_ctrl_c_ends_the_watch_with_130_and_the_last_listing(
    terminal: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    engine: Engine,
    fresh_database_url: str,
) -> None:
    with session_scope(engine) as s:
        enqueue_jobs(s, 1, iterations=10)
    screen = io.StringIO()
    if terminal:
        console = Console(file=screen, force_terminal=True, width=200)
        monkeypatch.setattr(jobs, "_watch_console", lambda: console)
    monkeypatch.setattr(time, "sleep", _ctrl_c)  # Ctrl-C while the watch waits for a refresh
    code = cli.main(["jobs", "--watch", "--database-url", fresh_database_url])
    out, err = capsys.readouterr()
    assert (code, err) == (130, "")
    shown = screen.getvalue() if terminal else out
    assert "trsm_small/m64n64" in shown and "waiting" in shown
