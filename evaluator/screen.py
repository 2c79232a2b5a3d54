"""Cheap rejections before compiling: size, file access, and the EVOLVE-BLOCK contract.

NVRTC resolves `#include` against the host's file system, so an include the screen misses can put
any readable file (``/proc/self/environ`` included) into the compile log that the LLM and the
service see. No candidate needs a header (the seed's prelude brings its own types), so the screen
refuses every way of naming a file to the preprocessor, judged on what the preprocessor sees:

* the source is tokenized after joining line splices — identifiers, preprocessing numbers (with
  C++14 digit separators), string and character literals, comments — so comment markers inside
  literals hide nothing and a `'` inside a number opens no literal;
* lines end only at newline (form feed and vertical tab are blanks to the compiler);
* refused: any `include`, `include_next`, `embed` or `import` directive (also behind `%:` or a
  comment), any identifier starting with `__has` (the `__has_include` family), the `##` paste
  operator (which could assemble one), and raw string literals (not modelled by the tokenizer).
"""

from __future__ import annotations

import re

from evaluator.report import CheckFailure
from seeds.tunables import evolve_block_lines

MAX_SOURCE_BYTES = 64 * 1024
_FILE_DIRECTIVES = frozenset({"include", "include_next", "embed", "import"})
_DIRECTIVE_RE = re.compile(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*(\w+)(.*)$")  # %: is the digraph of #
_IDENTIFIER_RE = re.compile(r"[A-Za-z_]\w*")
# A preprocessing number: [.]digit then digits, letters, '_', '.', exponent signs and C++14
# digit separators ('x where x is a digit or letter).
_PP_NUMBER_RE = re.compile(r"\.?\d(?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_RAW_PREFIXES = frozenset({"R", "u8R", "uR", "UR", "LR"})


def _outside_block(source: str) -> list[str]:
    first, last = evolve_block_lines(source)
    lines = source.splitlines()
    return lines[: first - 1] + lines[last + 1 :]


def _file_failure(detail: str) -> CheckFailure:
    return CheckFailure("include", None, None, None, detail + " (no candidate may name a file)")


def preprocessor_view(source: str) -> str | CheckFailure:
    """``source`` as the preprocessor tokenizes it, comments replaced by a space (newlines kept);
    or the failure when it holds a raw string literal, which this tokenizer does not model."""
    text = source.replace("\\\r\n", "").replace("\\\n", "")
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isalpha() or c == "_":
            word = _IDENTIFIER_RE.match(text, i).group(0)  # type: ignore[union-attr]
            if word in _RAW_PREFIXES and text.startswith('"', i + len(word)):
                return _file_failure("raw string literals are not allowed")
            out.append(word)
            i += len(word)
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            number = _PP_NUMBER_RE.match(text, i).group(0)  # type: ignore[union-attr]
            out.append(number)
            i += len(number)
        elif c in "\"'":
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
    view = preprocessor_view(source)
    if isinstance(view, CheckFailure):
        return view
    for line in view.split("\n"):
        directive = _DIRECTIVE_RE.match(line)
        if directive and directive.group(1) in _FILE_DIRECTIVES:
            return _file_failure(f"#{directive.group(1)}{directive.group(2)} is not allowed")
    code = re.sub(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", '""', view)
    if m := re.search(r"\b__has\w*", code):
        return _file_failure(f"{m.group(0)} is not allowed")
    if "##" in code or "%:%:" in code:
        return _file_failure("the ## token-paste operator is not allowed")
    return None


def screen(source: str, seed_source: str) -> CheckFailure | None:
    """First screening failure of ``source`` against its path's seed, or None.

    Rejects: sources over 64 KiB, any way of naming a file to the preprocessor, missing or
    repeated EVOLVE-BLOCK markers, and any change outside the EVOLVE-BLOCK.
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
