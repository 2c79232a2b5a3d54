"""Exit codes of bad configuration, as README's "Configuration" section and ``kernevo.cli``
state them: a ``--config`` file that does not parse or validate, and a database URL that does
not parse or names an unknown dialect, are usage/configuration errors (exit 2, one line), in
every subcommand that takes them; a database that does not answer is infrastructure (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernevo.cli import main

# Every subcommand that opens the store, with the arguments it needs besides the URL.
_STORE_COMMANDS = [
    ("evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"),
    ("serve",),
    ("jobs",),
    ("worker", "--compile-only"),
    ("cancel", "1"),
    ("export", "--dtype", "float64", "--gpu", "nvidia-h200", "-o", "out"),
    ("token", "list"),
    ("token", "create", "--scope", "read"),
    ("token", "revoke", "1"),
]
_EXAMPLES = "(expected e.g. sqlite:///./kernevo.db or postgresql+psycopg://user@host/db)"


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's usage errors
        return int(stop.code or 0)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import os

    for name in [n for n in os.environ if n.startswith("KERNEVO_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", _STORE_COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("::bad", f"not a database URL {_EXAMPLES}"),
        ("not-a-url", f"not a database URL {_EXAMPLES}"),
        ("nosuchdb://x/y", f"unknown database kind 'nosuchdb' {_EXAMPLES}"),
    ],
)
def test_a_database_url_that_names_no_database_is_a_usage_error(
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    url: str,
    reason: str,
) -> None:
    name = " ".join(command[:2] if command[0] == "token" else command[:1])
    assert _exit([*command, "--database-url", url]) == 2
    assert capsys.readouterr().err == (
        f"kernevo {name}: error: argument --database-url: {url!r}: {reason} "
        f"(see kernevo {name} --help)\n"
    )
    monkeypatch.setenv("KERNEVO_DATABASE_URL", url)
    assert _exit(list(command)) == 2
    assert capsys.readouterr().err == f"kernevo: KERNEVO_DATABASE_URL={url!r}: {reason}\n"
    assert sorted(p.name for p in clean_env.iterdir()) == []  # nothing created


def test_a_bad_database_variable_stops_even_commands_that_do_not_open_the_store(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ``KERNEVO_*`` value is checked before anything runs, as README says."""
    monkeypatch.setenv("KERNEVO_DATABASE_URL", "not-a-url")
    assert _exit(["keys", "--dir", str(clean_env / "keys")]) == 2
    assert capsys.readouterr().err.startswith("kernevo: KERNEVO_DATABASE_URL='not-a-url': ")
    assert not (clean_env / "keys").exists()


def test_credentials_of_a_refused_url_are_not_echoed(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit(["jobs", "--database-url", "nosuchdb://user:s3cret@host/db"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "'nosuchdb://user:***@host/db'" in err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("path: [\n", "invalid YAML at line 2, column 1: expected the node content"),
        ("path: trsm_small\ndtype: float64\nbogus: 1\n", "unknown key 'bogus'; known keys: "),
        ("path: trsm_small\ndtype: float64\niterations: many\n",
         "iterations: Input should be a valid integer"),
    ],
)  # fmt: skip
def test_a_job_file_that_does_not_parse_or_validate_is_a_usage_error(
    clean_env: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    job = clean_env / "job.yaml"
    job.write_text(content)
    assert _exit(["evolve", "--config", str(job), "--compile-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernevo: {job}: {says}") and len(err.splitlines()) == 1
    assert sorted(p.name for p in clean_env.iterdir()) == ["job.yaml"]  # no database, no job


def test_a_database_that_does_not_answer_is_an_error_not_a_usage_error(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit(["jobs", "--database-url", f"sqlite:///{clean_env / 'missing.db'}"]) == 1
    assert capsys.readouterr().err.startswith("kernevo: database sqlite:///")
