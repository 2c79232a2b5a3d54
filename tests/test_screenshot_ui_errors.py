"""``scripts/screenshot_ui.py`` refusals: each is one line on stderr and exit 1, never a
traceback, and a database that is not there is refused, not created."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

HINT = "give an existing kernevo database, e.g. a copy of the GPU host's"


ui = load_script("screenshot_ui.py", "screenshot_ui_errors")
_BROWSER = ui.browser_paths()
# main() checks for the browser first: without one every run ends on that line instead.
pytestmark = pytest.mark.skipif(
    isinstance(_BROWSER, str), reason=f"no headless browser: {_BROWSER}"
)


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of ``main(argv)``, which must exit 1."""
    assert ui.main(argv) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_sqlite_file_is_refused_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "none.db"
    line = _refusal(capsys, [f"sqlite:///{db}", str(tmp_path / "out")])
    assert line == f"screenshot_ui: database sqlite:///{db}: no such file {db} ({HINT})"
    assert not db.exists()
    assert not (tmp_path / "out").exists()


def test_a_missing_file_with_no_migrate_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "none.db"
    line = _refusal(capsys, [f"sqlite:///{db}", str(tmp_path / "out"), "--no-migrate"])
    assert line == (
        f"screenshot_ui: database sqlite:///{db}: no such file {db} "
        "('kernevo evolve' or 'kernevo serve' creates and migrates it)"
    )
    assert not db.exists()


def test_a_folder_an_empty_file_and_an_unreachable_server_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    line = _refusal(capsys, [f"sqlite:///{tmp_path}", out])
    assert line == (
        f"screenshot_ui: database sqlite:///{tmp_path}: {tmp_path} is a directory, "
        "not a database file"
    )
    empty = tmp_path / "zero.db"
    empty.touch()
    line = _refusal(capsys, [f"sqlite:///{empty}", out])
    assert line == (
        f"screenshot_ui: database sqlite:///{empty}: {empty} is an empty file, "
        f"not a kernevo database ({HINT})"
    )
    url = "postgresql+psycopg://postgres@127.0.0.1:1/x"
    line = _refusal(capsys, [url, out])
    assert line.startswith(f"screenshot_ui: database {url}: connection failed: ")


def test_a_database_without_a_job_names_the_empty_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chromium refuses to photograph a 0 px element with a DevTools traceback; the script
    names the section instead."""
    from db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    assert ui.main([url, str(tmp_path / "out")]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "screenshot_ui: cannot write plot.png: the page shows nothing in #plot ("
    )
    assert lines[0].endswith(" px; a database without a job has no plot)")
