"""Only SQLite and PostgreSQL database URLs are taken (a fresh user's finding: ``mysql://``
reached the driver and said "No module named 'MySQLdb'"). ``db.session.dialect_problem`` is the
one check: the CLI's ``--database-url`` and ``KERNEVO_DATABASE_URL`` (which every command and
the API read) refuse another kind before anything runs (exit 2, one line, the password masked),
and ``make_engine`` / ``make_read_engine`` refuse it for any other caller. The forms kernevo
documents keep working: ``sqlite://…``, ``postgresql+psycopg://…`` and ``postgresql://…``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from db.errors import UnsupportedDatabaseError
from db.session import make_engine, make_read_engine, url_problem
from db.settings import DatabaseSettings
from evolver.errors import StoreError
from kernevo.cli import main

_EXAMPLES = "(expected e.g. sqlite:///./kernevo.db or postgresql+psycopg://user@host/db)"
_MYSQL = "mysql://u:s3cret@127.0.0.1/db"
_MYSQL_SHOWN = "mysql://u:***@127.0.0.1/db"
_ONLY = "only SQLite and PostgreSQL database URLs are supported"
_PSYCOPG = f"{_ONLY}, postgresql as postgresql:// or postgresql+psycopg://, through psycopg 3"

# Every subcommand that opens the store, with the arguments it needs besides the URL.
_STORE_COMMANDS = [
    ("evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"),
    ("serve", "--port", "1"),
    ("jobs",),
    ("worker", "--compile-only"),
    ("cancel", "1"),
    ("export", "--dtype", "float64", "--gpu", "nvidia-h200", "-o", "out"),
    ("token", "list"),
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in [n for n in os.environ if n.startswith("KERNEVO_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's usage errors
        return int(stop.code or 0)


@pytest.mark.parametrize("command", _STORE_COMMANDS, ids=" ".join)
def test_a_mysql_url_is_a_one_line_usage_error_in_every_command(
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    name = " ".join(command[:2] if command[0] == "token" else command[:1])
    reason = f"{_ONLY}: got 'mysql' {_EXAMPLES}"
    assert _exit([*command, "--database-url", _MYSQL]) == 2
    assert capsys.readouterr().err == (
        f"kernevo {name}: error: argument --database-url: '{_MYSQL_SHOWN}': {reason} "
        f"(see kernevo {name} --help)\n"
    )
    monkeypatch.setenv("KERNEVO_DATABASE_URL", _MYSQL)
    assert _exit(list(command)) == 2
    assert capsys.readouterr().err == f"kernevo: KERNEVO_DATABASE_URL='{_MYSQL_SHOWN}': {reason}\n"
    assert sorted(p.name for p in clean_env.iterdir()) == []  # nothing created


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql+pymysql://u@h/db", f"{_ONLY}: got 'mysql+pymysql' {_EXAMPLES}"),
        ("mssql://u@h/db", f"{_ONLY}: got 'mssql' {_EXAMPLES}"),
        ("oracle://u@h/db", f"{_ONLY}: got 'oracle' {_EXAMPLES}"),
        ("postgresql+psycopg2://u@h/db", f"{_PSYCOPG}: got 'postgresql+psycopg2'"),
        ("postgresql+asyncpg://u@h/db", f"{_PSYCOPG}: got 'postgresql+asyncpg'"),
        (
            "sqlite+aiosqlite:///k.db",
            f"{_ONLY}, sqlite as sqlite:// through Python's sqlite3: got 'sqlite+aiosqlite'",
        ),
        ("nosuchdb://x/y", f"unknown database kind 'nosuchdb' {_EXAMPLES}"),
        ("not-a-url", f"not a database URL {_EXAMPLES}"),
    ],
)
def test_url_problem_names_the_kind_kernevo_does_not_run_on(url: str, problem: str) -> None:
    assert url_problem(url) == problem


@pytest.mark.parametrize("make", [make_engine, make_read_engine])
def test_engines_refuse_another_database_before_loading_its_driver(make: object) -> None:
    """Any caller (a script, ``api.app.create_app`` given a URL) meets the same check: the
    refusal, not the driver's ``No module named …``."""
    with pytest.raises(UnsupportedDatabaseError) as refused:
        make("mysql+pymysql://u:s3cret@127.0.0.1/db")  # type: ignore[operator]
    assert str(refused.value) == f"{_ONLY}: got 'mysql+pymysql' {_EXAMPLES}"
    assert refused.value.url == "mysql+pymysql://u:***@127.0.0.1/db"


def test_the_store_says_which_database_it_refused(clean_env: Path) -> None:
    from evolver.store import open_store

    with pytest.raises(StoreError) as refused:
        open_store(_MYSQL)
    assert str(refused.value) == f"database {_MYSQL_SHOWN}: {_ONLY}: got 'mysql' {_EXAMPLES}"


def test_the_service_refuses_another_database_from_its_argument_or_the_environment(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.app import create_app

    with pytest.raises(UnsupportedDatabaseError, match="^only SQLite and PostgreSQL"):
        create_app(_MYSQL)
    monkeypatch.setenv("KERNEVO_DATABASE_URL", _MYSQL)
    with pytest.raises(ValidationError, match="only SQLite and PostgreSQL .* got 'mysql'"):
        create_app()


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@127.0.0.1:1/kernevo", "psycopg"),
        ("postgresql+psycopg://u:pw@127.0.0.1:1/kernevo", "psycopg"),
        ("sqlite:///{tmp}/k.db", "pysqlite"),
        ("sqlite+pysqlite:///{tmp}/k.db", "pysqlite"),
        ("sqlite:///file:{tmp}/u.db?mode=ro&uri=true", "pysqlite"),
    ],
)
def test_the_documented_forms_are_taken(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, url: str, driver: str
) -> None:
    """Engines are made without connecting: a PostgreSQL server need not run here."""
    url = url.format(tmp=clean_env)
    assert url_problem(url) is None
    monkeypatch.setenv("KERNEVO_DATABASE_URL", url)
    assert DatabaseSettings().database_url == url
    for make in (make_engine, make_read_engine):
        engine = make(url)
        try:
            assert engine.dialect.driver == driver
        finally:
            engine.dispose()
