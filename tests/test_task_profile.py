"""KERNEVO_PROFILE_DIR: the GPU worker runs each task under cProfile and writes its profile;
scripts/task_profile.py sums them per kind. CPU only: the task function is a stand-in."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from evaluator.child_env import allowed_environment
from evaluator.worker import _run_task

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "task_profile.py"


def _busy_task(task: dict[str, Any]) -> dict[str, Any]:
    deadline = time.perf_counter() + 0.02
    while time.perf_counter() < deadline:
        pass
    return {"kind": task["kind"], "done": True}


def test_without_the_variable_no_profile_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNEVO_PROFILE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert _run_task(_busy_task, {"kind": "time"}) == {"kind": "time", "done": True}
    assert list(tmp_path.rglob("*.prof")) == []


def test_each_task_leaves_a_profile_named_by_its_kind_and_the_script_sums_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "made" / "by-the-worker"
    monkeypatch.setenv("KERNEVO_PROFILE_DIR", str(folder))
    for kind in ("check", "time", "time"):
        assert _run_task(_busy_task, {"kind": kind})["done"]
    names = sorted(p.name.split("-", 1)[0] for p in folder.glob("*.prof"))
    assert names == ["check", "time", "time"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), "--top", "5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "## check: 1 task(s)" in done.stdout and "## time: 2 task(s)" in done.stdout
    assert "_busy_task" in done.stdout


def test_a_task_that_raises_still_leaves_its_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_PROFILE_DIR", str(tmp_path))

    def failing(task: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("candidate fault")

    with pytest.raises(RuntimeError, match="candidate fault"):
        _run_task(failing, {"kind": "champion"})
    assert [p.name.split("-", 1)[0] for p in tmp_path.glob("*.prof")] == ["champion"]


def test_an_unwritable_folder_is_said_once_and_the_result_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KERNEVO_PROFILE_DIR", str(blocker / "sub"))
    assert _run_task(_busy_task, {"kind": "check"}) == {"kind": "check", "done": True}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kernevo: task profile not written to ")


def test_the_worker_child_is_given_the_variable() -> None:
    given = allowed_environment({"KERNEVO_PROFILE_DIR": "/tmp/p", "KERNEVO_API_TOKEN": "x"})
    assert given == {"KERNEVO_PROFILE_DIR": "/tmp/p"}


def test_the_script_says_when_there_is_nothing_to_sum(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and f"no *.prof files in {tmp_path}" in done.stderr
