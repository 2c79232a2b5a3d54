"""Machine-readable tunables declared by a seed kernel.

A tunable is a preprocessor constant inside the EVOLVE-BLOCK whose line carries its legal values:

    #define TRSM_THREADS 128  // tune: 64 128 256

The built-in offline mutator proposes SEARCH/REPLACE diffs that move one tunable to another of
its declared values, so an evolution job makes real progress without an LLM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EVOLVE_BLOCK_START = "// EVOLVE-BLOCK-START"
EVOLVE_BLOCK_END = "// EVOLVE-BLOCK-END"

_TUNE_RE = re.compile(
    r"^\s*#define\s+(?P<name>[A-Za-z_]\w*)\s+(?P<value>\S+)\s*//\s*tune:\s*(?P<choices>.+?)\s*$"
)


@dataclass(frozen=True)
class Tunable:
    """One declared tunable: its current value, its legal values and the line that holds it."""

    name: str
    value: str
    choices: tuple[str, ...]
    line_no: int
    line: str

    def with_value(self, value: str) -> str:
        """The declaring line rewritten to ``value`` (the rest of the line kept verbatim)."""
        head, _, tail = self.line.partition(f"#define {self.name}")
        rest = tail.lstrip()
        suffix = rest[len(self.value) :]
        return f"{head}#define {self.name} {value}{suffix}"


def evolve_block_lines(source: str) -> tuple[int, int]:
    """Line indices (0-based, exclusive of the markers) of the single EVOLVE-BLOCK.

    Raises:
        ValueError: markers missing, repeated or out of order.
    """
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_BLOCK_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_BLOCK_END]
    if len(starts) != 1 or len(ends) != 1 or starts[0] >= ends[0]:
        raise ValueError("expected exactly one EVOLVE-BLOCK-START ... EVOLVE-BLOCK-END pair")
    return starts[0] + 1, ends[0]


def parse_tunables(source: str) -> list[Tunable]:
    """Tunables declared inside the EVOLVE-BLOCK of ``source``, in file order.

    Raises:
        ValueError: the EVOLVE-BLOCK markers are missing or malformed.
    """
    first, last = evolve_block_lines(source)
    lines = source.splitlines()
    found: list[Tunable] = []
    for i in range(first, last):
        match = _TUNE_RE.match(lines[i])
        if match:
            choices = tuple(match["choices"].split())
            found.append(Tunable(match["name"], match["value"], choices, i, lines[i]))
    return found
