"""The built-in offline mutator: real SEARCH/REPLACE diffs over declared tunables, no LLM.

Plugged into OpenEvolve through ``LLMModelConfig.init_client``. It reads the parent program from
the user prompt OpenEvolve sends (the ``# Current Program`` fenced block of the diff template),
parses its ``// tune:`` declarations with :func:`seeds.tunables.parse_tunables`, and answers with
one SEARCH/REPLACE block per moved tunable, in OpenEvolve's diff format. Each answer moves one or
two tunables to other declared values.

What is seeded, and what is not: the moves are drawn from a generator seeded by the request's
``seed``, which OpenEvolve derives from the job's ``seed`` and the iteration number, so the same
parent at the same iteration of a job with the same seed always gets the same diff. Which parent
(and which inspirations) an iteration is given is *not* reproducible: OpenEvolve samples them
when it submits the iteration, from a population that depends on which earlier iterations had
finished by then (two are in flight at a time) and, on a GPU, on measured timings that vary from
run to run. Two runs of the same job therefore explore different lineages; each mutation, given
its parent and iteration, is reproducible, a whole job is not.
"""

from __future__ import annotations

import random
from typing import Any

from openevolve.llm.base import LLMInterface

from seeds.canonical import canonical_source
from seeds.tunables import Tunable, parse_tunables

OFFLINE_BACKEND = "offline"
OFFLINE_MODEL = "offline-mutator"

# The heading and fence our diff template (and OpenEvolve's default one) put around the parent.
CURRENT_PROGRAM_HEADING = "# Current Program"
_FENCE = "```"


def extract_current_program(prompt: str) -> str | None:
    """The parent program's source from an OpenEvolve diff-evolution user prompt.

    The template renders ``# Current Program`` then a fenced block holding the program verbatim;
    the history sections above it use other headings, so the last such heading is the parent.
    Returns ``None`` when the prompt has no such block.
    """
    heading = prompt.rfind(f"\n{CURRENT_PROGRAM_HEADING}\n")
    if heading < 0:
        if not prompt.startswith(f"{CURRENT_PROGRAM_HEADING}\n"):
            return None
        heading = -1
    fence_open = prompt.find(_FENCE, heading + 1)
    if fence_open < 0:
        return None
    body_start = prompt.find("\n", fence_open)
    if body_start < 0:
        return None
    fence_close = prompt.find(f"\n{_FENCE}", body_start + 1)
    if fence_close < 0:
        return None
    return prompt[body_start + 1 : fence_close]


def movable_tunables(source: str) -> list[Tunable]:
    """Tunables of ``source`` that have at least one other declared value.

    Raises:
        ValueError: the EVOLVE-BLOCK markers are missing or malformed.
    """
    return [t for t in parse_tunables(source) if any(c != t.value for c in t.choices)]


def propose_diff(source: str, rng: random.Random, *, max_moves: int = 2) -> str:
    """SEARCH/REPLACE blocks moving 1 … ``max_moves`` tunables of ``source`` to other declared
    values (each SEARCH is the tunable's whole declaring line, so it matches exactly once).

    Raises:
        ValueError: no EVOLVE-BLOCK, or no tunable with a second declared value.
    """
    candidates = movable_tunables(source)
    if not candidates:
        raise ValueError("no tunable with another declared value inside the EVOLVE-BLOCK")
    count = rng.randint(1, min(max_moves, len(candidates)))
    moved = sorted(rng.sample(candidates, count), key=lambda t: t.line_no)
    blocks = []
    for tunable in moved:
        value = rng.choice([c for c in tunable.choices if c != tunable.value])
        blocks.append(
            f"<<<<<<< SEARCH\n{tunable.line}\n=======\n{tunable.with_value(value)}\n>>>>>>> REPLACE"
        )
    return "\n\n".join(blocks)


class OfflineMutator(LLMInterface):
    """An ``LLMInterface`` that answers every diff-evolution prompt with a tunable move."""

    def __init__(self, seed: int | None) -> None:
        self._fallback = random.Random(seed)
        self.model = OFFLINE_MODEL
        # OpenEvolve reads token usage from here; nothing is spent offline.
        self.last_usage: dict[str, Any] | None = None

    def answer(self, prompt: str, seed: int | None) -> str:
        """The response to one user prompt: an explanation line and the diff blocks, or a line
        saying why no diff can be proposed (OpenEvolve then records a failed iteration)."""
        source = extract_current_program(prompt)
        if source is None:
            return "offline mutator: the prompt holds no '# Current Program' block; no change."
        rng = random.Random(seed) if seed is not None else self._fallback
        try:
            diff = propose_diff(source, rng)
        except ValueError as error:
            return f"offline mutator: {error}; no change."
        # Canonical like every answer that enters the job (seeds.canonical): the parent is.
        return canonical_source(f"Move declared tunables to other declared values.\n\n{diff}\n")

    async def generate(self, prompt: str, **kwargs: Any) -> str:
        return self.answer(prompt, kwargs.get("seed"))

    async def generate_with_context(
        self, system_message: str, messages: list[dict[str, str]], **kwargs: Any
    ) -> str:
        user = [m.get("content", "") for m in messages if m.get("role") == "user"]
        return self.answer(user[-1] if user else "", kwargs.get("seed"))


def make_offline_mutator(model_cfg: Any) -> OfflineMutator:
    """OpenEvolve's ``init_client`` factory. Module-level so it pickles by reference: the
    process pool spawns its workers (``max_tasks_per_child``) and ships the config to them."""
    return OfflineMutator(getattr(model_cfg, "random_seed", None))
