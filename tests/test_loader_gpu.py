"""The loader against the real service: FastAPI app on a SQLite database where the seed kernel
was promoted to champion through ``db.repository``, served by uvicorn in a thread.

``test_loader_routes_from_the_real_service`` runs on CPU (routing only: NVRTC compiles without a
GPU, the identity of an H200 is given). ``test_champion_solves_like_cublas`` is marked ``gpu``:
it launches the champion and cuBLAS on the device and compares them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kernevo
from kernevo.cache import ChampionCache
from kernevo.client import service_fetcher
from kernevo.device import GpuInfo
from kernevo.resolver import Resolver
from seeds.trsm_small.spec import TRSM_SMALL

H200 = GpuInfo(index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90")


@dataclass
class LiveService:
    """A running service: its URL, the champion's program id and the cubin it serves."""

    url: str
    program_id: int
    cubin: bytes
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "uvicorn did not stop"


def start_service(db_dir: Path, gpu: GpuInfo, dtype: str) -> LiveService:
    """Migrate a fresh SQLite database, promote the seed kernel compiled for ``gpu.arch`` as the
    champion of (trsm_small, dtype, gpu.key, m64n64), and serve it on a free local port."""
    import uvicorn

    from api.app import create_app
    from db import repository as repo
    from db.migrate import upgrade
    from db.session import make_engine, session_scope
    from evaluator.compile import compile_cubin

    url = f"sqlite:///{db_dir / 'kernevo.db'}"
    upgrade(url)
    source = TRSM_SMALL.seed_source()
    options = TRSM_SMALL.compile_options(dtype, gpu.arch)
    compiled = compile_cubin(source, options, gpu.arch, cache_dir=db_dir / "cubin")
    assert compiled.ok, compiled.log
    verified = [list(shape) for shape in TRSM_SMALL.verify_shapes]
    report = {"status": "ok", "verified_shapes": verified, "compile": compiled.summary()}
    engine = make_engine(url)
    with session_scope(engine) as s:
        job = repo.create_job(
            s, path=TRSM_SMALL.path_id, dtype=dtype, gpu=gpu.key,
            shape_bucket=TRSM_SMALL.shape_bucket, config={}, backend="offline", model=None,
        )  # fmt: skip
        program, _ = repo.record_program(
            s, job_id=job.id, uid="seed", source=source, parent_uid=None, island=0,
            generation=0, iteration=0, diff=None, backend="offline", model=None,
        )  # fmt: skip
        evaluation = repo.record_evaluation(
            s, program_id=program.id, report_json=report, gpu_key=gpu.key, gpu_name=gpu.name,
            arch=gpu.arch, driver_version=None, nvrtc_version=compiled.nvrtc_version,
            score=1.0, state="verified", error_kind=None,
        )  # fmt: skip
        repo.promote_champion(
            s, evaluation_id=evaluation.id, path=TRSM_SMALL.path_id, dtype=dtype,
            gpu_key=gpu.key, shape_bucket=TRSM_SMALL.shape_bucket, cubin=compiled.cubin,
            launch={"kernel": TRSM_SMALL.kernel_name,
                    "config_kernel": TRSM_SMALL.config_kernel_name},
            envelope={**TRSM_SMALL.envelope, "verified_shapes": verified},
            compile_options=options,
        )  # fmt: skip
        program_id = program.id
    engine.dispose()

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(url), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    return LiveService(f"http://127.0.0.1:{port}", program_id, compiled.cubin, server, thread)


@pytest.fixture
def h200_service(tmp_path: Path) -> Iterator[LiveService]:
    service = start_service(tmp_path, H200, "float64")
    yield service
    service.stop()


def test_loader_routes_from_the_real_service(h200_service: LiveService, tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path / "cache")

    def resolver(url: str) -> Resolver:
        fetch = service_fetcher(url, op="trsm", timeout_s=2.0)
        return Resolver("trsm", "float64", gpu=H200, fetch=fetch, cache=cache)

    online = resolver(h200_service.url)
    decision = online.resolve(64, 64)
    assert (decision.route, decision.reason) == (
        "kernel",
        f"champion program {h200_service.program_id} from service",
    )
    assert decision.champion is not None and decision.champion.cubin == h200_service.cubin
    assert online.resolve(100, 100).reason == "no path serves m=100 n=100"

    h200_service.stop()
    offline = resolver(h200_service.url).resolve(33, 7)
    assert offline.route == "kernel"
    assert offline.reason.startswith(
        f"champion program {h200_service.program_id} from disk cache (service unreachable"
    )


