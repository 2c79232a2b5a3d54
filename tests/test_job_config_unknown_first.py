"""A job file's unknown key is named before any other problem of the file: a misspelt
required key (``paht: trsm_small``) is both unknown and missing, and pydantic lists the
missing one first, which hid the typo ("missing required key 'path'")."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolver.errors import JobConfigError
from evolver.job_config import load_job_config, validate_job_config
from kernevo.cli import main


def _file_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(text)
    with pytest.raises(JobConfigError) as caught:
        load_job_config(job_file, {})
    return job_file, str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("paht: trsm_small\ndtype: float64\n", "unknown key 'paht'; did you mean 'path'?"),
        ("path: trsm_small\ndtpye: float64\n", "unknown key 'dtpye'; did you mean 'dtype'?"),
        # A bad value listed before an unknown key: the unknown key is still named.
        (
            "path: trsm_small\ndtype: float64\niterations: '5'\nislnds: 3\n",
            "unknown key 'islnds'; did you mean 'islands'?",
        ),
        # In a section: the section's misspelt key, not the top level's missing one.
        ("dtype: float64\nllm:\n  modle: m\n", "unknown key 'llm.modle'; did you mean 'model'?"),
    ],
)
def test_the_unknown_key_is_named_first(tmp_path: Path, text: str, expected: str) -> None:
    job_file, message = _file_error(tmp_path, text)
    assert message == f"{job_file}: {expected}"


def test_without_an_unknown_key_the_first_problem_is_named(tmp_path: Path) -> None:
    job_file, message = _file_error(tmp_path, "dtype: float64\n")
    assert message == f"{job_file}: missing required key 'path'"
    message = str(
        pytest.raises(
            JobConfigError,
            validate_job_config,
            {"path": "trsm_small", "dtype": "float64", "iterations": "5"},
        ).value
    )
    assert message == "job config: iterations: Input should be a valid integer"


def test_the_cli_names_the_misspelt_key_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("paht: trsm_small\ndtype: float64\n")
    code = main(["evolve", "--config", str(job_file), "--compile-only"])
    err = capsys.readouterr().err
    assert (code, err) == (2, f"kernevo: {job_file}: unknown key 'paht'; did you mean 'path'?\n")
