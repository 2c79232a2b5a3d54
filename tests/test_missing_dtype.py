"""A known dtype that a path or an op has no kernel in is said as such, in the same words
everywhere (fresh-user trial: ``evolve --path solve_tri --dtype float64`` said "unknown dtype
'float64'; expected one of float32", as did ``kernevo.load("solve_tri", "float64")``;
``best --op solve_tri --dtype float64`` asked the service and exited 1 with its 422, ``export``
exited 1). ``seeds.spec.MissingDtypeError`` (an ``UnknownDtypeError``, so callers catching that
keep working) words it; ``best`` and ``export`` check it before anything runs, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_usage import usage_line

import kernevo
from seeds.spec import MissingDtypeError, UnknownDtypeError, check_dtype

SOLVE_TRI_F64 = "op solve_tri has no float64 kernel; it implements float32"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_words_of_a_missing_and_of_an_unknown_dtype() -> None:
    with pytest.raises(MissingDtypeError) as missing:
        check_dtype("float64", ("float32",), owner="path solve_tri")
    assert str(missing.value) == "path solve_tri has no float64 kernel; it implements float32"
    assert isinstance(missing.value, UnknownDtypeError) and isinstance(missing.value, ValueError)
    assert (missing.value.dtype, missing.value.owner, missing.value.implemented) == (
        "float64",
        "path solve_tri",
        ("float32",),
    )
    with pytest.raises(MissingDtypeError, match="^no complex64 kernel here; implemented: "):
        check_dtype("complex64", ("float32", "float64"))
    with pytest.raises(UnknownDtypeError) as unknown:
        check_dtype("float16", ("float32",), owner="path solve_tri")
    assert type(unknown.value) is UnknownDtypeError
    assert str(unknown.value) == "unknown dtype 'float16'; expected one of float32"


def test_evolve_names_the_path_that_lacks_the_dtype(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage_line(capsys, ["evolve", "--path", "solve_tri", "--dtype", "float64"]) == (
        "kernevo evolve: error: argument --dtype: path solve_tri has no float64 kernel; it "
        "implements float32 (see kernevo evolve --help)"
    )
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("op", "dtype", "message"),
    [
        ("solve_tri", "float64", SOLVE_TRI_F64),
        ("band_bidiag", "complex64", "op band_bidiag has no complex64 kernel; it implements "
         "float32, float64"),
    ],
)  # fmt: skip
def test_load_names_the_op_that_lacks_the_dtype(op: str, dtype: str, message: str) -> None:
    """Before the GPU is asked: no device here."""
    with pytest.raises(UnknownDtypeError) as raised:
        kernevo.load(op, dtype)
    assert type(raised.value) is MissingDtypeError
    assert str(raised.value) == message


def test_best_checks_the_dtype_before_asking_the_service(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service at port 1 would be unreachable (exit 1): the refusal comes first."""
    argv = ["best", "--op", "solve_tri", "--dtype", "float64", "--shape", "n=64,k=6,b2=4,b3=2"]
    argv += ["--gpu", "nvidia-h200", "--api-url", "http://127.0.0.1:1"]
    assert usage_line(capsys, argv) == (
        f"kernevo best: error: argument --dtype: {SOLVE_TRI_F64} (see kernevo best --help)"
    )


@pytest.mark.parametrize("path", [[], ["--path", "solve_tri"]])
def test_export_checks_the_dtype_before_the_database(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], path: list[str]
) -> None:
    argv = ["export", "--op", "solve_tri", "--dtype", "float64", "--gpu", "nvidia-h200"]
    assert usage_line(capsys, [*argv, *path, "-o", "out"]) == (
        f"kernevo export: error: argument --dtype: {SOLVE_TRI_F64} (see kernevo export --help)"
    )
    assert list(in_tmp.iterdir()) == []  # neither a database nor the output folder
