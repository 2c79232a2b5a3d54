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
