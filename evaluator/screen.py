"""Cheap rejections before compiling: size, canonical text, what the preprocessor would do with
the source, and the EVOLVE-BLOCK contract.

NVRTC resolves `#include` against the host's file system, so an include the screen misses can put
any readable file into the compile log that the LLM and the service see. No candidate needs a
header (the seed's prelude brings its own types), so the screen refuses every way of naming a
file to the preprocessor. It judges the source on one token stream, built as NVRTC's preprocessor
builds it (checked against NVRTC 13 by ``tests/test_evaluator_screen_nvrtc.py``):

* the text must be canonical (LF line endings only, ``seeds.canonical``): NVRTC reads a lone CR as
  a blank inside a line (``#`` CR ``include`` is an include) and backslash CR LF as a splice, so
  a text with CR has two readings; ASCII control characters other than tab, LF, FF and VT are
  refused anywhere (NUL cannot be stored in PostgreSQL text either);
* backslash LF splices are joined first; a backslash left in code, outside comments and
  literals (a universal-character-name, a backslash before blanks and a newline, which NVRTC
  does not splice but other compilers do) is refused;
* comments are blanks (a block comment spanning lines also counts as a line start, so a ``#``
  after it is judged as a directive under either reading); string and character literals must
  end on their line; preprocessing numbers keep C++14 digit separators (``0x1'0`` is one number,
  as NVRTC reads it in ``#if``); form feed, vertical tab and CR are blanks; trigraphs are
  disabled in NVRTC's C++17 mode (it warns and ignores them), so ``??=`` and ``??/`` are plain
  characters here too;
* any character above ASCII outside comments and literals is refused, naming it and its line
  (NVRTC would fail on it with "unrecognized token" anyway);
* a directive is a ``#`` or ``%:`` token first on its line; only ``define undef if ifdef ifndef
  elif elifdef elifndef else endif error warning pragma`` are allowed (``pragma`` as below);
  ``include``, ``include_next``, ``embed`` and ``import`` after a ``#`` are refused wherever
  they stand; any identifier starting with ``__has`` (``__has_include``), the ``##`` paste
  operator (which could assemble one) and raw string literals (whose delimiters this tokenizer
  does not model) are refused;
* ``pragma`` is allowed only as ``unroll``/``nounroll`` followed by at most a count: one number,
  one name, or one parenthesised group without literals (``#pragma unroll(4) include "x"`` is
  refused; NVRTC only warns about such extra text). ``_Pragma`` is held to the same rule in the
  two forms the screen can read: ``_Pragma("…")`` with a plain string literal (its text
  destringized and judged as a ``#pragma`` line) and ``_Pragma(M(…))``, a macro invocation
  whose argument tokens are judged (the seed's own ``KV_STR(unroll n)``, which stringizes
  them). Every other ``_Pragma`` is refused: an encoding prefix (``L"…"``, ``u8"…"``: NVRTC
  executes those), a parenthesised or non-literal argument (``_Pragma(("…"))``, a macro
  parameter, ``#x``), a ``_Pragma`` not followed by ``(`` (a macro naming it could call it
  later). What stays out of reach is a macro redefined to ignore its argument (``#define M(x)
  "message(…)"`` then ``_Pragma(M(unroll))``); no pragma names a file to NVRTC (``GCC
  dependency`` and ``include_alias``, the file-naming pragmas of other compilers, are
  "unrecognized #pragma" there), so the allow-list is hygiene, not the line of defence.

Each refusal is a :class:`CheckFailure` naming the check (``non_canonical_text``,
``control_character``, ``non_ascii``, ``stray_backslash``, ``unterminated_literal``,
``unterminated_comment``, ``raw_string``, ``include``, ``directive``, ``pragma``,
``token_paste``) and the line.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from evaluator.report import CheckFailure
from seeds.canonical import is_canonical
from seeds.tunables import evolve_block_lines

MAX_SOURCE_BYTES = 64 * 1024
FILE_DIRECTIVES = frozenset({"include", "include_next", "embed", "import"})
ALLOWED_DIRECTIVES = frozenset(
    {"define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
     "error", "warning", "pragma"}
)  # fmt: skip
ALLOWED_PRAGMAS = frozenset({"unroll", "nounroll"})
_RAW_PREFIXES = frozenset({"R", "u8R", "uR", "UR", "LR"})
_ENCODING_PREFIXES = frozenset({"L", "u8", "u", "U"})
_IDENTIFIER_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
# A preprocessing number: [.]digit then digits, letters, '_', '.', exponent signs and C++14
# digit separators ('x where x is a digit or letter).
_PP_NUMBER_RE = re.compile(r"\.?\d(?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_BLANKS = " \t\f\v\r"
# ASCII controls but tab, LF, VT, FF and CR (CR is refused as non-canonical before this).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_HASHES = ("%:%:", "##", "%:", "#")  # longest first: maximal munch


@dataclass(frozen=True)
class Token:
    """One preprocessing token: ``kind`` is ``identifier``, ``number``, ``literal``, ``punct``
    or ``newline``; ``line`` is 1-based in the original (unspliced) text; ``line_start`` says
    no other token precedes it on its line (a block comment spanning lines counts as a break)."""

    kind: str
    text: str
    line: int
    line_start: bool


class _Refusal(Exception):
    """Carries a screen failure out of the tokenizer."""

    def __init__(self, failure: CheckFailure) -> None:
        self.failure = failure


def _fail(check: str, line: int, detail: str) -> _Refusal:
    return _Refusal(CheckFailure(check, None, None, None, f"line {line}: {detail}"))


class _Spliced:
    """The text with backslash-LF splices removed, and a map back to original line numbers."""

    def __init__(self, source: str) -> None:
        pieces = source.split("\\\n")
        self.text = "".join(pieces)
        self._splice_at: list[int] = []  # positions in ``text`` where a splice was removed
        pos = 0
        for piece in pieces[:-1]:
            pos += len(piece)
            self._splice_at.append(pos)
        self._newline_at = [i for i, c in enumerate(self.text) if c == "\n"]

    def line(self, pos: int) -> int:
        """1-based original line of position ``pos`` of the spliced text."""
        return (
            1
            + bisect.bisect_left(self._newline_at, pos)
            + bisect.bisect_right(self._splice_at, pos)
        )


def tokenize(source: str) -> list[Token] | CheckFailure:
    """``source`` as NVRTC's preprocessor tokenizes it (comments and blanks dropped, newlines
    kept as tokens); or the first failure when it holds something this screen refuses to model
    (see the module docstring)."""
    try:
        return _tokenize(_Spliced(source))
    except _Refusal as refusal:
        return refusal.failure


def _tokenize(sp: _Spliced) -> list[Token]:
    text, n = sp.text, len(sp.text)
    tokens: list[Token] = []
    at_line_start = True
    i = 0

    def emit(kind: str, value: str, pos: int) -> None:
        nonlocal at_line_start
        tokens.append(Token(kind, value, sp.line(pos), at_line_start))
        at_line_start = kind == "newline"

    while i < n:
        c = text[i]
        if c in _BLANKS:
            i += 1
        elif c == "\n":
            emit("newline", c, i)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise _fail("unterminated_comment", sp.line(i), "a /* comment is never closed")
            if "\n" in text[i:j]:
                at_line_start = True  # under either reading the next token may start a line
            i = j + 2
        elif c.isascii() and (c.isalpha() or c in "_$"):
            word = _IDENTIFIER_RE.match(text, i).group(0)  # type: ignore[union-attr]
            if word in _RAW_PREFIXES and text.startswith('"', i + len(word)):
                raise _fail("raw_string", sp.line(i), "raw string literals are not allowed")
            emit("identifier", word, i)
            i += len(word)
        elif c.isascii() and (c.isdigit() or (c == "." and text[i + 1 : i + 2].isdigit())):
            number = _PP_NUMBER_RE.match(text, i).group(0)  # type: ignore[union-attr]
            emit("number", number, i)
            i += len(number)
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != c:
                kind = "string" if c == '"' else "character"
                raise _fail("unterminated_literal", sp.line(i), f"a {kind} literal is not closed")
            emit("literal", text[i : j + 1], i)
            i = j + 1
        elif c == "\\":
            raise _fail(
                "stray_backslash", sp.line(i),
                "a backslash outside a literal is allowed only directly before a newline",
            )  # fmt: skip
        elif not c.isascii():
            raise _fail(
                "non_ascii", sp.line(i),
                f"character {c!r} (U+{ord(c):04X}) outside a comment or literal is not allowed",
            )  # fmt: skip
        else:
            punct = next((h for h in _HASHES if text.startswith(h, i)), c)
            emit("punct", punct, i)
            i += len(punct)
    return tokens


def _control_character(source: str) -> CheckFailure | None:
    if m := _CONTROL_RE.search(source):
        line = source.count("\n", 0, m.start()) + 1
        return CheckFailure(
            "control_character", None, None, None,
            f"line {line}: control character U+{ord(m.group(0)):04X} is not allowed",
        )  # fmt: skip
    return None


def _token_failure(tokens: list[Token]) -> CheckFailure | None:
    """The first refused directive, pragma, paste or ``__has*`` identifier in ``tokens``."""
    for k, tok in enumerate(tokens):
        nxt = tokens[k + 1] if k + 1 < len(tokens) else None
        if tok.kind == "punct" and tok.text in ("##", "%:%:"):
            return _at(tok, "token_paste", "the ## token-paste operator is not allowed")
        if tok.kind == "identifier" and tok.text.startswith("__has"):
            return _at(tok, "include", f"{tok.text} is not allowed (no candidate may name a file)")
        if (
            tok.kind == "identifier"
            and tok.text == "_Pragma"
            and (f := _pragma_operator(tokens, k))
        ):
            return f
        if tok.kind != "punct" or tok.text not in ("#", "%:"):
            continue
        name = nxt.text if nxt is not None and nxt.kind == "identifier" else None
        if name in FILE_DIRECTIVES:
            return _at(tok, "include", f"#{name} is not allowed (no candidate may name a file)")
        if not tok.line_start or nxt is None or nxt.kind == "newline":
            continue  # stringizing inside a macro body, or the null directive
        if name not in ALLOWED_DIRECTIVES:
            return _at(tok, "directive", f"#{nxt.text} is not an allowed directive")
        if name == "pragma":
            end = next((j for j in range(k + 2, len(tokens)) if tokens[j].kind == "newline"), None)
            if failure := _pragma(tok, tokens[k + 2 : end]):
                return failure
    return None


def _closing(tokens: list[Token], k: int) -> int | None:
    """Index of the ``)`` matching the ``(`` at ``tokens[k]``, or None if it is never closed."""
    depth = 0
    for j in range(k, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[j].text, 0) if tokens[j].kind == "punct" else 0
        if depth == 0:
            return j
    return None


def _pragma_operator(tokens: list[Token], k: int) -> CheckFailure | None:
    """A failure unless the ``_Pragma`` at ``tokens[k]`` has one of the two judgeable forms:
    ``_Pragma("…")`` with a plain string literal, whose destringized text is judged as a
    ``#pragma`` line; or ``_Pragma(M(…))``, a macro invocation whose own argument tokens are
    judged (the seed's ``KV_STR(unroll n)``: the stringized text is those tokens). Anything else
    (an encoding prefix, ``_Pragma(("…"))``, a macro parameter or object-like macro, a bare
    ``_Pragma`` that a macro could call later) could carry any pragma past the allow-list."""
    tok = tokens[k]
    at = tokens[k + 1 : k + 5] + [Token("newline", "\n", tok.line, True)] * 4
    if at[0].text != "(":
        return _at(tok, "pragma", "_Pragma must be followed directly by its ( argument )")
    arg, after = at[1], at[2]
    if arg.kind == "literal" and arg.text.startswith('"') and after.text == ")":
        content = arg.text[1:-1].replace('\\"', '"').replace("\\\\", "\\")  # C17 6.10.9
        words = tokenize(content)
        if isinstance(words, CheckFailure):
            return _at(tok, "pragma", f"_Pragma({arg.text}) is not a pragma this screen can read")
        return _pragma(tok, words)
    if arg.text in _ENCODING_PREFIXES and after.kind == "literal":
        return _at(tok, "pragma", f'_Pragma({arg.text}"…"): encoding prefixes are not allowed')
    if arg.kind == "identifier" and after.text == "(":
        close = _closing(tokens, k + 3)
        if close is not None and close + 1 < len(tokens) and tokens[close + 1].text == ")":
            words = [t for t in tokens[k + 4 : close] if t.kind != "newline"]
            return _pragma(tok, words, f"_Pragma({arg.text}(…)) builds pragma")
    return _at(
        tok, "pragma",
        "_Pragma takes a string literal or a macro invocation such as KV_STR(unroll n)",
    )  # fmt: skip


def _pragma(tok: Token, words: list[Token], how: str = "pragma") -> CheckFailure | None:
    """A failure unless the pragma's tokens ``words`` are an allow-listed name and at most a
    count: one number, one name, or one parenthesised group without literals (``how`` opens the
    detail). NVRTC 13 reads the count as an integral constant expression (``4``, ``N``,
    ``(N + 1)``) and only warns (20170, "extra characters in the unroll pragma") on text after
    it, so the screen refuses that text itself rather than relying on the warning; a count
    written without parentheses as ``N + 1`` is refused too, for a simple rule."""
    what = words[0].text if words and words[0].kind == "identifier" else ""
    text = " ".join(w.text for w in words)
    if what not in ALLOWED_PRAGMAS:
        allowed = ", ".join(sorted(ALLOWED_PRAGMAS))
        return _at(tok, "pragma", f"{how} {text!r}, which is not allowed (only {allowed})")
    count = words[1:]
    if not count or (len(count) == 1 and count[0].kind in ("number", "identifier")):
        return None
    if (
        count[0].text == "("
        and _closing(count, 0) == len(count) - 1
        and all(t.kind != "literal" for t in count)
    ):
        return None
    return _at(
        tok, "pragma",
        f"{how} {text!r}: only a count (a number, a name or a parenthesised constant "
        f"expression) may follow {what}",
    )  # fmt: skip


def _at(tok: Token, check: str, detail: str) -> CheckFailure:
    return CheckFailure(check, None, None, None, f"line {tok.line}: {detail}")


def preprocessor_failure(source: str) -> CheckFailure | None:
    """The first thing in ``source`` the preprocessor must not see (module docstring), or None.
    Applies to the whole file: the fixed prelude passes, being the seed's own."""
    if not is_canonical(source):
        line = source[: source.index("\r")].count("\n") + 1
        return CheckFailure(
            "non_canonical_text", None, None, None,
            f"line {line}: carriage return; candidate text must use LF line endings only "
            "(seeds.canonical.canonical_source)",
        )  # fmt: skip
    if failure := _control_character(source):
        return failure
    tokens = tokenize(source)
    if isinstance(tokens, CheckFailure):
        return tokens
    return _token_failure(tokens)


def _outside_block(source: str) -> list[str]:
    first, last = evolve_block_lines(source)
    lines = source.splitlines()  # as evolve_block_lines counts them
    return lines[: first - 1] + lines[last + 1 :]


def screen(source: str, seed_source: str) -> CheckFailure | None:
    """First screening failure of ``source`` against its path's seed, or None.

    Rejects, in this order: sources over 64 KiB, a non-canonical text, anything the preprocessor
    must not see (:func:`preprocessor_failure`), missing or repeated EVOLVE-BLOCK markers, and
    any change outside the EVOLVE-BLOCK.
    """
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        return CheckFailure("source_size", None, float(size), float(MAX_SOURCE_BYTES), "bytes")
    if failure := preprocessor_failure(source):
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
