"""The one canonical text of a candidate: the bytes screened are the bytes compiled, stored and
served.

Candidate text enters the system in a few places (an LLM response or the diff applied from it,
the offline mutator, ``evaluator.bench --source``); each of them calls :func:`canonical_source`
once. Everything downstream — the screen, NVRTC, the report's sha256, the lineage store, the API,
the loader — sees that text unchanged, and the evaluator *refuses* a text that is not canonical
(``non_canonical_text``) rather than normalizing it itself: a silent rewrite inside the
evaluator would make the screened bytes differ from the stored ones.

Why line endings: NVRTC treats a lone carriage return as a blank inside a line (``#`` CR
``include`` is an include) while CR LF ends a line, and a backslash before CR LF is a line
splice; a screen and a compiler that split lines differently disagree about what is a directive
or a comment. With only LF there is one answer.
"""

from __future__ import annotations


def canonical_source(text: str) -> str:
    """``text`` with every CR LF and every lone CR turned into LF (nothing else changes)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def is_canonical(text: str) -> bool:
    """Whether ``text`` is its own canonical form (holds no carriage return)."""
    return "\r" not in text
