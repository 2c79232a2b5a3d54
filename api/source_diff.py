"""The unified diff of a program's source against its parent's, bounded so a huge source cannot
stall a request.

``difflib.unified_diff`` (the standard library's, the same format as ``diff -u``) on lines; its
matcher is quadratic in the worst case, so sources longer than :data:`MAX_DIFF_LINES` lines are
not diffed (the answer says why instead). Kernel sources are a few hundred lines; a job's
``max_code_length`` (``evolver.job_config``) allows up to a million characters, which is where
the bound matters.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

# Lines per side above which no diff is computed: 20,000 lines diff in well under a second
# (difflib with its junk heuristic), a hundred times a kernel's length.
MAX_DIFF_LINES = 20_000
# Lines of context around each change, as ``diff -u``.
CONTEXT_LINES = 3


@dataclass(frozen=True)
class SourceDiff:
    """A unified diff (``text``, ``""`` when the sources are equal; ``None`` when not
    computed, ``note`` saying why) and its counts of added and removed lines."""

    text: str | None
    added: int
    removed: int
    note: str | None = None


def source_diff(before: str, after: str, *, before_name: str, after_name: str) -> SourceDiff:
    """The unified diff turning ``before`` into ``after``, with ``---``/``+++`` headers naming
    ``before_name`` and ``after_name``; lines end with ``\\n`` (a missing final newline is
    added, as ``diff`` marks it, so every line of the text is one line)."""
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    longest = max(len(old), len(new))
    if longest > MAX_DIFF_LINES:
        return SourceDiff(
            None, 0, 0, note=f"not diffed: {longest} lines, more than {MAX_DIFF_LINES}"
        )
    lines = [
        line if line.endswith("\n") else line + "\n"
        for line in difflib.unified_diff(
            old, new, fromfile=before_name, tofile=after_name, n=CONTEXT_LINES
        )
    ]
    body = lines[2:]  # after the "---" and "+++" headers (none when the sources are equal)
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    return SourceDiff("".join(lines), added, removed)
