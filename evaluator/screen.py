"""Cheap rejections before compiling: size, includes, and the EVOLVE-BLOCK contract."""

from __future__ import annotations

import re

from evaluator.report import CheckFailure
from seeds.tunables import evolve_block_lines

MAX_SOURCE_BYTES = 64 * 1024
# NVRTC's built-in headers; nothing else exists on every machine (the wheel ships no others).
ALLOWED_INCLUDES = frozenset({"cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"})
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def _outside_block(source: str) -> list[str]:
    first, last = evolve_block_lines(source)
    lines = source.splitlines()
    return lines[: first - 1] + lines[last + 1 :]


def screen(source: str, seed_source: str) -> CheckFailure | None:
    """First screening failure of ``source`` against its path's seed, or None.

    Rejects: sources over 64 KiB, includes other than NVRTC's built-in headers, missing or
    repeated EVOLVE-BLOCK markers, and any change outside the EVOLVE-BLOCK.
    """
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        return CheckFailure("source_size", None, float(size), float(MAX_SOURCE_BYTES), "bytes")
    for header in _INCLUDE_RE.findall(source):
        if header not in ALLOWED_INCLUDES:
            return CheckFailure(
                "include", None, None, None,
                f"#include <{header}> is not available; allowed: {sorted(ALLOWED_INCLUDES)}",
            )  # fmt: skip
    try:
        outside = _outside_block(source)
    except ValueError as exc:
        return CheckFailure("evolve_block_markers", None, None, None, str(exc))
    if outside != _outside_block(seed_source):
        return CheckFailure(
            "edit_outside_evolve_block", None, None, None,
            "only the code between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change",
        )  # fmt: skip
    return None
