"""``kernevo bench-loader`` on the CPU (issue 11, Build item 5): its arguments, its one-line
error without a GPU, its problems, the lines it prints, and the seed resolver that serves each
path's seed kernel (compiled with NVRTC, which needs no GPU). The measurements themselves run
on the GPU (tests/test_loader_fast_path_gpu.py)."""

from __future__ import annotations

import argparse
import ctypes

import numpy as np
import pytest

from kernevo import cli
from kernevo.bench_loader import (
    DEFAULT_SHAPES,
    Measurement,
    SeedResolver,
    ShapeResult,
    add_arguments,
    make_problem,
    shape_arg,
    wrong,
)
from kernevo.device import GpuInfo

H200 = GpuInfo(index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_arguments_and_their_defaults() -> None:
    args = parse("--dtype", "float64", "complex64", "--shapes", "16x16", "33X7", "--seed")
    assert (args.op, args.dtype, args.shapes) == (
        "trsm",
        ["float64", "complex64"],
        [(16, 16), (33, 7)],
    )
    assert (args.calls, args.graph_calls, args.replays, args.seed, args.json) == (
        3000, 100, 20, True, None,
    )  # fmt: skip
    assert parse("--dtype", "float32").shapes == list(DEFAULT_SHAPES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16", "expected MxN such as 16x16"),
        ("16x", "expected MxN"),
        ("axb", "expected MxN"),
        ("16x16x2", "expected MxN"),
        ("-1x4", "m must be 1..2147483647, not -1"),
        ("0x4", "m must be 1..2147483647, not 0"),
        ("4x2147483648", "n must be 1..2147483647, not 2147483648"),
    ],
)
def test_shapes_that_are_not_problems_are_refused(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        shape_arg(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
        (["--op", "gemm", "--dtype", "float64"], "argument --op: invalid choice: 'gemm'"),
        (["--dtype", "float64", "--shapes", "16y16"], "expected MxN such as 16x16"),
        (["--dtype", "float64", "--calls", "0"], "--calls must be 1..1000000, not '0'"),
        (["--dtype", "float64", "--replays", "x"], "--replays must be 1..10000"),
        ([], "the following arguments are required: --dtype"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["bench-loader", *argv])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.count("\n") == 1 and err.startswith("kernevo bench-loader: error: ")
    assert message in err


def test_a_bad_kernevo_variable_is_a_usage_error_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNEVO_REQUEST_TIMEOUT_S", "abc")
    assert cli.main(["bench-loader", "--dtype", "float64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernevo: KERNEVO_REQUEST_TIMEOUT_S='abc'") and err.count("\n") == 1


def test_without_a_gpu_it_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("an NVIDIA driver is installed here")

    status = cli.main(["bench-loader", "--dtype", "float64", "--shapes", "16x16"])

    captured = capsys.readouterr()
    assert status == 1 and captured.out == ""
    assert captured.err.startswith("kernevo: bench-loader needs a GPU: no CUDA GPU found: ")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_problems_solve_in_place_thousands_of_times_without_overflow(dtype: str) -> None:
    a, b, x = make_problem(48, 5, dtype, seed=3)
    assert a.dtype == b.dtype == np.dtype(dtype) and np.array_equal(a, np.tril(a))
    wide = np.tril(a).astype(np.complex128 if dtype.startswith("complex") else np.float64)
    np.testing.assert_allclose(wide @ x, b, rtol=0, atol=1e-12)
    # ||A^-1||_inf <= 1 / (1 - ||L||_inf) with ||L||_inf <= 1e-3 (Neumann series): 3000 solves
    # in place grow B by at most e^3.
    strictly_lower = np.abs(np.tril(wide, -1)).sum(axis=1).max()
    assert strictly_lower <= 1e-3
    inverse = np.linalg.inv(wide)
    assert np.abs(inverse).sum(axis=1).max() <= 1 / (1 - 1e-3)


def _result(**walls: float) -> ShapeResult:
    measurements = tuple(
        Measurement(name, wall, None if name == "cublas" else wall / 2, 1e-16, name != "driver",
                    "capture refused: NotImplementedError" if name == "cublas" else "")
        for name, wall in walls.items()
    )  # fmt: skip
    return ShapeResult("float64", 16, 16, "kernel", "seed of trsm_small/m64n64 compiled here",
                       12.5, measurements)  # fmt: skip


def test_the_lines_name_each_way_its_times_and_the_loaders_overhead() -> None:
    result = _result(loaded=4.5, launch=3.75, driver=9.0, cublas=20.25)
    lines = result.lines()

    assert lines[0] == (
        "trsm float64 m=16 n=16: loaded -> kernel (seed of trsm_small/m64n64 compiled here); "
        "first call 12.5 ms"
    )
    assert lines[2].split() == ["loaded", "4.50", "2.25", "1.0e-16", "ok"]
    assert lines[4].split() == ["driver", "9.00", "4.50", "1.0e-16", "WRONG"]
    assert lines[5].split()[:5] == ["cublas", "20.25", "n/a", "1.0e-16", "ok"]
    assert lines[5].endswith("(capture refused: NotImplementedError)")
    assert lines[6] == (
        "  loader overhead per call: +0.75 us over its prepared launch, -4.50 us over the driver's"
    )
    assert wrong([result]) == ["float64 m=16 n=16 driver"]


def test_a_shape_the_fallback_answers_prints_no_overhead() -> None:
    lines = _result(loaded=20.0, cublas=19.0).lines()
    assert not any("overhead" in line for line in lines)


def test_the_seed_resolver_serves_each_paths_seed_compiled_here(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNEVO_COMPILE_CACHE", str(tmp_path))
    resolver = SeedResolver("trsm", "float64", H200)

    inside = resolver.resolve(16, 16)
    assert (inside.route, inside.path, inside.shape_bucket) == ("kernel", "trsm_small", "m64n64")
    assert inside.reason == "seed of trsm_small/m64n64 compiled here (--seed)"
    champion = inside.champion
    assert champion.cubin.startswith(b"\x7fELF") and champion.arch == "sm_90"
    assert (champion.kernel_name, champion.config_kernel_name) == (
        "trsm_small_kernel", "kernevo_launch_config",
    )  # fmt: skip
    assert resolver.resolve(64, 64).champion is champion  # compiled once per path and bucket

    nowhere = resolver.resolve(100, 100)
    assert (nowhere.route, nowhere.reason) == ("cublas", "no path serves m=100 n=100")
    failed = resolver.mark_failed((16, 16), RuntimeError("launch failed"))
    assert (failed.route, failed.reason) == ("cublas", "kernel error: RuntimeError: launch failed")
    assert resolver.resolve(16, 16) is failed
