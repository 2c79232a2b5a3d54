"""Options that contradict each other are usage errors: exit 2, one line, before anything runs
(README's exit codes: "2 a usage or configuration error … a contradictory combination"). A
fresh user's findings: ``kernevo export --path P`` of a path that does not implement ``--op``
in ``--dtype`` exited 1 after opening the database, and ``kernevo evolve --compile-only --gpu
I`` ran, ignoring the GPU, where the worker (``--compile-only --gpus``) and ``POST /v1/jobs``
(``compile_only`` with ``gpu``) refuse the same combination."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_usage import usage_line

from kernevo.cli import main

_EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--iterations", "1"]
_EXPORT = ["export", "--gpu", "nvidia-h200", "-o", "out"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in [n for n in os.environ if n.startswith("KERNEVO_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        [*_EVOLVE, "--compile-only", "--gpu", "0"],
        ["evolve", "--resume", "1", "--compile-only", "--gpu", "1"],
        ["evolve", "--config", "job.yaml", "--gpu", "0", "--compile-only"],
    ],
    ids=["new job", "resume", "job file"],
)
def test_evolve_compile_only_with_a_gpu_is_a_usage_error(
    clean_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    (clean_env / "job.yaml").write_text("path: trsm_small\ndtype: float64\n")
    assert usage_line(capsys, argv) == (
        "kernevo evolve: error: --compile-only runs on no GPU: leave out --gpu "
        "(see kernevo evolve --help)"
    )
    assert sorted(p.name for p in clean_env.iterdir()) == ["job.yaml"]  # no database, no runs/


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            ["--dtype", "float64", "--path", "trsm_small_z64"],
            "path trsm_small_z64 does not implement trsm in float64 (it implements trsm in "
            "complex128)",
        ),
        (
            ["--op", "solve_tri", "--dtype", "float32", "--path", "trsm_small"],
            "path trsm_small does not implement solve_tri in float32 (it implements trsm in "
            "float32, float64, complex64, complex128)",
        ),
    ],
)
def test_export_of_a_path_that_does_not_serve_the_op_in_the_dtype_is_a_usage_error(
    clean_env: Path, capsys: pytest.CaptureFixture[str], options: list[str], says: str
) -> None:
    """Refused before the database is opened: a missing one would otherwise be named first."""
    assert usage_line(capsys, [*_EXPORT, *options]) == (
        f"kernevo export: error: argument --path: {says} (see kernevo export --help)"
    )
    assert sorted(p.name for p in clean_env.iterdir()) == []  # no database, no out/


def test_export_of_a_path_that_serves_the_op_in_the_dtype_goes_on(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check refuses only the contradiction: a matching --path reaches the database (here
    missing: exit 1, infrastructure)."""
    url = f"sqlite:///{clean_env / 'none.db'}"
    argv = [*_EXPORT, "--dtype", "complex128", "--path", "trsm_small_z64", "--database-url", url]
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith(f"kernevo: database {url}: no such file ")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            [*_EVOLVE, "--gpu", "0", "--gpus", "0,1"],
            "--gpu and --gpus exclude each other: with --gpus the job evaluates on a cluster of "
            "the devices it lists",
        ),
        (
            [*_EVOLVE, "--gpus", "0,1", "--scheduler", "tcp://127.0.0.1:9"],
            "--scheduler and --gpus exclude each other (--gpus starts a local cluster)",
        ),
        (
            ["evolve", "--resume", "1", "--config", "job.yaml"],
            "--config cannot be combined with --resume: a job keeps its config",
        ),
        (
            ["evolve", "--resume", "1", "--islands", "2"],
            "--islands cannot change on --resume: a job keeps its config (only --iterations "
            "extends it, and --gpu moves it to another GPU of the same model)",
        ),
        (
            ["worker", "--compile-only", "--gpus", "0"],
            "--compile-only runs on no GPU: leave out --gpus",
        ),
        (
            ["dask-worker", "--scheduler", "tcp://127.0.0.1:9", "--compile-only", "--gpu", "0"],
            "give --gpu I (a GPU worker) or --compile-only (a CPU worker)",
        ),
        (
            ["jobs", "--api-url", "http://127.0.0.1:9", "--database-url", "sqlite:///x.db"],
            "--api-url and --database-url name two places to ask; give one (the service, or "
            "the database directly)",
        ),
    ],
)
def test_the_other_contradictory_combinations_stay_usage_errors(
    clean_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """The combinations that were usage errors already, so that every one reads alike."""
    (clean_env / "job.yaml").write_text("path: trsm_small\ndtype: float64\n")
    command = argv[0]
    assert usage_line(capsys, argv) == (
        f"kernevo {command}: error: {says} (see kernevo {command} --help)"
    )
    assert sorted(p.name for p in clean_env.iterdir()) == ["job.yaml"]
