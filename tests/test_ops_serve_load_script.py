"""scripts/ops_serve_load.py without a GPU: its command line, its one-line errors (a closed port,
a service without a champion, a loader that cannot start) and the REST queries it forms, against
the API on a SQLite database (``tests/ops_service.Service``). The loader's checks themselves
need a GPU and the lead's H200 run."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ops_service import Service
from script_module import load_script

from db import repository as repo
from db.migrate import upgrade
from db.session import make_engine, session_scope
from seeds import registry
from seeds.band_bidiag.lapack import gbbrd
from seeds.solve_tri.reference import forward_substitution

script = load_script("ops_serve_load.py", "ops_serve_load")


def test_the_command_line_defaults_and_a_usage_error(capsys):
    args = script.parse_args(["--api", "http://127.0.0.1:8765", "--cache", "/tmp/c"])
    assert (args.api, args.cache, args.key_dir) == ("http://127.0.0.1:8765", "/tmp/c", None)
    assert (args.gpu_key, args.ops) == ("nvidia-h200", ["solve_tri", "band_bidiag"])
    args = script.parse_args(["--api", "u", "--cache", "c", "--ops", "band_bidiag"])
    assert args.ops == ["band_bidiag"]
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args(["--api", "u", "--cache", "c", "--ops", "trsm"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'trsm'" in capsys.readouterr().err


def test_the_shapes_agree_with_the_registry():
    """The query and timed shapes are served by a path of their op, the outside ones by none."""
    for op in script.OPS:
        assert registry.route(op, "float32", *script.QUERY_SHAPES[op])
        assert script.QUERY_SHAPES[op] in script.TIMED_SHAPES[op]
        assert all(registry.route(op, "float32", *s) for s in script.TIMED_SHAPES[op])
        assert registry.route(op, "float32", *script.OUTSIDE_SHAPES[op]) == []


def test_a_closed_port_is_one_line(tmp_path, capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code = script.main(["--api", f"http://127.0.0.1:{port}", "--cache", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith(f"ops_serve_load: service at http://127.0.0.1:{port} unreachable: ")
    assert "ConnectError" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    upgrade(url)
    return url


@pytest.fixture
def service(database: str) -> Iterator[Service]:
    running = Service(database)
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("op", "words", "bucket"),
    [("solve_tri", "n=64 k=6 b2=4 b3=2", "n256_k128"),
     ("band_bidiag", "n=1024 bandwidth=32", "n1_2048")],
)  # fmt: skip
def test_no_champion_is_the_services_404_in_one_line(service, tmp_path, capsys, op, words, bucket):
    """The query names the op's parameters (else 422): the service routes it to the path's
    bucket and answers that it has no champion there."""
    code = script.main(["--api", service.url, "--cache", str(tmp_path / "c"), "--ops", op])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == (
        f"ops_serve_load: no champion for {op} float32 at {words}: no champion yet for path "
        f"{op} float32 on nvidia-h200 (shape bucket {bucket})\n"
    )


def promote(url: str, path_id: str, timings: list[dict[str, object]]) -> int:
    """An unsigned champion of ``path_id`` float32 on nvidia-h200 in its default bucket, with
    ``timings`` in its metrics and the path's envelope; the cubin is not one (the service serves
    bytes, the loader is not run here). Returns its program id."""
    spec = registry.get_path(path_id)
    verified = [list(shape) for shape in spec.verify_shapes]
    report = {"status": "ok", "combined_score": 2.5, "timings": timings}
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(
                s, path=path_id, dtype="float32", gpu="nvidia-h200",
                shape_bucket=spec.shape_bucket, config={}, backend="offline", model=None,
            )  # fmt: skip
            program, _ = repo.record_program(
                s, job_id=job.id, uid="seed", source="// seed", parent_uid=None, island=0,
                generation=0, iteration=0, diff=None, backend="offline", model=None,
            )  # fmt: skip
            evaluation = repo.record_evaluation(
                s, program_id=program.id, report_json=report, gpu_key="nvidia-h200",
                gpu_name="NVIDIA H200", arch="sm_90", driver_version=None, nvrtc_version=None,
                score=2.5, state="verified", error_kind=None,
            )  # fmt: skip
            repo.promote_champion(
                s, evaluation_id=evaluation.id, path=path_id, dtype="float32",
                gpu_key="nvidia-h200", shape_bucket=spec.shape_bucket, cubin=b"not a cubin",
                launch={"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
                envelope={**spec.envelope, "verified_shapes": verified}, compile_options=[],
            )  # fmt: skip
            return program.id
    finally:
        engine.dispose()


def test_a_champion_is_one_line_and_sets_each_shapes_expected_route(database):
    timing = {"shape": [64, 6, 4, 2], "m": 0, "n": 0, "candidate_us": 3.0, "baseline_us": 7.5}
    program_id = promote(database, "solve_tri", [timing])
    service = Service(database)
    try:
        kernel = script.best_kernel(service.url, "solve_tri", "nvidia-h200", (64, 6, 4, 2))
        line = script.champion_line("solve_tri", (64, 6, 4, 2), kernel)
        assert line == (
            f"solve_tri float32 n=64 k=6 b2=4 b3=2: path solve_tri/n256_k128, program "
            f"{program_id}, score 2.5, 3 us vs baseline 7.5 us (2.50x); envelope n <= 256, "
            "k <= 128, b2 <= 4096, b3 <= 4096"
        )
        assert "not timed at this shape" in script.champion_line(
            "solve_tri", (128, 32, 4, 2), script.best_kernel(
                service.url, "solve_tri", "nvidia-h200", (128, 32, 4, 2))
        )  # fmt: skip
        inside = script.expected_route(service.url, "solve_tri", "nvidia-h200", (256, 128, 4, 2))
        assert inside == script.Expected("kernel", program_id, f"program {program_id}")
        outside = script.expected_route(service.url, "solve_tri", "nvidia-h200", (300, 6, 4, 2))
        assert outside == script.Expected("cublas", None, "no path serves it")
        # band_bidiag has no champion: its in-bucket shapes are expected on LAPACK.
        band = script.expected_route(service.url, "band_bidiag", "nvidia-h200", (1024, 32))
        assert band == script.Expected("lapack", None, "no champion for its shape bucket")
    finally:
        service.stop()


def test_a_loader_that_cannot_start_is_one_line(database, tmp_path, capsys, monkeypatch):
    """After the champion line: kernevo.load's one-line refusal (here a missing GPU, as
    ``kernevo.device.NoGpuError`` says it), exit 1."""
    import kernevo
    from kernevo.device import NoGpuError

    def no_gpu(*args: object, **kwargs: object) -> None:
        raise NoGpuError("no CUDA device (cudaGetDeviceCount: 0)")

    monkeypatch.setattr(kernevo, "load", no_gpu)
    program_id = promote(database, "solve_tri", [])
    service = Service(database)
    try:
        code = script.main(["--api", service.url, "--cache", str(tmp_path / "c"),
                            "--ops", "solve_tri"])  # fmt: skip
    finally:
        service.stop()
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith(f"solve_tri float32 n=64 k=6 b2=4 b3=2: path solve_tri/n256_k128, "
                          f"program {program_id}, score 2.5, not timed at this shape")  # fmt: skip
    assert err == (
        "ops_serve_load: kernevo.load('solve_tri', 'float32'): no CUDA device "
        "(cudaGetDeviceCount: 0)\n"
    )


# --- the checks, on the host: CuPy replaced by NumPy, the solver by a reference solve ----------


@pytest.fixture
def host_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cupy`` as NumPy for the script's checks: asarray copies, as a host-to-device copy does."""
    fake = SimpleNamespace(
        asarray=np.array, asnumpy=np.asarray, asfortranarray=np.asfortranarray,
        array_equal=np.array_equal,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "cupy", fake)


