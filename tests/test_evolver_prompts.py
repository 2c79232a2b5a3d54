"""What the LLM actually sees: the path's semantics, the GPU's facts and the evaluator's
feedback, unmangled."""

from __future__ import annotations

from pathlib import Path

from openevolve.prompt.sampler import PromptSampler

from evaluator.report import CheckFailure, CompileInfo, EvaluationReport
from evolver.gpu import GpuFacts
from evolver.job_config import JobConfig, LLMSection
from evolver.llm import LLMBackend, model_configs
from evolver.openevolve_config import FEATURE_DIMENSIONS, build_config
from evolver.prompts import system_message, write_templates
from seeds.registry import get_path

H200 = GpuFacts(
    index=0,
    name="NVIDIA H200",
    key="nvidia-h200",
    arch="sm_90",
    sm_count=132,
    shared_per_block_optin=232448,
    shared_per_sm=233472,
    registers_per_block=65536,
    l2_bytes=62914560,
    driver_version=13000,
    runtime_version=13000,
)
MANGLED = "_ZN6kernel17trsm_small_kernelIdLi64ELi4EEEvPKT_PS1_iiii"  # 40+ alphanumerics


def _prompt(tmp_path: Path, gpu: GpuFacts | None) -> dict[str, str]:
    spec = get_path("trsm_small")
    config = build_config(
        JobConfig(path="trsm_small", dtype="complex128", compile_only=gpu is None),
        models=model_configs(LLMBackend("offline", "offline-mutator"), LLMSection()),
        system_message=system_message(spec, "complex128", gpu),
        template_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
    )
    write_templates(tmp_path / "prompts")
    report = EvaluationReport("trsm_small", "complex128").fail(
        "compile_error", CheckFailure("compile", detail=f"error in {MANGLED}")
    )
    report.compile = CompileInfo(
        ok=False,
        log=f"ptxas error: undefined reference to {MANGLED}",
        options=("-arch=sm_90",),
        arch="sm_90",
        nvrtc_version="13.0",
        seconds=0.1,
    )
    return PromptSampler(config.prompt).build_prompt(
        current_program=spec.seed_source(),
        parent_program=spec.seed_source(),
        program_metrics=report.metrics(),
        language=config.language,
        diff_based_evolution=True,
        program_artifacts=report.artifacts(),
        feature_dimensions=list(FEATURE_DIMENSIONS),
    )


def test_system_message_carries_semantics_and_gpu_facts(tmp_path: Path) -> None:
    prompt = _prompt(tmp_path, H200)
    system = prompt["system"]
    assert get_path("trsm_small").semantics in system
    assert "NVIDIA H200 (sm_90" in system and "132 SMs" in system
    assert "227 KB shared memory per block" in system
    assert "-DKERNEVO_DTYPE=3" in system


def test_without_a_gpu_the_system_message_says_so(tmp_path: Path) -> None:
    assert "No GPU is attached" in _prompt(tmp_path, None)["system"]


def test_evaluator_feedback_reaches_the_user_prompt_unredacted(tmp_path: Path) -> None:
    user = _prompt(tmp_path, H200)["user"]
    assert "## Last Execution Output" in user
    assert "### compile_log" in user and "### first_failure" in user
    assert MANGLED in user and "REDACTED" not in user
    assert "```cuda\n// trsm_small:" in user
    assert "registers=" in user and "speedup_64=" in user
