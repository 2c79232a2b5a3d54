"""One red-team entry: a candidate source for one path and the check that must refuse it.

A candidate is its path's current seed with only the text between ``// EVOLVE-BLOCK-START`` and
``// EVOLVE-BLOCK-END`` replaced (:func:`with_block`), so it passes the screen and compiles
against the seed's fixed prelude, as an LLM's candidate would.

Stages (:data:`STAGES`), where the refusal happens in the current pipeline: ``compile`` (the
cubin check, before anything runs: no GPU needed), ``pipeline`` (``Evaluator.evaluate``: quick
check, verification, timing, re-check), ``champion`` (``evaluator.champion.verify_champion``:
held-out shapes, bit-identical repeats, compute-sanitizer) or ``new_best``
(``evaluator.new_best.gate_new_best``: the memcheck a passing candidate runs before it becomes
the job's best, as ``evaluator.openevolve_entry`` calls it).
"""

from __future__ import annotations

from dataclasses import dataclass

from seeds.registry import get_path

START = "// EVOLVE-BLOCK-START\n"
END = "// EVOLVE-BLOCK-END"
STAGES = ("compile", "pipeline", "champion", "new_best")


@dataclass(frozen=True)
class Entry:
    """One adversarial candidate and its expected refusal.

    ``block``: the EVOLVE-BLOCK's new text; ``path``: the path whose seed it goes into;
    ``dtype``: the job dtype it is evaluated in; ``compile_dtypes``: every dtype it is written
    for (NVRTC-compiled in each by the CPU tests; empty: ``dtype`` only);
    ``status``/``check``: the report's status and ``failure.check``; ``stage``: one of
    :data:`STAGES`; ``kind``: the item of an issue's list of cheats it stands for (None for the
    extra entries); ``detail``: substrings the failure's detail must contain; ``shape``: the
    (m, n) the failure must name, where that is certain (None: any, or none);
    ``quick_timeout_s``: the quick stage's time limit to run it under (a hang), or None for the
    pipeline's own; ``mechanism``: why it would cheat or fail, and which check sees it and why.
    """

    name: str
    kind: str | None
    dtype: str
    block: str
    status: str
    check: str
    stage: str
    mechanism: str
    detail: tuple[str, ...] = ()
    shape: tuple[int, int] | None = None
    quick_timeout_s: float | None = None
    path: str = "trsm_small"
    compile_dtypes: tuple[str, ...] = ()

    def source(self) -> str:
        """The current seed of :attr:`path` with its EVOLVE-BLOCK replaced by :attr:`block`."""
        return with_block(self.block, self.path)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the entry is written for: :attr:`compile_dtypes`, else :attr:`dtype`."""
        return self.compile_dtypes or (self.dtype,)


def with_block(block: str, path_id: str = "trsm_small") -> str:
    """The current seed of ``path_id`` with the text of its EVOLVE-BLOCK replaced by ``block``.

    Raises:
        ValueError: the seed lacks the two markers in order.
        UnknownPathError: no such path.
    """
    seed = get_path(path_id).seed_source()
    start, end = seed.find(START), seed.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the {path_id} seed has no EVOLVE-BLOCK")
    return seed[: start + len(START)] + block + seed[end:]


def patched(block: str, *edits: tuple[str, str]) -> str:
    """``block`` with each ``(old, new)`` edit applied in order, each ``old`` occurring exactly
    once in the text it is applied to (so a fault lands where it was meant to, or the corpus
    fails to import).

    Raises:
        ValueError: an ``old`` text that occurs zero or several times.
    """
    for old, new in edits:
        count = block.count(old)
        if count != 1:
            raise ValueError(f"{count} occurrences of the text to replace: {old[:60]!r}")
        block = block.replace(old, new)
    return block
