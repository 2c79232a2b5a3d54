"""What commands print to: stdout, quiet once its reader is gone or when it was closed."""

from __future__ import annotations

import os
import sys
from typing import Any


class _StdoutWhileRead:
    """What commands print to: stdout until its reader goes away (a closed pipe: ``kernevo jobs
    | head -3``), then nothing. The command finishes its work (``kernevo lock`` still writes its
    file) and keeps its exit status. On the first ``BrokenPipeError`` the descriptor is pointed
    at /dev/null (Python's recipe), so that later writes and the interpreter's last flush of what
    is still buffered succeed instead of printing "Exception ignored … BrokenPipeError"."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _to_devnull(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)


def _stdout_or_devnull() -> Any:
    """``sys.stdout``, or /dev/null when the command was started with stdout closed
    (``kernevo jobs >&-``): Python then has no ``sys.stdout`` at all."""
    if sys.stdout is not None:
        return sys.stdout
    return open(os.devnull, "w")  # noqa: SIM115 — lives as long as the process
