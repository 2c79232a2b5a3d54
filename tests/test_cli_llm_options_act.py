"""LLM settings of a new ``kernevo evolve`` job that do nothing, or cannot work, are refused
before anything runs, one line, exit 2 (fresh-user trial: ``--compile-only --llm-model x`` with
no LLM base URL, or a job file with only ``llm: {model: x}``, ran the offline mutator silently;
``--llm-base-url`` without a model exited 1 once the job started). README's exit-code rule and
docs/CONTRACTS.md: an option that does nothing is a usage error
(``kernevo.cli.evolve._llm_settings_act``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_usage import usage_line

from kernevo.cli import main

EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
SOURCES = "--llm-base-url, llm.base_url in the --config file or KERNEVO_LLM_BASE_URL"
NEEDS_MODEL = "needs a model (--llm-model, llm.model in the --config file or KERNEVO_LLM_MODEL)"
DEAD_ENDPOINT = "http://127.0.0.1:1/v1"  # nothing listens on port 1


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The command's working folder: a new, empty temporary one (the default database and work
    folder would be made here)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _configuration_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of a configuration error (``main`` returns 2)."""
    status = main(argv)
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, ""), captured.err
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


def _job_file(folder: Path, llm: str) -> Path:
    job = folder / "job.yaml"
    job.write_text(f"path: trsm_small\ndtype: float64\ncompile_only: true\nllm: {llm}\n")
    return job


@pytest.mark.parametrize(("option", "value"), [("--llm-model", "x"), ("--llm-api-key-env", "K")])
def test_an_llm_option_without_an_endpoint_is_a_usage_error(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    assert usage_line(capsys, [*EVOLVE, option, value]) == (
        f"kernevo evolve: error: argument {option}: does nothing without an LLM endpoint "
        f"({SOURCES}): the offline mutator proposes the diffs; add --llm-base-url or leave it "
        "out (see kernevo evolve --help)"
    )
    assert list(in_tmp.iterdir()) == []  # no database, no work folder


def test_a_model_in_the_environment_is_no_endpoint(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KERNEVO_LLM_MODEL`` alone names no endpoint: ``--llm-api-key-env`` still does nothing."""
    monkeypatch.setenv("KERNEVO_LLM_MODEL", "m")
    line = usage_line(capsys, [*EVOLVE, "--llm-api-key-env", "K"])
    assert line.startswith("kernevo evolve: error: argument --llm-api-key-env: does nothing ")


@pytest.mark.parametrize(
    ("llm", "key"),
    [("{model: x}", "model"), ("{temperature: 0.5}", "temperature"), ("{retries: 0}", "retries")],
)
def test_a_job_files_llm_keys_without_an_endpoint_are_a_configuration_error(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], llm: str, key: str
) -> None:
    job = _job_file(in_tmp, llm)
    assert _configuration_line(capsys, ["evolve", "--config", str(job)]) == (
        f"kernevo: {job}: llm.{key} does nothing without an LLM endpoint ({SOURCES}): the "
        "offline mutator reads no llm key; add llm.base_url or remove the llm section"
    )
    assert sorted(p.name for p in in_tmp.iterdir()) == ["job.yaml"]


def test_an_endpoint_option_without_a_model_is_a_usage_error(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It exited 1 (``LLMEndpointError`` in the runner's preflight); it is decided before
    anything runs."""
    assert usage_line(capsys, [*EVOLVE, "--llm-base-url", DEAD_ENDPOINT]) == (
        f"kernevo evolve: error: argument --llm-base-url: an LLM endpoint {NEEDS_MODEL} "
        "(see kernevo evolve --help)"
    )
    assert list(in_tmp.iterdir()) == []


def test_an_endpoint_of_the_job_file_or_the_environment_without_a_model(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job_file(in_tmp, f'{{base_url: "{DEAD_ENDPOINT}"}}')
    assert _configuration_line(capsys, ["evolve", "--config", str(job)]) == (
        f"kernevo: {job}: llm.base_url: an LLM endpoint {NEEDS_MODEL}"
    )
    monkeypatch.setenv("KERNEVO_LLM_BASE_URL", DEAD_ENDPOINT)
    assert _configuration_line(capsys, EVOLVE) == (
        f"kernevo: KERNEVO_LLM_BASE_URL: an LLM endpoint {NEEDS_MODEL}"
    )
    assert sorted(p.name for p in in_tmp.iterdir()) == ["job.yaml"]


def test_an_endpoint_with_a_model_from_anywhere_reaches_the_endpoint_check(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint of one place and the model of another pass; the job then finds the endpoint
    unreachable (exit 1), as before."""
    monkeypatch.setenv("KERNEVO_LLM_BASE_URL", DEAD_ENDPOINT)
    job = _job_file(in_tmp, "{model: m, temperature: 0.5}")
    for argv in ([*EVOLVE, "--llm-model", "m"], ["evolve", "--config", str(job)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"kernevo: LLM endpoint {DEAD_ENDPOINT} is unreachable"), err
