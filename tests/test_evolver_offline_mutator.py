"""The offline mutator answers OpenEvolve's real prompt with diffs OpenEvolve itself applies,
moving only declared tunables, only to declared values."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from openevolve.config import LLMModelConfig, PromptConfig
from openevolve.llm.ensemble import LLMEnsemble
from openevolve.prompt.sampler import PromptSampler
from openevolve.utils.code_utils import apply_diff_blocks, enforce_evolve_blocks, extract_diffs

from evolver.offline_mutator import (
    OFFLINE_MODEL,
    OfflineMutator,
    extract_current_program,
    make_offline_mutator,
    propose_diff,
)
from evolver.prompts import write_templates
from seeds.registry import get_path
from seeds.tunables import parse_tunables

SEED = get_path("trsm_small").seed_source()


def _prompt(tmp_path: Path, program: str) -> str:
    """The user prompt OpenEvolve builds for ``program`` with our diff template."""
    sampler = PromptSampler(
        PromptConfig(template_dir=str(write_templates(tmp_path / "prompts")), system_message="s")
    )
    other = {"id": "x", "code": program.replace("EVOLVE", "EVOLVED"), "metrics": {}}
    prompt = sampler.build_prompt(
        current_program=program,
        parent_program=program,
        program_metrics={"combined_score": 0.5, "registers": 40.0, "speedup_64": 0.9},
        previous_programs=[other],
        top_programs=[other],
        inspirations=[other],
        language="cuda",
        diff_based_evolution=True,
        program_artifacts={"status": "ok"},
        feature_dimensions=["registers", "speedup_64"],
    )
    return prompt["user"]


def _apply(parent: str, answer: str) -> str:
    blocks = extract_diffs(answer)
    child, applied = apply_diff_blocks(parent, blocks)
    assert applied == len(blocks) >= 1
    return child


def test_the_parent_is_read_verbatim_from_the_rendered_prompt(tmp_path: Path) -> None:
    assert extract_current_program(_prompt(tmp_path, SEED)) == SEED


@pytest.mark.parametrize("seed", range(40))
def test_answers_apply_and_move_only_declared_tunables_to_declared_values(
    tmp_path: Path, seed: int
) -> None:
    answer = OfflineMutator(None).answer(_prompt(tmp_path, SEED), seed)
    child = _apply(SEED, answer)
    assert enforce_evolve_blocks(SEED, child) == child  # nothing outside the EVOLVE-BLOCK moved
    before = {t.name: t for t in parse_tunables(SEED)}
    after = {t.name: t for t in parse_tunables(child)}
    assert before.keys() == after.keys()
    moved = [name for name in before if before[name].value != after[name].value]
    assert 1 <= len(moved) <= 2
    for name in moved:
        assert after[name].value in before[name].choices
        assert after[name].choices == before[name].choices
    pairs = enumerate(zip(SEED.splitlines(), child.splitlines(), strict=True))
    changed = {i for i, (a, b) in pairs if a != b}
    assert changed == {before[name].line_no for name in moved}


def test_the_same_request_seed_gives_the_same_answer(tmp_path: Path) -> None:
    prompt = _prompt(tmp_path, SEED)
    assert OfflineMutator(1).answer(prompt, 7) == OfflineMutator(2).answer(prompt, 7)
    answers = {OfflineMutator(None).answer(prompt, s) for s in range(10)}
    assert len(answers) > 1


def test_successive_mutations_keep_applying(tmp_path: Path) -> None:
    program = SEED
    rng = random.Random(3)
    for _ in range(10):
        program = _apply(program, propose_diff(program, rng))
    assert {t.name for t in parse_tunables(program)} == {t.name for t in parse_tunables(SEED)}


def test_no_tunables_or_no_program_means_no_diff(tmp_path: Path) -> None:
    fixed = SEED.replace("// tune:", "// was tunable:")
    assert extract_diffs(OfflineMutator(0).answer(_prompt(tmp_path, fixed), 1)) == []
    assert extract_diffs(OfflineMutator(0).answer("no program here", 1)) == []


def test_it_plugs_into_openevolves_ensemble_through_init_client(tmp_path: Path) -> None:
    config = LLMModelConfig(name=OFFLINE_MODEL, init_client=make_offline_mutator, random_seed=5)
    ensemble = LLMEnsemble([config])
    ensemble.reseed(12)  # what OpenEvolve's worker does before each iteration
    answer = asyncio.run(
        ensemble.generate_with_context(
            system_message="s", messages=[{"role": "user", "content": _prompt(tmp_path, SEED)}]
        )
    )
    assert ensemble.last_model == OFFLINE_MODEL
    _apply(SEED, answer)
