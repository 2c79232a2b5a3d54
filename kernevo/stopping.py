"""SIGTERM delivered as an exception that cannot be lost.

A Python signal handler runs between two bytecodes of the main thread, wherever it is; when
that is inside code whose exceptions the interpreter discards (a weakref callback, a
``__del__``, importlib's module-lock cleanup: "Exception ignored in …"), the exception a
handler raises vanishes and the command runs on as if never signalled. CI saw exactly that: a
job sent SIGTERM 0.3 s after its start ran to completion and exited 0. So a handler calls
:func:`note_stop` before it raises, and the code that catches the exception calls
:func:`stop_handled`; until then the signal is sent again every :data:`REDELIVER_S` seconds,
at most :data:`REDELIVERIES` times, so it lands in ordinary code. The interpreter's "Exception
ignored in …" report of the discarded one is kept off stderr meanwhile (:func:`_quiet_unraisable`):
the stop is not lost, and the command's own line says what happened (CI saw the report after a
Ctrl-C in a job's setup, raised inside SQLAlchemy's weakref callback).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

# The discarding contexts are short callbacks: half a second later the main thread is elsewhere.
REDELIVER_S = 0.5
REDELIVERIES = 5

_pending: threading.Event | None = None


def _redeliver(signum: int, handled: threading.Event) -> None:
    for _ in range(REDELIVERIES):
        if handled.wait(REDELIVER_S):
            return
        os.kill(os.getpid(), signum)


def _quiet_unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a stop is pending: a stop's exception (a ``BaseException``
    that is not an ``Exception``: the handler's) discarded by the interpreter is redelivered, not
    lost, so it is not reported; anything else goes to the hook that was there before."""
    pending = _pending
    stopping = pending is not None and not pending.is_set()
    if stopping and not isinstance(unraisable.exc_value, Exception):
        return
    _previous_hook(unraisable)


_previous_hook = sys.unraisablehook


def note_stop(signum: int) -> None:
    """Record that ``signum`` is being raised as an exception; unless :func:`stop_handled` runs
    first, the signal is sent to this process again. Call it in the handler, before raising.
    No lock: a handler must never wait for one the interrupted main thread may hold."""
    global _pending, _previous_hook
    if _pending is not None and not _pending.is_set():
        return  # already redelivering this stop
    if sys.unraisablehook is not _quiet_unraisable:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable
    _pending = threading.Event()
    threading.Thread(
        target=_redeliver, args=(signum, _pending), name="kernevo-stop-redelivery", daemon=True
    ).start()


def stop_handled() -> None:
    """The stop's exception was caught where it is handled: send the signal no more."""
    if _pending is not None:
        _pending.set()
