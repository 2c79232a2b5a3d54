"""``kernevo bench-loader --json PATH``: a folder that is missing, not a folder or not writable
is a one-line usage error (exit 2) when the arguments are parsed, before any measurement (it
was a traceback after minutes of them); the results file is written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import kernevo.bench_loader
from kernevo.bench_loader import write_json
from kernevo.cli import main


@pytest.fixture(autouse=True)
def _no_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run reaching the measurement fails the test: the check must come first."""

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("bench-loader measured before refusing --json")

    monkeypatch.setattr(kernevo.bench_loader, "run", measured)


def _refused(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["bench-loader", "--dtype", "float32", "--json", str(path)])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("kernevo bench-loader: error: argument --json: ")
    return line


def test_a_missing_folder_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert f"no such folder '{tmp_path / 'missing'}'" in _refused(
        capsys, tmp_path / "missing" / "results.json"
    )


def test_a_folder_that_is_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    assert "is not a folder" in _refused(capsys, tmp_path / "file" / "results.json")


def test_a_folder_as_the_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "is a folder, not a file to write" in _refused(capsys, tmp_path)


def test_an_unwritable_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.access`` decides (root may write anywhere, so the test answers for it)."""
    real = os.access

    def access(path: object, mode: int) -> bool:
        return False if Path(str(path)) == tmp_path and mode & os.W_OK else real(path, mode)

    monkeypatch.setattr(kernevo.bench_loader.os, "access", access)
    assert f"folder '{tmp_path}' is not writable" in _refused(capsys, tmp_path / "r.json")


def test_the_results_replace_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("old")
    write_json(path, [])
    assert json.loads(path.read_text()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    path.write_text("old")

    def no_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kernevo.files.os, "replace", no_replace)
    with pytest.raises(OSError, match="No space left"):
        write_json(path, [])
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
