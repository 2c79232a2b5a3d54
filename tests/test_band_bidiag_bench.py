"""``scripts/bench_band_bidiag.py`` without a GPU (``--lapack-only``): one row per (n, BW,
dtype) with LAPACK's seconds, the command, and the JSON it writes."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import pytest
from script_module import load_script as load_script_file


def load_script() -> ModuleType:
    """The script as the module ``bench_band_bidiag``."""
    return load_script_file("bench_band_bidiag.py", "bench_band_bidiag")


def test_lapack_only_rows_for_every_shape_and_dtype(tmp_path, capsys, monkeypatch):
    bench = load_script()
    out = tmp_path / "rows.json"
    args = ["--n", "64", "130", "--bw", "1", "16", "--dtype", "float32", "float64",
            "--lapack-only", "--json", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["bench_band_bidiag.py", *args])
    assert bench.main(args) == 0
    printed = capsys.readouterr().out
    assert "command: python3 scripts/bench_band_bidiag.py --n 64 130" in printed
    assert "gpu: none" in printed and bench.HEADER in printed
    rows = json.loads(out.read_text())
    assert [(r["n"], r["bw"], r["dtype"]) for r in rows] == [
        (n, bw, dtype) for dtype in ("float32", "float64") for n in (64, 130) for bw in (1, 16)
    ]
    assert all(r["lapack_s"] > 0 and r["kernel_s"] is None for r in rows)
    assert printed.count("| not run |") == 8


def test_a_pool_of_workers_gives_the_same_rows_and_times_one_size_alone(tmp_path, capsys):
    """``--lapack-jobs 2``: the host timings come from worker processes, in the table's order
    (not the pool's largest-first order); ``--solo`` re-times one size in every dtype."""
    bench = load_script()
    out = tmp_path / "rows.json"
    args = ["--n", "64", "200", "--bw", "4", "16", "--dtype", "float32", "float64",
            "--lapack-only", "--lapack-jobs", "2", "--solo", "200", "16",
            "--json", str(out)]  # fmt: skip
    assert bench.main(args) == 0
    printed = capsys.readouterr().out
    assert "lapack: 2 worker process(es)" in printed
    rows = json.loads(out.read_text())
    assert [(r["n"], r["bw"], r["dtype"]) for r in rows] == [
        (n, bw, dtype) for dtype in ("float32", "float64") for n in (64, 200) for bw in (4, 16)
    ]
    assert all(r["lapack_s"] > 0 for r in rows)
    solo = printed[printed.index("alone (after the pool)") :]
    assert "| float32 |" in solo and "| float64 |" in solo


def test_bad_pool_and_solo_arguments_are_one_line_errors(capsys):
    bench = load_script()
    for args, message in [
        (["--lapack-only", "--lapack-jobs", "0"], "--lapack-jobs must be 1 to"),
        (["--lapack-only", "--n", "64", "--bw", "4", "--solo", "64", "8"], "is not one of"),
    ]:
        with pytest.raises(SystemExit) as exited:
            bench.main(args)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
