"""``kernevo evolve`` with a database it cannot open leaves no work folder behind (a fresh
user's trial: a mistyped ``--database-url`` left an empty ``./runs``). The work folder is still
made and checked before the store is opened (a bad folder leaves nothing in the store), and is
removed again, with the parents it made, while empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import unused_port

from kernevo.cli import main


def _closed_port_url() -> str:
    return f"postgresql://nobody@127.0.0.1:{unused_port()}/kernevo"


EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]


def test_the_default_work_folder_is_not_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNEVO_WORK_DIR", raising=False)
    assert main([*EVOLVE, "--iterations", "1", "--database-url", _closed_port_url()]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kernevo: database postgresql://nobody@127.0.0.1:") and "refused" in err
    assert list(tmp_path.iterdir()) == []


def test_a_given_work_dir_and_the_parents_it_needed_are_removed_an_existing_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = _closed_port_url()
    deep = tmp_path / "a" / "b" / "runs"
    assert main([*EVOLVE, "--iterations", "1", "--database-url", url, "--work-dir", str(deep)]) == 1
    assert not (tmp_path / "a").exists()
    kept = tmp_path / "kept"
    (kept / "job-9-old").mkdir(parents=True)
    assert main([*EVOLVE, "--iterations", "1", "--database-url", url, "--work-dir", str(kept)]) == 1
    assert [p.name for p in kept.iterdir()] == ["job-9-old"]