class HostSolver:
    """A loader stand-in: ``op``'s result on the host by ``solve`` (solve_tri in place in b,
    band_bidiag returning (d, e)), reported as program 7's kernel."""

    def __init__(self, op: str, solve: Callable[..., Any]) -> None:
        self.op = op
        self.solve = solve

    def __call__(self, *operands: Any) -> Any:
        return self.solve(*operands)

    def runs_kernel(self, *operands: Any) -> bool:
        return True

    def explain(self, *shape: int) -> Any:
        return SimpleNamespace(champion=SimpleNamespace(program_id=7))


def solve_in_place(a: np.ndarray, b: np.ndarray, bad_row: int | None = None) -> np.ndarray:
    b[...] = forward_substitution(a, b)
    if bad_row is not None:
        b[..., bad_row, :] *= 1 + 1e-3
    return b


def test_solve_tri_results_within_the_bound_pass_and_others_fail(host_cupy):
    kernel = script.Expected("kernel", 7, "program 7")
    failures: list[str] = []
    good = HostSolver("solve_tri", solve_in_place)
    row = script.check_shape(good, "solve_tri", (64, 6, 4, 2), kernel, failures)
    assert row.startswith(
        "| solve_tri | (64, 6, 4, 2) | kernel (program 7) | kernel (program 7) | "
    )
    assert " x bound (row error " in row and row.endswith("| ok |") and failures == []
    bad = HostSolver("solve_tri", lambda a, b: solve_in_place(a, b, bad_row=40))
    row = script.check_shape(bad, "solve_tri", (64, 6, 4, 2), kernel, failures)
    assert row.endswith("| FAIL |") and len(failures) == 1
    assert failures[0].startswith("solve_tri (64, 6, 4, 2): ") and " x bound (row error " in row
    copy = HostSolver("solve_tri", lambda a, b: solve_in_place(a, b.copy()))
    script.check_shape(copy, "solve_tri", (11, 5, 1, 1), kernel, failures)
    assert failures[1] == "solve_tri (11, 5, 1, 1): X not written in place in b"


