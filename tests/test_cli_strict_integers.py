"""Integers on the ``kernevo`` command line are plain decimal digits, one rule for every option,
``best --shape``'s values and ``bench-loader --shapes``' sides, and a value out of range is told
the op's own range (fresh-user trial: ``--shape n=99999999999999999999,…`` said "must be
-9223372036854775808..9223372036854775807", ``n=6_4`` and ``n=+64`` were taken but ``n=64.0``
refused; ``bench-loader --shapes -1x16`` said argparse's "expected at least one argument").
Also: ``best --help`` and README name trsm_batched's shape parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_usage import usage_line

from kernevo.cli import main

BEST = ["best", "--op", "solve_tri", "--dtype", "float32", "--gpu", "nvidia-h200"]
BENCH = ["bench-loader", "--op", "trsm", "--dtype", "float64", "--shapes"]
N_RANGE = "solve_tri takes 1 <= n <= 2147483647 (rows and columns of each A, rows of each B)"
USAGE = "(--shape n=…,k=…,b2=…,b3=…)"
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("n", ["99999999999999999999", "9999999999", "0", "-3"])
def test_a_shape_value_out_of_range_is_told_the_ops_range(
    capsys: pytest.CaptureFixture[str], n: str
) -> None:
    line = usage_line(capsys, [*BEST, "--shape", f"n={n},k=6,b2=4,b3=2"])
    assert line == (
        f"kernevo best: error: n={int(n)} is out of range: {N_RANGE} {USAGE} "
        "(see kernevo best --help)"
    )
    by_option = usage_line(capsys, [*BEST, "--n", n, "--shape", "k=6,b2=4,b3=2"])
    assert by_option == line


def test_a_shape_value_of_over_30_digits_is_told_its_length(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not converted (nor echoed whole): as every integer option says of such a number."""
    line = usage_line(capsys, [*BEST, "--shape", f"n={'9' * 200},k=6,b2=4,b3=2"])
    assert line == (
        f"kernevo best: error: n is out of range: {N_RANGE}, not a 200-digit number {USAGE} "
        "(see kernevo best --help)"
    )


@pytest.mark.parametrize("n", ["6_4", "+64", "64.0", "1e3", "0x40", "\u0666\u0664", "6 4"])
def test_a_shape_value_not_in_decimal_digits_is_refused_alike(
    capsys: pytest.CaptureFixture[str], n: str
) -> None:
    line = usage_line(capsys, [*BEST, "--shape", f"n={n},k=6,b2=4,b3=2"])
    assert line == (
        f"kernevo best: error: argument --shape: expected an integer value of n, not {n!r} "
        "(decimal digits only) (see kernevo best --help)"
    )


@pytest.mark.parametrize(
    ("argv", "option", "what"),
    [
        (["best", "--dtype", "float64", "--gpu", "h", "--n", "8", "--m"], "--m",
         "an integer value of m"),
        (["evolve", "--path", "trsm_small", "--dtype", "float64", "--gpu"], "--gpu",
         "a device index"),
        (["jobs", "--limit"], "--limit", "a positive integer"),
        (["cancel"], "JOB", "a job id"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("value", ["+5", "5_0", " 5", "5.0", "\u0665"])
def test_every_integer_option_takes_decimal_digits_only(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, value: str, what: str
) -> None:
    line = usage_line(capsys, [*argv, value])
    assert line == (
        f"kernevo {argv[0]}: error: argument {option}: expected {what}, not {value!r} "
        f"(decimal digits only) (see kernevo {argv[0]} --help)"
    )


def test_a_negative_value_is_still_told_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_line(capsys, ["jobs", "--limit", "-3"])
    assert line == (
        "kernevo jobs: error: argument --limit: a positive integer must be 1..2147483647, not -3 "
        "(see kernevo jobs --help)"
    )


@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ("-1x16", "shape -1x16: m must be 1..2147483647, not -1"),
        ("16x-1", "shape 16x-1: n must be 1..2147483647, not -1"),
        ("0x16", "shape 0x16: m must be 1..2147483647, not 0"),
        ("16x99999999999", "shape 16x99999999999: n must be 1..2147483647, not 99999999999"),
        ("+1x16", "expected MxN such as 16x16 (decimal digits, 1 <= M, N <= 2147483647), not "
         "'+1x16'"),
        ("1_6x16", "expected MxN such as 16x16 (decimal digits, 1 <= M, N <= 2147483647), not "
         "'1_6x16'"),
    ],
)  # fmt: skip
def test_bench_loader_shapes_are_checked_by_their_type(
    capsys: pytest.CaptureFixture[str], shape: str, says: str
) -> None:
    """``-1x16`` reaches the type as a value (kernevo.cli.strict_parser._NEGATIVE_VALUE), also
    after a good shape and in ``--shapes=-1x16``."""
    expected = (
        f"kernevo bench-loader: error: argument --shapes: {says} (see kernevo bench-loader --help)"
    )
    assert usage_line(capsys, [*BENCH, shape]) == expected
    assert usage_line(capsys, [*BENCH, "16x16", shape]) == expected
    assert usage_line(capsys, [*BENCH[:-1], f"--shapes={shape}"]) == expected


def test_bench_loader_measures_trsm_only(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_line(capsys, ["bench-loader", "--op", "solve_tri", "--dtype", "float32"])
    assert line == (
        "kernevo bench-loader: error: argument --op: invalid choice: 'solve_tri' (choose from "
        "'trsm') (see kernevo bench-loader --help)"
    )
    row = "`kernevo bench-loader --op trsm --dtype float64 [--shapes 16x16 32x32 …] [--seed]`"
    assert f"{row} | trsm only (`--op` takes `trsm` alone;" in README.read_text()


def test_trsm_batched_shape_parameters_are_documented(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["best", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "trsm_batched m,n 1..64, batch 1..2147483647" in help_text
    readme = README.read_text()
    assert "`trsm_batched` `m,n,batch` (`--shape m=32,n=32,batch=1000`; 1 ≤ m, n ≤ 64)" in readme
    assert "op=trsm_batched&dtype=float32&gpu=nvidia-h200&m=32&n=32&batch=1000" in readme
