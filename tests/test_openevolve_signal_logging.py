"""OpenEvolve's stop handler logs from inside a signal handler, into the job's log file that
the interrupted code may be writing that moment: the write fails ("reentrant call inside
<_io.BufferedWriter …>"), and logging printed a ``--- Logging error ---`` traceback to the
terminal (a worker's stop, fresh-user trial 2026-12-02). ``evolver.openevolve_host`` runs the
handler with logging's error printing off; the stop itself goes on."""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytest

from evolver.openevolve_host import _NotingSignalModule


class _Reentrant(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='openevolve.log'>")
        except RuntimeError:
            self.handleError(record)


class _FakeSignal:
    def __init__(self) -> None:
        self.installed: dict[int, Any] = {}

    def signal(self, signalnum: int, handler: Any) -> Any:
        self.installed[signalnum] = handler


def test_a_log_line_failing_inside_the_stop_handler_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger("openevolve.controller.test")
    reentrant = _Reentrant()
    logger.addHandler(reentrant)
    logger.propagate = False
    stopped: list[int] = []

    def openevolve_handler(signum: int, frame: Any) -> None:
        logger.warning("Received signal %d, initiating graceful shutdown...", signum)
        stopped.append(signum)

    fake, received = _FakeSignal(), []
    _NotingSignalModule(fake, received).signal(signal.SIGTERM, openevolve_handler)
    assert logging.raiseExceptions
    try:
        fake.installed[signal.SIGTERM](signal.SIGTERM, None)
    finally:
        logger.removeHandler(reentrant)
    assert (received, stopped) == ([signal.SIGTERM], [signal.SIGTERM])
    assert capsys.readouterr().err == ""
    assert logging.raiseExceptions  # restored