def test_a_route_or_program_other_than_expected_fails(host_cupy):
    failures: list[str] = []
    solver = HostSolver("solve_tri", solve_in_place)
    cublas = script.Expected("cublas", None, "no path serves it")
    row = script.check_shape(solver, "solve_tri", (11, 5, 1, 1), cublas, failures)
    assert row.endswith("| FAIL |")
    assert failures == ["solve_tri (11, 5, 1, 1): routed to kernel, expected cublas"]
    other = script.Expected("kernel", 8, "program 8")
    script.check_shape(solver, "solve_tri", (11, 5, 1, 1), other, failures)
    assert failures[1] == "solve_tri (11, 5, 1, 1): ran program 7, the service's is 8"


def test_band_bidiag_lapacks_reduction_passes_an_unreduced_or_written_band_fails(host_cupy):
    kernel = script.Expected("kernel", 7, "program 7")
    failures: list[str] = []
    row = script.check_shape(HostSolver("band_bidiag", gbbrd), "band_bidiag", (129, 32),
                             kernel, failures)  # fmt: skip
    assert row.endswith("| ok |") and " x bound (" in row and failures == []

    def unreduced(band: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return band[-1].copy(), band[-2, 1:].copy()  # the band's diagonals, never reduced

    script.check_shape(HostSolver("band_bidiag", unreduced), "band_bidiag", (129, 32), kernel,
                       failures)  # fmt: skip
    assert failures[0].startswith("band_bidiag (129, 32): singular_values: ")

    def writes(band: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d, e = gbbrd(band)
        band[0, -1] += 1.0
        return d, e

    script.check_shape(HostSolver("band_bidiag", writes), "band_bidiag", (129, 32), kernel,
                       failures)  # fmt: skip
    assert failures[1] == "band_bidiag (129, 32): the band was written"
