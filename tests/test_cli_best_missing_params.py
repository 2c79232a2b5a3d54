"""``kernevo best`` names every problem of the shape it was given in one line, as ``GET
/v1/kernels/best``'s 422 names them all: every missing parameter of the op at once (a fresh
user's finding: only the first was named, so each try found one more), beside names of another
op and values out of range. A usage error: exit 2, nothing asked of the service."""

from __future__ import annotations

import pytest
from cli_usage import usage_line

_BEST = ["best", "--dtype", "float32", "--gpu", "nvidia-h200", "--api-url", "http://127.0.0.1:9"]
_TRI_MEANINGS = {
    "n": "rows and columns of each A, rows of each B",
    "k": "columns of each B (right-hand sides)",
    "b2": "batch size in ggml's third dimension",
    "b3": "batch size in ggml's fourth dimension",
}
_TRI_USAGE = "(--shape n=…,k=…,b2=…,b3=…) (see kernevo best --help)"


def _usage_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of ``kernevo best`` refused as a usage error (exit 2)."""
    return usage_line(capsys, [*_BEST, *argv])


def test_every_missing_parameter_is_named_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _usage_line(capsys, "--op", "solve_tri", "--shape", "n=64")
    k, b2, b3 = (f"{name} ({_TRI_MEANINGS[name]})" for name in ("k", "b2", "b3"))
    assert line == f"kernevo best: error: solve_tri needs {k}, {b2} and {b3} {_TRI_USAGE}"


def test_two_missing_parameters_are_joined_by_and(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_line(capsys, "--op", "solve_tri", "--shape", "n=64,k=6")
    assert line == (
        f"kernevo best: error: solve_tri needs b2 ({_TRI_MEANINGS['b2']}) and b3 "
        f"({_TRI_MEANINGS['b3']}) {_TRI_USAGE}"
    )


def test_one_missing_parameter_reads_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_line(capsys, "--m", "64")
    assert line == (
        "kernevo best: error: trsm needs n (columns of B) (--shape m=…,n=…) "
        "(see kernevo best --help)"
    )


def test_names_of_another_op_missing_parameters_and_ranges_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What the API's 422 lists for the same query (``tests/test_api_ops.py``), in one line:
    the foreign name, the missing parameters, the value out of range."""
    line = _usage_line(capsys, "--op", "solve_tri", "--shape", "n=0,m=3,b2=4")
    assert line == (
        "kernevo best: error: m is not a shape parameter of solve_tri (its parameters: n, k, "
        "b2, b3); m is a parameter of trsm, trsm_batched; "
        f"solve_tri needs k ({_TRI_MEANINGS['k']}) and b3 ({_TRI_MEANINGS['b3']}); "
        "n=0 is out of range: solve_tri takes 1 <= n <= 2147483647 "
        f"({_TRI_MEANINGS['n']}) {_TRI_USAGE}"
    )


def test_a_relation_is_checked_once_every_parameter_is_valid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _usage_line(capsys, "--op", "band_bidiag", "--shape", "n=8,bandwidth=8")
    assert line == (
        "kernevo best: error: band_bidiag needs bandwidth <= n - 1; got n=8, bandwidth=8 "
        "(--shape n=…,bandwidth=…) (see kernevo best --help)"
    )
