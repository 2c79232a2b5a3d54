"""An in-memory SQLite database lasts one connection: every command that opens the store refuses
it in one line (exit 2) instead of failing later on a missing table, and so does the app."""

from __future__ import annotations

import pytest

from db.session import in_memory_problem
from kernevo.cli import main

_MEMORY = [
    "sqlite://",
    "sqlite:///:memory:",
    "sqlite:///file::memory:?uri=true",
    "sqlite:///file:kernevo?mode=memory&uri=true",
]

_COMMANDS = [
    ["evolve", "--path", "trsm_small", "--dtype", "float64"],
    ["evolve", "--resume", "1"],
    ["serve", "--port", "1"],
    ["jobs"],
    ["worker", "--compile-only"],
    ["cancel", "1"],
    ["export", "--dtype", "float64", "--gpu", "nvidia-h200", "--out", "x"],
    ["token", "create", "--scope", "read"],
    ["token", "list"],
    ["token", "revoke", "1"],
]


@pytest.mark.parametrize("url", _MEMORY)
def test_in_memory_urls_are_recognized(url: str) -> None:
    assert in_memory_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    ["sqlite:///./kernevo.db", "sqlite:///file:kernevo.db?uri=true", "postgresql+psycopg://u@h/d"],
)
def test_other_urls_are_left_alone(url: str) -> None:
    assert in_memory_problem(url) is None


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda argv: " ".join(argv[:2]))
@pytest.mark.parametrize("url", _MEMORY[:2])
def test_the_option_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    url: str,
) -> None:
    monkeypatch.delenv("KERNEVO_DATABASE_URL", raising=False)
    with pytest.raises(SystemExit) as exited:
        main([*command, "--database-url", url])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"argument --database-url: database {url}: an in-memory SQLite database" in line


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_the_variable_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("KERNEVO_DATABASE_URL", "sqlite://")
    assert main(command) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kernevo: KERNEVO_DATABASE_URL: database sqlite://: an in-memory")


def test_the_app_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``uvicorn --factory api.app:create_app``: no service whose /healthz says ok while every
    query fails on a missing table."""
    from api.app import create_app

    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    with pytest.raises(ValueError, match="an in-memory SQLite database"):
        create_app("sqlite://")
