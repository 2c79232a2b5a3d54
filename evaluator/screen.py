"""Cheap rejections before compiling: size, file access, and the EVOLVE-BLOCK contract.

NVRTC resolves `#include` against the host's file system, so an include the screen misses can put
any readable file (``/proc/self/environ`` included) into the compile log that the LLM and the
service see. The include scan therefore works on what the preprocessor sees: line splices joined
and comments removed by a scanner that respects string and character literals, every directive
form that reads a file (`include`, `include_next`, `embed`, `import`, and the `__has_include`
family) found wherever it is, and only a literal `#include <…>` of NVRTC's built-in headers let
through. Raw string literals are refused outright: the scanner does not model them.
"""

from __future__ import annotations

import re

from evaluator.report import CheckFailure
from seeds.tunables import evolve_block_lines

MAX_SOURCE_BYTES = 64 * 1024
# NVRTC's built-in headers; nothing else exists on every machine (the wheel ships no others).
ALLOWED_INCLUDES = frozenset({"cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"})
_FILE_DIRECTIVES = frozenset({"include", "include_next", "embed", "import"})
_DIRECTIVE_RE = re.compile(r"^\s*(?:#|%:)\s*(\w+)(.*)$")  # %: is the digraph of #
_ALLOWED_INCLUDE_RE = re.compile(r"^\s*<([\w.]+)>\s*$")
_FILE_PROBES_RE = re.compile(r"__has_(include|include_next|embed)\b")
_RAW_STRING_RE = re.compile(r'\b(u8|u|U|L)?R"')


def preprocessor_view(source: str) -> str:
    """``source`` after translation phases 2–3: splices joined, comments replaced by a space.

    String and character literals are kept as they are, so comment markers inside them do not
    hide or invent text.
    """
    text = source.replace("\\\r\n", "").replace("\\\n", "")
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(" " + "\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _file_access(source: str) -> CheckFailure | None:
    if _RAW_STRING_RE.search(source):
        return CheckFailure("include", None, None, None, "raw string literals are not allowed")
    view = preprocessor_view(source)
    if m := _FILE_PROBES_RE.search(view):
        return CheckFailure("include", None, None, None, f"{m.group(0)} is not allowed")
    for line in view.splitlines():
        directive = _DIRECTIVE_RE.match(line)
        if not directive or directive.group(1) not in _FILE_DIRECTIVES:
            continue
        allowed = _ALLOWED_INCLUDE_RE.match(directive.group(2))
        if (
            directive.group(1) != "include"
            or not allowed
            or allowed.group(1) not in ALLOWED_INCLUDES
        ):
            return CheckFailure(
                "include", None, None, None,
                f"#{directive.group(1)}{directive.group(2)} is not allowed; only "
                f"#include <h> of NVRTC's built-in {sorted(ALLOWED_INCLUDES)}",
            )  # fmt: skip
    return None


def _outside_block(source: str) -> list[str]:
    first, last = evolve_block_lines(source)
    lines = source.splitlines()
    return lines[: first - 1] + lines[last + 1 :]


def screen(source: str, seed_source: str) -> CheckFailure | None:
    """First screening failure of ``source`` against its path's seed, or None.

    Rejects: sources over 64 KiB, any way of reading a file other than a literal include of
    NVRTC's built-in headers, missing or repeated EVOLVE-BLOCK markers, and any change outside
    the EVOLVE-BLOCK.
    """
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        return CheckFailure("source_size", None, float(size), float(MAX_SOURCE_BYTES), "bytes")
    if failure := _file_access(source):
        return failure
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
