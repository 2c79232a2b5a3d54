"""Folders that cannot be what a command needs are said in one line naming them (fresh-user
trial: ``evolve --work-dir ./t.log``, an existing file, said "cannot be created: File exists";
``serve --database-url sqlite:////proc/xx/k.db`` printed errno's "[Errno 2] …"). Exit 1: a
folder that cannot be written is an error of the input (README's exit-code rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernevo.cli import main

EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
# /proc takes no new folder, not even root's.
NO_FOLDER_URL = "sqlite:////proc/kernevo-test-missing/k.db"
NO_FOLDER = (
    f"kernevo: database {NO_FOLDER_URL}: folder /proc/kernevo-test-missing does not exist and "
    "cannot be created (No such file or directory)"
)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.log").write_text("a log\n")
    return tmp_path


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of ``kernevo argv``, which exited 1 with nothing on stdout."""
    status = main(argv)
    captured = capsys.readouterr()
    assert (status, captured.out) == (1, ""), captured.err
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


@pytest.mark.parametrize(
    "argv",
    [[*EVOLVE, "--work-dir", "./t.log"], ["worker", "--compile-only", "--work-dir", "t.log"]],
)
def test_a_work_folder_that_is_a_file_is_said_to_be_one(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert _error_line(capsys, argv) == (
        f"kernevo: work folder {in_tmp / 't.log'} is a file, not a folder (--work-dir, else "
        "KERNEVO_WORK_DIR)"
    )
    assert sorted(p.name for p in in_tmp.iterdir()) == ["t.log"]  # no database either
    assert (in_tmp / "t.log").read_text() == "a log\n"


def test_a_work_folder_below_a_file_and_one_from_the_environment(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _error_line(capsys, [*EVOLVE, "--work-dir", "t.log/runs"]) == (
        f"kernevo: work folder {in_tmp / 't.log' / 'runs'} cannot be created: "
        f"{in_tmp / 't.log'} is a file, not a folder"
    )
    monkeypatch.setenv("KERNEVO_WORK_DIR", "t.log")
    assert _error_line(capsys, EVOLVE) == (
        f"kernevo: work folder {in_tmp / 't.log'} is a file, not a folder (--work-dir, else "
        "KERNEVO_WORK_DIR)"
    )
    assert sorted(p.name for p in in_tmp.iterdir()) == ["t.log"]


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--port", "1"],
        [*EVOLVE, "--work-dir", "runs"],
        ["worker", "--compile-only", "--work-dir", "runs"],
    ],
)
def test_a_database_folder_that_cannot_be_made_is_named(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert _error_line(capsys, [*argv, "--database-url", NO_FOLDER_URL]) == NO_FOLDER


def test_a_database_folder_that_is_a_file_is_said_to_be_one(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "sqlite:///./t.log/k.db"
    assert _error_line(capsys, ["serve", "--port", "1", "--database-url", url]) == (
        f"kernevo: database {url}: t.log is a file, not a folder"
    )
    assert (in_tmp / "t.log").read_text() == "a log\n"
