"""A job's LLM key variable may be any variable but kernevo's own settings: a trial's job file
naming ``KERNEVO_DATABASE_URL`` (``llm.api_key_env``) sent the database URL (a PostgreSQL
password, where there is one) to the LLM endpoint as its bearer key. Queued jobs were refused
already (``evolver.queued_llm``); the key's one reader now refuses for every job."""

from __future__ import annotations

import pytest

from evolver.errors import LLMEndpointError
from evolver.llm import LLMBackend

SECRET = "sqlite:////home/someone/k.db"


@pytest.mark.parametrize(
    "name", ["KERNEVO_DATABASE_URL", "kernevo_api_token", "KERNEVO_DB_PASSWORD"]
)
def test_a_kernevo_setting_is_never_read_as_the_llm_key(name, monkeypatch):
    monkeypatch.setenv(name.upper(), SECRET)
    backend = LLMBackend(kind="openai", model="m", base_url="http://127.0.0.1:9/v1",
                         api_key_env=name)  # fmt: skip
    with pytest.raises(LLMEndpointError, match="one of kernevo's own settings") as caught:
        backend.api_key()
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "KERNEVO_MY_LLM_KEY"])
def test_a_variable_of_ones_own_is_read(name, monkeypatch):
    monkeypatch.setenv(name, "sk-test")
    backend = LLMBackend(kind="openai", model="m", base_url="http://127.0.0.1:9/v1",
                         api_key_env=name)  # fmt: skip
    assert backend.api_key() == "sk-test"


# A trial's finding: both refusals were exit 1 (an infrastructure error) from the job's start,
# though the README puts configuration errors at exit 2, before anything runs.
OWN = (
    "llm.api_key_env KERNEVO_DATABASE_URL is one of kernevo's own settings, not an LLM key: name "
    "a variable of your own (e.g. OPENAI_API_KEY)"
)
UNSET = "the LLM API key variable NOPE_UNSET_KEY is not set in the environment"


@pytest.mark.parametrize(
    ("where", "name", "expected"),
    [
        (
            "option",
            "KERNEVO_DATABASE_URL",
            f"kernevo evolve: error: argument --llm-api-key-env: {OWN}",
        ),
        ("option", "NOPE_UNSET_KEY", f"kernevo evolve: error: argument --llm-api-key-env: {UNSET}"),
        ("file", "NOPE_UNSET_KEY", f"kernevo: {{config}}: {UNSET}"),
        ("variable", "NOPE_UNSET_KEY", f"kernevo: KERNEVO_LLM_API_KEY_ENV: {UNSET}"),
    ],
    ids=["option-own-setting", "option-unset", "job-file", "environment"],
)
def test_a_key_variable_that_cannot_be_read_is_a_configuration_error_before_anything_runs(
    tmp_path, monkeypatch, capsys, where, name, expected
):
    from kernevo.cli import main

    database = tmp_path / "lineage.db"
    monkeypatch.setenv("KERNEVO_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("KERNEVO_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("NOPE_UNSET_KEY", raising=False)
    config = tmp_path / "job.yaml"
    endpoint = ["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m"]
    argv = ["evolve", "--path", "trsm_small", "--dtype", "float64", *endpoint]
    if where == "option":
        argv += ["--llm-api-key-env", name]
    elif where == "file":
        config.write_text(
            "path: trsm_small\ndtype: float64\nllm:\n  base_url: http://127.0.0.1:9/v1\n"
            f"  model: m\n  api_key_env: {name}\n"
        )
        argv = ["evolve", "--config", str(config)]
    else:
        monkeypatch.setenv("KERNEVO_LLM_API_KEY_ENV", name)
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2, err
    line = expected.format(config=config)
    assert err == f"{line}\n" or err == f"{line} (see kernevo evolve --help)\n", err
    assert not database.exists() and not (tmp_path / "runs").exists()  # nothing ran
