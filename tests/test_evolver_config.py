"""The job configuration refuses what it does not know, and the OpenEvolve config it builds
avoids the pitfalls DESIGN.md lists (language, artifacts, timeouts, feature dimensions)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

from evaluator.pipeline import FULL_TIMEOUT_S, QUICK_TIMEOUT_S
from evaluator.report import CheckFailure, EvaluationReport
from evolver.errors import JobConfigError
from evolver.job_config import JobConfig, LLMSection, load_job_config, validate_job_config
from evolver.llm import LLMBackend, make_canonical_openai_client, model_configs
from evolver.offline_mutator import make_offline_mutator
from evolver.openevolve_config import FEATURE_DIMENSIONS, build_config


def _error(data: dict, tmp_path: Path | None = None) -> str:
    with pytest.raises(JobConfigError) as caught:
        validate_job_config(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_misspelt_top_level_key_is_one_line_with_a_suggestion() -> None:
    message = _error({"path": "trsm_small", "dtype": "float64", "iteratons": 10})
    assert message == "job config: unknown key 'iteratons'; did you mean 'iterations'?"


def test_misspelt_llm_key_names_the_section() -> None:
    message = _error({"path": "trsm_small", "dtype": "float64", "llm": {"modle": "x"}})
    assert "unknown key 'llm.modle'" in message
    assert "did you mean 'model'?" in message


def test_misspelt_key_in_a_yaml_file_names_the_file(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("path: trsm_small\ndtype: float64\ncheckpoint_intervall: 3\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_config(job_file, {})
    assert str(caught.value) == (
        f"{job_file}: unknown key 'checkpoint_intervall'; did you mean 'checkpoint_interval'?"
    )


def test_unknown_path_and_dtype_and_range_errors_are_one_line() -> None:
    assert "unknown path 'trsm_huge'" in _error({"path": "trsm_huge", "dtype": "float64"})
    assert "unknown dtype 'float16'" in _error({"path": "trsm_small", "dtype": "float16"})
    message = _error({"path": "trsm_small", "dtype": "float64", "iterations": 0})
    assert message.startswith("job config: iterations:")
    assert _error({"dtype": "float64"}) == "job config: missing required key 'path'"


def test_overrides_win_over_the_file_and_defaults_fill_gaps(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("path: trsm_small\ndtype: float64\niterations: 7\nllm: {model: a}\n")
    job = load_job_config(
        job_file,
        {"iterations": 9, "seed": None, "llm": {"model": None, "base_url": "http://h/v1"}},
        defaults={"gpu": 3},
    )
    assert (job.iterations, job.seed, job.gpu) == (9, 42, 3)
    assert (job.llm.model, job.llm.base_url) == ("a", "http://h/v1")


def _config(tmp_path: Path, backend: LLMBackend | None = None):
    job = JobConfig(path="trsm_small", dtype="float64", compile_only=True)
    backend = backend or LLMBackend(kind="offline", model="offline-mutator")
    return build_config(
        job,
        models=model_configs(backend, LLMSection()),
        system_message="system",
        template_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
    )


def test_openevolve_config_avoids_the_known_pitfalls(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert (config.language, config.file_suffix) == ("cuda", ".cu")
    assert config.diff_based_evolution and config.full_rewrite_probability == 0.0
    assert config.enforce_evolve_blocks
    assert config.database.max_snapshot_artifacts is None
    assert config.prompt.artifact_security_filter is False
    assert config.evaluator.parallel_evaluations == 1
    assert config.evolution_trace.enabled and config.evolution_trace.include_failures
    # Our evaluator's hard timeouts (worker start, quick check, full check) must fire first.
    assert config.evaluator.timeout > QUICK_TIMEOUT_S * 2 + FULL_TIMEOUT_S
    # A spawned pool (max_tasks_per_child) needs a picklable init_client.
    assert config.max_tasks_per_child is not None
    factory = config.llm.models[0].init_client
    assert pickle.loads(pickle.dumps(factory)) is make_offline_mutator


def test_feature_dimensions_are_numeric_even_for_a_failed_candidate(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert list(config.database.feature_dimensions) == list(FEATURE_DIMENSIONS)
    failed = EvaluationReport("trsm_small", "float64").fail(
        "compile_error", CheckFailure("compile", detail="error: expected ';'")
    )
    for report in (failed, EvaluationReport("trsm_small", "float64")):
        metrics = report.metrics()
        for dim in FEATURE_DIMENSIONS:
            assert isinstance(metrics[dim], float) and math.isfinite(metrics[dim])


def test_openai_backend_uses_openevolves_client_with_the_key_from_the_named_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    backend = LLMBackend("openai-compatible", "m1", "http://127.0.0.1:9/v1", "MY_KEY")
    model = _config(tmp_path, backend).llm.models[0]
    # The intake wrapper: every answer becomes canonical text before OpenEvolve applies it.
    assert model.init_client is make_canonical_openai_client
    assert (model.name, model.api_base, model.api_key) == ("m1", "http://127.0.0.1:9/v1", "sk-test")


@pytest.mark.parametrize("timeout_s", [30, 300, 540, 870])
def test_evaluator_timeout_not_above_the_evaluators_own_limits_is_refused(timeout_s: int) -> None:
    from evolver.job_config import evaluator_hard_limit_s

    limit = evaluator_hard_limit_s()
    # 60 GPU query + 60 quick + 240 full + 2 x 90 memcheck + 120 ncu + 120 compiler child start
    # + 90 compile (the wall-clock backstop of its 60 s CPU-time limit): under the default 900
    assert limit == 870
    message = _error({"path": "trsm_small", "dtype": "float64", "evaluator_timeout_s": timeout_s})
    assert message.startswith(f"job config: evaluator_timeout_s: {timeout_s} s does not exceed ")
    assert f"hard limit of {limit:.0f} s" in message


def test_evaluator_timeout_limit_covers_every_timeout_of_the_pipeline() -> None:
    from evolver.job_config import evaluator_hard_limit_s

    assert evaluator_hard_limit_s() >= 2 * QUICK_TIMEOUT_S + FULL_TIMEOUT_S
    assert JobConfig(path="trsm_small", dtype="float64").evaluator_timeout_s > (
        evaluator_hard_limit_s()
    )
    assert JobConfig(path="trsm_small", dtype="float64", evaluator_timeout_s=871)


def test_evaluator_timeout_in_a_job_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text("path: trsm_small\ndtype: float32\nevaluator_timeout_s: 120\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_config(file, {})
    assert str(caught.value).startswith(f"{file}: evaluator_timeout_s: 120 s does not exceed")


@pytest.mark.parametrize("keep", [0, 1])
def test_fewer_than_two_kept_checkpoints_is_refused(keep: int) -> None:
    message = _error({"path": "trsm_small", "dtype": "float64", "keep_checkpoints": keep})
    assert message.startswith("job config: keep_checkpoints: ")
    assert "greater than or equal to 2" in message


# --- upper bounds: no number in a job file may size an allocation without limit ---------------

_JOB = {"path": "trsm_small", "dtype": "float32", "compile_only": True}


def _int_fields() -> list[tuple[str, ...]]:
    """Every integer setting of a job, as a key path (``("llm", "retries")``)."""
    fields = [(name,) for name, info in JobConfig.model_fields.items() if info.annotation is int]
    fields += [("llm", n) for n, info in LLMSection.model_fields.items() if info.annotation is int]
    return fields


def _with(loc: tuple[str, ...], value: object) -> dict:
    if len(loc) == 1:
        return {**_JOB, loc[0]: value}
    return {**_JOB, "llm": {loc[1]: value}}


def _upper(loc: tuple[str, ...]) -> int:
    import annotated_types

    model = LLMSection if loc[0] == "llm" else JobConfig
    (high,) = [
        c.le for c in model.model_fields[loc[-1]].metadata if isinstance(c, annotated_types.Le)
    ]
    return int(high)


@pytest.mark.parametrize("loc", _int_fields(), ids=lambda loc: ".".join(loc))
def test_every_integer_setting_has_an_upper_bound_that_is_enforced(loc: tuple[str, ...]) -> None:
    high = _upper(loc)
    validate_job_config(_with(loc, high))  # the bound itself is allowed
    for too_big in (high + 1, 10**20, 2**20000):
        message = _error(_with(loc, too_big))
        assert (
            message == f"job config: {'.'.join(loc)}: Input should be less than or equal to {high}"
        )


def test_the_bounds_are_the_documented_ones() -> None:
    from evolver.job_config import int_range

    expected = {
        "iterations": (1, 1_000_000),
        "checkpoint_interval": (1, 1_000_000),
        "promote_every": (1, 1_000_000),
        "migration_interval": (1, 1_000_000),
        "keep_checkpoints": (2, 100),
        "islands": (1, 64),
        "population": (2, 10_000),
        "archive": (1, 10_000),
        "feature_bins": (2, 1_000),
        "num_top_programs": (0, 32),
        "num_diverse_programs": (0, 32),
        "evaluator_timeout_s": (30, 86_400),
        "max_code_length": (1_000, 1_000_000),
        "gpu": (0, 1023),
        "in_flight": (1, 16),
        "seed": (0, 2**32 - 1),
    }
    assert {name: int_range(name) for name in expected} == expected
    assert {loc[0] for loc in _int_fields() if len(loc) == 1} == set(expected)
    assert [_upper(("llm", n)) for n in ("max_tokens", "timeout_s", "retries")] == [
        1_048_576,
        3_600,
        10,
    ]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("islands: 100000000000000000000", "islands: Input should be less than or equal to 64"),
        ("iterations: 1.0e+20", "iterations: Input should be a valid integer"),
        ("population: 0x" + "f" * 5000, "population: Input should be less than or equal to 10000"),
        ("iterations: " + "9" * 5000,
         "invalid YAML at line 4, column 13: cannot read the value: Exceeds the limit (4300 "
         "digits) for integer string conversion: value has 5000 digits"),
        ("seed: 2024-02-30", "invalid YAML at line 4, column 7: cannot read the value: day is "
         "out of range for month"),
        ("llm: {model: " + "m" * 300 + "}", "llm.model: String should have at most 256 characters"),
        ("llm: {base_url: 'http://h/" + "p" * 5000 + "'}",
         "llm.base_url: String should have at most 4096 characters"),
    ],
)  # fmt: skip
def test_absurd_values_in_a_job_file_are_one_line_errors(
    tmp_path: Path, line: str, says: str
) -> None:
    file = tmp_path / "big.yaml"
    file.write_text("path: trsm_small\ndtype: float32\ncompile_only: true\n" + line + "\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_config(file, {})
    message = str(caught.value)
    assert message.startswith(f"{file}: ") and says in message and "\n" not in message
    assert "set_int_max_str_digits" not in message  # Python's advice is not the user's


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    import time

    # 10^30 strings if expanded; PyYAML keeps aliases as shared references.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 31)]
    for tail in ("path: *a30\ndtype: float32", "path: trsm_small\ndtype: float32\nllm: *a30"):
        file = tmp_path / "bomb.yaml"
        file.write_text("\n".join(lines) + "\n" + tail + "\n")
        start = time.monotonic()
        with pytest.raises(JobConfigError) as caught:
            load_job_config(file, {})
        assert time.monotonic() - start < 5
        # The anchors' keys are unknown: named before the bomb's type error, which pydantic
        # still finds (every field is validated) without expanding the aliases.
        assert str(caught.value).startswith(f"{file}: unknown key 'a0'; known keys: archive, ")


def test_a_bad_override_is_told_apart_from_the_same_value_in_the_file(tmp_path: Path) -> None:
    from evolver.job_config import JobOptionError

    file = tmp_path / "job.yaml"
    file.write_text("path: trsm_small\ncompile_only: true\n")
    for overrides, loc, says in (
        ({"dtype": "int8"}, ("dtype",), "unknown dtype 'int8'; expected one of float32"),
        ({"dtype": "float32", "islands": 65}, ("islands",), "less than or equal to 64"),
        ({"dtype": "float32", "llm": {"model": "m" * 257}}, ("llm", "model"), "at most 256"),
    ):
        with pytest.raises(JobOptionError) as caught:
            load_job_config(file, overrides)
        assert caught.value.loc == loc and says in str(caught.value)
    file.write_text("path: trsm_small\ncompile_only: true\ndtype: int8\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_config(file, {"islands": 4})  # a good override: the file is at fault
    assert not isinstance(caught.value, JobOptionError)
    assert str(caught.value).startswith(f"{file}: dtype: unknown dtype 'int8'")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('iterations: "5"', "iterations: Input should be a valid integer"),
        ("islands: 2.0", "islands: Input should be a valid integer"),
        ("seed: true", "seed: Input should be a valid integer"),
        ('compile_only: "true"', "compile_only: Input should be a valid boolean"),
        ("compile_only: 1", "compile_only: Input should be a valid boolean"),
        ("llm: {retries: '2'}", "llm.retries: Input should be a valid integer"),
    ],
)
def test_a_job_file_is_typed_as_strictly_as_the_api_body(
    tmp_path: Path, line: str, says: str
) -> None:
    file = tmp_path / "job.yaml"
    file.write_text("path: trsm_small\ndtype: float32\n" + line + "\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_config(file, {})
    assert str(caught.value) == f"{file}: {says}"


def test_yaml_scalars_keep_their_types_under_strict_validation(tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(
        "path: trsm_small\ndtype: float32\ncompile_only: yes\niterations: 7\nseed: 0x2a\n"
        "llm: {temperature: 1}\n"
    )
    job = load_job_config(file, {})
    assert (job.compile_only, job.iterations, job.seed, job.llm.temperature) == (True, 7, 42, 1.0)
