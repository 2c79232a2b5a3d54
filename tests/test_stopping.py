"""kernevo.stopping: a stop whose exception the interpreter discards is delivered again, and
one that was handled is not."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from kernevo.stopping import REDELIVER_S, note_stop, stop_handled


class Stop(BaseException):
    pass


@pytest.fixture
def calls() -> Iterator[list[int]]:
    """SIGUSR1 handled as kernevo's SIGTERM handlers do: note the stop, then raise."""
    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        note_stop(signum)
        raise Stop

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield seen
    finally:
        stop_handled()
        signal.signal(signal.SIGUSR1, previous)


class _RaisesInItsDestructor:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100_000):  # the handler runs in here; its exception is discarded
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_discarded_inside_a_destructor_is_delivered_again(calls: list[int]) -> None:
    with pytest.raises(Stop):
        _RaisesInItsDestructor()  # collected at once: "Exception ignored in … __del__"
        assert calls == [signal.SIGUSR1]  # the first delivery happened, and was lost
        time.sleep(10 * REDELIVER_S)  # the redelivery raises here
    stop_handled()
    assert len(calls) == 2


def test_a_handled_stop_is_not_sent_again(calls: list[int]) -> None:
    with pytest.raises(Stop):
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
    stop_handled()
    time.sleep(3 * REDELIVER_S)
    assert calls == [signal.SIGUSR1]


def test_a_discarded_stop_is_not_reported_while_it_is_redelivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI: a Ctrl-C in a job's setup, raised inside SQLAlchemy's weakref callback, printed
    'Exception ignored in … JobStopped' before the job's own line."""
    import threading
    from types import SimpleNamespace

    from kernevo import stopping

    reported: list[BaseException] = []
    monkeypatch.setattr(stopping, "_previous_hook", lambda u: reported.append(u.exc_value))
    pending = threading.Event()
    monkeypatch.setattr(stopping, "_pending", pending)
    stopping._quiet_unraisable(SimpleNamespace(exc_value=Stop()))  # the stop: redelivered
    error = ValueError("a real one")
    stopping._quiet_unraisable(SimpleNamespace(exc_value=error))  # anything else: reported
    pending.set()  # handled: a later stop-like exception is reported again
    late = Stop()
    stopping._quiet_unraisable(SimpleNamespace(exc_value=late))
    assert reported == [error, late]
