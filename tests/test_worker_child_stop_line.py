"""A worker's job process stopped by SIGTERM says so once: a fresh-user trial saw
``kernevo worker: job 4 stopped by stopped by SIGTERM`` (the line put "stopped by" before a
``JobStopped`` whose text says it already)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import evaluator.parent_watch
from evolver import worker_child
from evolver.runner import JobStopped


def test_the_stop_line_says_stopped_by_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def stopped(*args: object, **kwargs: object) -> int:
        raise JobStopped(signal.SIGTERM)

    monkeypatch.setattr(evaluator.parent_watch, "die_with_parent", lambda *a, **k: None)
    monkeypatch.setattr(worker_child, "run_claimed_job", stopped)
    hangup = signal.getsignal(signal.SIGHUP)
    try:
        argv = ["--job", "4", "--parent", "1", "--database-url", "sqlite:///x.db"]
        code = worker_child.main([*argv, "--work-dir", str(tmp_path)])
    finally:
        signal.signal(signal.SIGHUP, hangup)
    assert code == 143
    assert capsys.readouterr().err == "kernevo worker: job 4 stopped by SIGTERM\n"
