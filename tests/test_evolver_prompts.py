"""What the LLM actually sees: the path's semantics, the GPU's facts and the evaluator's
feedback, unmangled; each op's own shape parameters, checks and baseline (never trsm's m, n or
cuBLAS where the op has other ones)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from openevolve.prompt.sampler import PromptSampler

from evaluator.report import CheckFailure, CompileInfo, EvaluationReport
from evolver.gpu import GpuFacts
from evolver.job_config import JobConfig, LLMSection
from evolver.llm import LLMBackend, model_configs
from evolver.openevolve_config import FEATURE_DIMENSIONS, build_config
from evolver.prompts import (
    DIFF_USER_TEMPLATE,
    OP_PROMPTS,
    UnknownOpPromptError,
    envelope_words,
    op_prompt,
    system_message,
    write_templates,
)
from seeds import ops
from seeds.registry import PATHS, get_path

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


def _section(message: str, heading: str) -> str:
    """The text under ``## heading`` up to the next heading."""
    return message.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("path", "bucket", "dtype", "launch", "served", "timed"),
    [
        ("solve_tri", None, "float32", "kernevo_launch_config(n, k, b2, b3, cfg)",
         "1 <= n <= 256, 1 <= k <= 128, 1 <= b2, b3 <= 4096", "n=64 k=64 b2=8 b3=32"),
        ("band_bidiag", "n2049_16384", "float64", "kernevo_launch_config(n, bandwidth, cfg)",
         "1 <= n <= 16384, 0 <= bandwidth <= 128, bandwidth <= n - 1",
         "n=8192 bandwidth=32"),
    ],
)  # fmt: skip
def test_other_ops_are_told_their_own_shape_parameters(path, bucket, dtype, launch, served, timed):
    """The shapes, the launch configuration, the envelope and the checks in the op's own
    parameters; nothing of trsm's (m, n, m <= 64, scaled complex division)."""
    spec = get_path(path, bucket) if bucket else get_path(path)
    system = system_message(spec, dtype, H200)
    op = ops.get_op(spec.op)
    shapes = _section(system, "Shapes")
    assert f"a shape is ({', '.join(op.param_names)})" in shapes
    assert all(f"{p.name}: {p.meaning}" in shapes for p in op.params)
    assert f"This path serves {served}" in shapes and timed in shapes
    rules = _section(system, "Rules")
    assert f"`{launch}`" in rules and f"({served}" in rules
    for text in (shapes, rules):
        assert re.search(r"\bm\b", text) is None, text  # trsm's row count named nowhere
    assert "kernevo_launch_config(m, n, cfg)" not in system and "<= 64)" not in system
    assert "scaled complex division" not in system
    assert "scalar_t, real_t and the kv_*" not in system


def test_the_baseline_is_the_ops_own():
    """band_bidiag is timed against LAPACK on the host, and its score is that ratio."""
    system = system_message(get_path("band_bidiag"), "float32", None)
    assert "cuBLAS" not in system
    assert "timed against LAPACK ?gbbrd (single-threaded, on the host CPU)" in system
    assert "of LAPACK ?gbbrd (single-threaded, on the host CPU) time / candidate time" in system
    solve_tri = system_message(get_path("solve_tri"), "float32", None)
    assert "of cuBLAS's batched TRSM time / candidate time" in solve_tri
    assert "cuBLAS" not in DIFF_USER_TEMPLATE  # one template for every op: no baseline named


def test_trsm_keeps_its_rules():
    """trsm_small's checks and inputs read as they did before the prompt was per op."""
    system = system_message(get_path("trsm_small"), "complex128", H200)
    assert (
        "- You own the launch geometry: `kernevo_launch_config(m, n, cfg)` writes grid x/y/z, "
        "block x/y/z and dynamic shared-memory bytes to cfg[0..6]; the driver calls it once per "
        "shape" in system
    )
    assert (
        "- Every candidate is checked against a float64 reference on ragged and non-square "
        "shapes (1 <= m, n <= 64) with NaN-poisoned outputs, guard bands and a badly "
        "conditioned case, then timed against cuBLAS with graph replay and checked again." in system
    )
    assert "use scaled complex division" in system
    assert "the EVOLVE-BLOCK defines scalar_t, real_t and the kv_* arithmetic helpers" in system
    assert "of cuBLAS time / candidate time" in system


def test_every_registered_path_gets_a_message_with_its_timed_shapes():
    for path_id, spec in PATHS.items():
        for bucket in spec.bucket_names:
            bucketed = spec.for_bucket(bucket)
            system = system_message(bucketed, bucketed.dtypes[0], H200)
            shapes = _section(system, "Shapes")
            assert all(bucketed.shape_text(s) in shapes for s in bucketed.timed_shapes), path_id
            if spec.buckets:
                assert f"shape bucket {bucket}:" in shapes
    assert set(OP_PROMPTS) == set(ops.OPS)


def test_an_op_without_prompt_text_is_refused():
    with pytest.raises(UnknownOpPromptError, match="no prompt text for op 'gemm'.*trsm"):
        op_prompt("gemm")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("trsm_small", "1 <= m, n <= 64"),
        ("trsm_small_z64", "m = 64, 1 <= n <= 64"),
        ("trsm_blocked", "128 <= m <= 16384, 1 <= n <= 16384"),
        ("band_bidiag", "1 <= n <= 16384, 0 <= bandwidth <= 128, bandwidth <= n - 1"),
    ],
)
def test_envelope_words(path, expected):
    spec = get_path(path)
    assert envelope_words(spec.envelope, ops.get_op(spec.op)) == expected
