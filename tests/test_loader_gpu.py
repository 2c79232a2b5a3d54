"""The loader against the real service: FastAPI app on a SQLite database where the seed kernel
was promoted to champion through ``db.repository`` (signed with a key made for the run, or
unsigned), served by uvicorn in a thread.

``test_loader_routes_from_the_real_service`` runs on CPU (routing only: NVRTC compiles without a
GPU, the identity of an H200 is given). The ``gpu`` tests launch the champion and cuBLAS on the
device and compare them; ``test_only_a_signed_champion_runs`` also shows every refusal falling
back to cuBLAS with the right answer, and prints one summary line for docs/RESULTS.md.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import unused_port
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import kernevo
from kernevo.cache import ChampionCache, payload_sha256
from kernevo.certificate import certificate_sha256
from kernevo.client import service_fetcher
from kernevo.device import GpuInfo
from kernevo.keys import public_raw_of
from kernevo.resolver import Resolver
from kernevo.signature import key_id, sign, signed_payload
from kernevo.trust import TrustPolicy
from seeds.trsm_small.spec import TRSM_SMALL

H200 = GpuInfo(index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90")
# Made in memory for this run: never written anywhere, never committed.
SIGNER = Ed25519PrivateKey.generate()
STRANGER = Ed25519PrivateKey.generate()
# The seed stands in for an evolved champion; the store promotes only scores above 1.0.
SCORE = 1.5


def b64_public(key: Ed25519PrivateKey) -> str:
    """The public key as ``KERNEVO_TRUSTED_KEYS`` takes it: base64 of the 32 raw bytes."""
    return base64.b64encode(public_raw_of(key)).decode()


def trusting(*keys: Ed25519PrivateKey) -> TrustPolicy:
    return TrustPolicy({key_id(public_raw_of(k)): public_raw_of(k) for k in keys})


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


def seed_certificate(gpu: GpuInfo, verified: list[list[int]]) -> dict[str, Any]:
    """A certificate for the seed promoted by :func:`start_service`, recording ``gpu``'s own
    driver and toolkit (so the loader on that device states no difference). The schema asks
    every certificate to claim the checks a verification runs (``REQUIRED_CHECKS``); this one,
    made by the test for the seed (which the evaluator's own GPU tests verify), says so in
    ``not_verified``."""
    from kernevo.certificate import CERTIFICATE_FORMAT, REQUIRED_CHECKS, Certificate

    return Certificate(
        checks_passed=list(REQUIRED_CHECKS[CERTIFICATE_FORMAT]),
        input_seeds=[],
        held_out_seeds=[],
        verified_shapes=[(m, n) for m, n in verified],
        held_out_shapes=[],
        determinism_shapes=[],
        sanitizer_tools=[],
        sanitizer_version=None,
        sanitizer_shapes={},
        gpu_name=gpu.name,
        gpu_key=gpu.key,
        arch=gpu.arch,
        nvidia_driver_version=gpu.nvidia_driver_version or None,
        cuda_driver_api_version=gpu.cuda_driver_api_version or None,
        cuda_runtime_version=None,
        nvrtc_version=gpu.nvrtc_version or None,
        timings=[],
        noise_floor=None,
        input_scales=[],
        not_verified=[
            "everything: a test promotion of the seed, compiled here and not verified; its "
            "checks are claimed because the schema requires them"
        ],
    ).to_json_dict()


def start_service(
    db_dir: Path,
    gpu: GpuInfo,
    dtype: str,
    signer: Ed25519PrivateKey | None = SIGNER,
    *,
    certified: bool = True,
) -> LiveService:
    """Migrate a fresh SQLite database, promote the seed kernel compiled for ``gpu.arch`` as the
    champion of (trsm_small, dtype, gpu.key, m64n64), signed by ``signer`` (``None``: unsigned)
    as ``evolver.champion`` signs, with a certificate unless ``certified`` is False (a promotion
    from before certificates), and serve it on a free local port."""
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
            score=SCORE, state="verified", error_kind=None,
        )  # fmt: skip
        launch = {"kernel": TRSM_SMALL.kernel_name, "config_kernel": TRSM_SMALL.config_kernel_name}
        envelope = {**TRSM_SMALL.envelope, "verified_shapes": verified}
        certificate = seed_certificate(gpu, verified) if certified else None
        signature, signing_key_id = None, None
        if signer is not None:
            payload = signed_payload(
                path=TRSM_SMALL.path_id, dtype=dtype, gpu=gpu.key,
                shape_bucket=TRSM_SMALL.shape_bucket, program_id=program.id, arch=gpu.arch,
                cubin_sha256=repo.sha256_hex(compiled.cubin), source_sha256=repo.sha256_hex(source),
                launch=launch, envelope=envelope, compile_options=options,
                nvrtc_version=compiled.nvrtc_version,
                certificate_sha256=certificate_sha256(certificate),
            )  # fmt: skip
            signature, signing_key_id = sign(signer, payload), key_id(public_raw_of(signer))
        repo.promote_champion(
            s, evaluation_id=evaluation.id, path=TRSM_SMALL.path_id, dtype=dtype,
            gpu_key=gpu.key, shape_bucket=TRSM_SMALL.shape_bucket, cubin=compiled.cubin,
            launch=launch, envelope=envelope, compile_options=options,
            signature=signature, signing_key_id=signing_key_id, certificate=certificate,
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
        return Resolver(
            "trsm", "float64", gpu=H200, fetch=fetch, cache=cache, trust=trusting(SIGNER)
        )

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


def test_a_champion_signed_without_a_certificate_is_refused(tmp_path: Path) -> None:
    service = start_service(tmp_path, H200, "float64", certified=False)
    try:
        fetch = service_fetcher(service.url, op="trsm", timeout_s=2.0)
        resolver = Resolver(
            "trsm", "float64", gpu=H200, fetch=fetch, cache=ChampionCache(tmp_path / "cache"),
            trust=trusting(SIGNER),
        )  # fmt: skip
        decision = resolver.resolve(64, 64)
    finally:
        service.stop()

    assert decision.route == "cublas"
    assert [refusal.check for refusal in decision.refusals] == ["no_certificate"]
    assert decision.reason == (
        f"refused champion program {service.program_id} from service: no certificate; "
        "disk cache: no entry"
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
    trust = {"trusted_keys": [b64_public(SIGNER)], "key_dir": tmp_path / "no-local-key"}
    solver = kernevo.load(
        "trsm", "float64", api_url=device_service.url, cache_dir=cache_dir, **trust
    )
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
    # cache_max_age_s=0: the service is asked first (and found down), not skipped as it would
    # be for an entry this fresh.
    offline = kernevo.load(
        "trsm", "float64", api_url=device_service.url, cache_dir=cache_dir,
        cache_max_age_s=0, **trust,
    )  # fmt: skip
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


class _TamperedService(httpx.BaseTransport):
    """The real service behind a man in the middle who widens the envelope of its answer."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        body = json.loads(response.read())
        body["envelope"]["m_max"] = 4096
        return httpx.Response(response.status_code, json=body)

    def close(self) -> None:
        self._inner.close()


def _closed_port_url() -> str:
    return f"http://127.0.0.1:{unused_port()}"


@pytest.mark.gpu
def test_only_a_signed_champion_runs(
    device_service: LiveService, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cupyx.scipy.linalg import solve_triangular

    from kernevo.device import current_gpu
    from kernevo.solver import TrsmSolver

    gpu = current_gpu()
    no_local = tmp_path / "no-local-key"  # the home folder's key pair is never consulted
    shapes = [(64, 64), (33, 7), (1, 1)]
    worst: dict[str, float] = {}

    def solve_all(label: str, solver: Any, route: str, check: str | None) -> None:
        worst[label] = 0.0
        for seed, (m, n) in enumerate(shapes):
            a, b = _problem(m, n, seed)
            expected = solve_triangular(a, b.copy(), lower=True)
            assert solver(a, b) is b
            error = _relative_error(b, expected)
            # As in test_champion_solves_like_cublas: 1e-10 is far above rounding, below a bug.
            assert error <= 1e-10, (label, m, n, error)
            worst[label] = max(worst[label], error)
            decision = solver.explain(m, n)
            assert decision.route == route, (label, decision.reason)
            got = [refusal.check for refusal in decision.refusals]
            assert got == ([] if check is None else [check]), (label, decision.reason)

    def load(url: str, cache: str, *keys: Ed25519PrivateKey) -> Any:
        return kernevo.load(
            "trsm", "float64", api_url=url, cache_dir=tmp_path / cache,
            trusted_keys=[b64_public(k) for k in keys], key_dir=no_local,
        )  # fmt: skip

    signed = load(device_service.url, "signed", SIGNER)
    solve_all("signed", signed, "kernel", None)
    assert signed.explain(64, 64).reason == (
        f"champion program {device_service.program_id} from service"
    )
    solve_all(
        "unknown key", load(device_service.url, "stranger", STRANGER), "cublas", "unknown_key"
    )
    solve_all("no trusted key", load(device_service.url, "none"), "cublas", "no_trusted_key")

    tampered_fetch = service_fetcher(
        device_service.url, op="trsm", timeout_s=2.0, transport=_TamperedService()
    )
    tampered = TrsmSolver(
        Resolver(
            "trsm", "float64", gpu=gpu, fetch=tampered_fetch,
            cache=ChampionCache(tmp_path / "tampered"), trust=trusting(SIGNER),
        )
    )  # fmt: skip
    solve_all("tampered response", tampered, "cublas", "bad_signature")

    # The cache the signed loader filled, edited on disk (and re-hashed), read offline.
    [entry] = (tmp_path / "signed").rglob("m64n64.json")
    record = json.loads(entry.read_text())
    record["payload"]["envelope"]["verified_shapes"].append([64, 1])
    record["payload_sha256"] = payload_sha256(record["payload"])
    entry.write_text(json.dumps(record))
    solve_all(
        "tampered cache", load(_closed_port_url(), "signed", SIGNER), "cublas", "bad_signature"
    )

    unsigned_service = start_service(tmp_path / "unsigned-db", gpu, "float64", signer=None)
    try:
        unsigned = load(unsigned_service.url, "unsigned", SIGNER)
        solve_all("unsigned", unsigned, "cublas", "unsigned")
    finally:
        unsigned_service.stop()

    uncertified_service = start_service(
        tmp_path / "uncertified-db", gpu, "float64", certified=False
    )
    try:
        uncertified = load(uncertified_service.url, "uncertified", SIGNER)
        solve_all("no certificate", uncertified, "cublas", "no_certificate")
    finally:
        uncertified_service.stop()

    refused = {label: error for label, error in worst.items() if label != "signed"}
    with capsys.disabled():
        print(
            f"\nRESULTS loader trust, {gpu.name} ({gpu.arch}), float64, shapes {shapes}: "
            f"signed champion -> kernel, max rel. diff vs cuBLAS {worst['signed']:.1e}; "
            f"{', '.join(refused)} -> cuBLAS with the reason in explain(), "
            f"max rel. diff {max(refused.values()):.1e}"
        )