# --- on the GPU -------------------------------------------------------------------------------


@pytest.fixture
def device_service(tmp_path: Path) -> Iterator[LiveService]:
    """The service with the seed promoted for this device (tests/conftest.py skips ``gpu``
    tests where no device answers)."""
    from kernevo.device import current_gpu

    service = start_service(tmp_path, current_gpu(), "float64")
    yield service
    service.stop()


def _problem(m: int, n: int, seed: int) -> tuple[Any, Any]:
    """Lower-triangular A (NaN above the diagonal: never read) with bounded growth of X
    (diagonal in [1, 2], off-diagonal entries in [-1, 1]/m), and B; both float64, Fortran order."""
    import cupy

    rng = cupy.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, (m, m)) / m + cupy.diag(rng.uniform(1.0, 2.0, m))
    a = cupy.asfortranarray(cupy.where(cupy.triu(cupy.ones((m, m), bool), 1), cupy.nan, a))
    b = cupy.asfortranarray(rng.uniform(-1.0, 1.0, (m, n)))
    return a, b


def _relative_error(x: Any, reference: Any) -> float:
    import cupy

    return float(cupy.linalg.norm(x - reference) / cupy.linalg.norm(reference))


@pytest.mark.gpu
def test_champion_solves_like_cublas(device_service: LiveService, tmp_path: Path) -> None:
    from cupyx.scipy.linalg import solve_triangular

    cache_dir = tmp_path / "loader-cache"
    solver = kernevo.load("trsm", "float64", api_url=device_service.url, cache_dir=cache_dir)
    from_service = f"champion program {device_service.program_id} from service"

    # Inside the envelope: the kernel runs and agrees with cuBLAS. 1e-10 relative (Frobenius)
    # is far above the ~1e-15 rounding of these well-conditioned systems and far below any bug.
    for seed, (m, n) in enumerate([(64, 64), (33, 7), (1, 1), (63, 48)]):
        a, b = _problem(m, n, seed)
        expected = solve_triangular(a, b.copy(), lower=True)
        assert solver(a, b) is b
        assert _relative_error(b, expected) <= 1e-10, (m, n)
        assert (solver.explain(m, n).route, solver.explain(m, n).reason) == ("kernel", from_service)

    # Beyond every path: cuBLAS, and the result is still right.
    a, b = _problem(100, 100, 7)
    expected = solve_triangular(a, b.copy(), lower=True)
    solver(a, b)
    assert _relative_error(b, expected) <= 1e-10
    assert solver.explain(100, 100).route == "cublas"
    assert solver.explain(100, 100).reason == "no path serves m=100 n=100"

    # Service gone: a fresh loader on the same cache still runs the verified kernel.
    device_service.stop()
    offline = kernevo.load("trsm", "float64", api_url=device_service.url, cache_dir=cache_dir)
    a, b = _problem(48, 48, 11)
    expected = solve_triangular(a, b.copy(), lower=True)
    offline(a, b)
    assert _relative_error(b, expected) <= 1e-10
    decision = offline.explain(48, 48)
    assert decision.route == "kernel"
    assert decision.reason.startswith(
        f"champion program {device_service.program_id} from disk cache (service unreachable"
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("a_dtype", "b_dtype", "order"),
    [("float64", "float64", "C"), ("complex64", "complex64", "F"), ("float32", "complex128", "C")],
)
def test_cublas_fallback_solves_in_place_in_any_layout(
    a_dtype: str, b_dtype: str, order: str
) -> None:
    import cupy

    from kernevo.fallback import cublas_trsm

    a, b = _problem(37, 5, 3)
    a = cupy.tril(cupy.nan_to_num(a)).astype(a_dtype, order=order)
    b = b.astype(b_dtype, order=order)
    expected = cupy.linalg.solve(a.astype(b_dtype), b)  # A is lower: a general solve agrees

    assert cublas_trsm(a, b) is b
    # b's precision decides: single-precision rounding (6e-8) grown over a well-conditioned
    # 37×37 solve stays far below 1e-5; double precision far below 1e-10.
    tolerance = 1e-5 if b_dtype == "complex64" else 1e-10
    assert _relative_error(b, expected) <= tolerance
