"""``KERNEVO_DEBUG`` takes every spelling of the settings' booleans
(``kernevo.environment.parse_boolean``): ``yes`` and ``true`` print the traceback after the
one-line error as ``1`` did (only ``1`` did before); a false spelling or unset prints the line
alone; a value that is no boolean is refused before the command runs (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernevo.cli import main


def _jobs_on_a_missing_database(tmp_path: Path) -> list[str]:
    return ["jobs", "--database-url", f"sqlite:///{tmp_path / 'none.db'}"]


@pytest.mark.parametrize(
    ("value", "traceback"),
    [("1", True), ("yes", True), ("TRUE", True), ("0", False), ("off", False), (None, False)],
)
def test_debug_takes_every_boolean_spelling(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
    traceback: bool,
) -> None:
    monkeypatch.delenv("KERNEVO_DATABASE_URL", raising=False)
    if value is None:
        monkeypatch.delenv("KERNEVO_DEBUG", raising=False)
    else:
        monkeypatch.setenv("KERNEVO_DEBUG", value)
    assert main(_jobs_on_a_missing_database(tmp_path)) == 1
    err = capsys.readouterr().err
    assert ("Traceback (most recent call last)" in err) is traceback
    assert err.strip().splitlines()[-1].startswith("kernevo: database sqlite:///")


def test_a_debug_value_that_is_no_boolean_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_DEBUG", "yess")
    assert main(_jobs_on_a_missing_database(tmp_path)) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kernevo: KERNEVO_DEBUG")
