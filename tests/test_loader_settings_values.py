"""Loader settings a fresh user got wrong and the loader accepted (booleans that took any text,
a short token, a cache folder that is a file): each is now one ``SettingsError`` line naming
the variable, raised where ``LoaderSettings`` is built, before any CUDA call."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kernevo import environment
from kernevo.environment import (
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    MIN_TOKEN_LENGTH,
    SettingsError,
    check_environment,
    parse_boolean,
    token_problem,
)
from kernevo.settings import LoaderSettings


@pytest.mark.parametrize("variable", ["KERNEVO_WARM_START", "KERNEVO_DEBUG"])
@pytest.mark.parametrize("value", ["abc", "-1", "2", "maybe", " true"])
def test_a_boolean_that_is_not_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """Check: the ``warm_start`` / ``debug`` fields of ``LoaderSettings`` (pydantic's bool)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        LoaderSettings()
    message = str(caught.value)
    assert caught.value.name == variable and caught.value.check == "bool_parsing"
    assert message.startswith(f"{variable}={value!r}: expected true or false")
    assert "\n" not in message


@pytest.mark.parametrize("value", sorted(BOOLEAN_TRUE | {"TRUE", "Yes", "On"}))
def test_debug_takes_every_true_spelling(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KERNEVO_DEBUG", value)
    assert LoaderSettings().debug is True
    assert parse_boolean("KERNEVO_DEBUG", value, False) is True


def test_parse_boolean_is_the_settings_rule() -> None:
    """The CLI's ``KERNEVO_DEBUG`` reader (``parse_boolean``) takes what the settings take."""
    for value in BOOLEAN_FALSE:
        assert parse_boolean("KERNEVO_DEBUG", value, True) is False
    assert parse_boolean("KERNEVO_DEBUG", None, False) is False
    with pytest.raises(SettingsError, match=r"^KERNEVO_DEBUG='yess': expected true or false"):
        parse_boolean("KERNEVO_DEBUG", "yess", False)


def test_the_catalogue_checks_its_booleans() -> None:
    """Check: ``check_environment``'s ``not_boolean`` (the CLI refuses it, the loader warns and
    then its settings refuse it)."""
    problems = check_environment({"KERNEVO_DEBUG": "abc", "KERNEVO_TRUST_LOCAL_KEY": "yes"})
    assert [(p.check, p.name) for p in problems] == [("not_boolean", "KERNEVO_DEBUG")]
    booleans = {v.name for v in environment.CATALOGUE if v.boolean}
    assert {"KERNEVO_WARM_START", "KERNEVO_DEBUG", "KERNEVO_TRUST_LOCAL_KEY"} <= booleans


@pytest.mark.parametrize("token", ["a", "short-token", "x" * (MIN_TOKEN_LENGTH - 1)])
def test_a_short_token_is_refused_as_the_cli_refuses_it(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    """Check: ``LoaderSettings._long_enough`` (``kernevo.environment.token_problem``)."""
    monkeypatch.setenv("KERNEVO_API_TOKEN", token)
    with pytest.raises(SettingsError) as caught:
        LoaderSettings()
    message = str(caught.value)
    assert message.startswith("KERNEVO_API_TOKEN (value hidden): ")
    assert f"at least {MIN_TOKEN_LENGTH} characters, not {len(token)}" in message
    assert len(token) < 4 or token not in message


def test_the_token_rule_is_the_services() -> None:
    from api.settings import MIN_TOKEN_LENGTH as SERVICE_MIN

    assert SERVICE_MIN == MIN_TOKEN_LENGTH
    assert token_problem("t" * MIN_TOKEN_LENGTH) is None


def test_a_cache_folder_that_is_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Check: ``LoaderSettings._a_folder``; before, every write failed with a warning and the
    loader ran without its disk cache."""
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(a_file))
    with pytest.raises(SettingsError) as caught:
        LoaderSettings()
    assert caught.value.name == "KERNEVO_CACHE_DIR"
    assert str(caught.value).startswith("KERNEVO_CACHE_DIR='")
    assert str(caught.value).endswith(": a path that exists and is not a directory; name a folder")
    monkeypatch.delenv("KERNEVO_CACHE_DIR")
    with pytest.raises(SettingsError, match=r"^cache_dir="):
        LoaderSettings(cache_dir=a_file)
    # A folder not yet created is fine: the first write creates it.
    with caplog.at_level(logging.WARNING, logger="kernevo"):
        assert LoaderSettings(cache_dir=tmp_path / "new").cache_dir == tmp_path / "new"


@pytest.mark.parametrize(
    ("variable", "value"), [("KERNEVO_WARM_START", "maybe"), ("KERNEVO_API_URL", " ")]
)
def test_a_loader_value_it_refuses_is_said_once_not_also_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str, value: str
) -> None:
    """A fresh user's trial: ``KERNEVO_WARM_START=maybe`` was a ``kernevo:`` warning on the log
    and then a ``SettingsError`` in the same words. The settings' own variables' values are said
    by the error alone; other problems of the environment are still logged."""
    monkeypatch.setattr(environment, "_warned", set())
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("KERNEVO_API_KERNELS_REQUIRE_READ", "maybe")  # the service's, not ours
    monkeypatch.setenv("KERNEVO_WARM_STAR", "1")  # misspelt
    with caplog.at_level(logging.WARNING, logger="kernevo"), pytest.raises(SettingsError) as caught:
        LoaderSettings()
    assert caught.value.name == variable
    logged = [record.getMessage() for record in caplog.records]
    assert not any(variable + "=" in line or variable + " is" in line for line in logged), logged
    service = "kernevo: KERNEVO_API_KERNELS_REQUIRE_READ='maybe'"
    assert any(line.startswith(service) for line in logged), logged
    assert any("KERNEVO_WARM_STAR" in line and "KERNEVO_WARM_START" in line for line in logged)


def test_a_keyword_argument_is_shown_as_python_wrote_it() -> None:
    """``cache_max_age_s=-1`` was said as ``cache_max_age_s='-1'``, a number quoted as text."""
    with pytest.raises(SettingsError, match=r"^cache_max_age_s=-1: input should be greater"):
        LoaderSettings(cache_max_age_s=-1)
    with pytest.raises(SettingsError, match=r"^api_url='ftp://x': "):
        LoaderSettings(api_url="ftp://x")
    with pytest.raises(SettingsError, match=r"^request_timeout_s=inf: "):
        LoaderSettings(request_timeout_s=float("inf"))
