"""Text from outside (a service's answer, a file's name or content) made safe to print."""

from __future__ import annotations


def printable(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of ``text`` as one printable line: a control character,
    line break or lone surrogate is written as its escape (``\\n``, ``\\ud800``), so a reason
    quoting the service can be printed or logged anywhere."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])


def control_character_problem(text: str) -> str | None:
    """Why ``text`` (a name given on a command line or in a query: a GPU name) cannot be taken
    as it is, or ``None``: a control character (``\\x1b[2J``, a tab, a line break) or a lone
    surrogate is refused rather than silently rewritten into something else (``x\\x1b[2J`` had
    become the GPU key ``x-2j``). The message is the one ``POST /v1/jobs`` gives for its
    ``gpu``, followed by the text with escapes."""
    if text.isprintable():
        return None
    return f"must be printable text (no control characters), not '{printable(text, 60)}'"
