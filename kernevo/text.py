"""Text from outside (a service's answer, a file's name or content) made safe to print."""

from __future__ import annotations


def printable(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of ``text`` as one printable line: a control character,
    line break or lone surrogate is written as its escape (``\\n``, ``\\ud800``), so a reason
    quoting the service can be printed or logged anywhere."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])
