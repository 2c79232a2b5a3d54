"""Routing decisions of the loader, on CPU: a fake service (httpx.MockTransport), a real disk
cache, and fake driver/fallback callables standing in for the GPU.

Arrays are NumPy arrays tagged with a CUDA device id (the duck type the solver checks); the
fake driver and fallback solve with SciPy, so every dispatch is also checked for its values.
Champions are signed with a key made in memory for the run, which the harness trusts
(tests/test_loader_trust.py covers the refusals).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import socket
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
import scipy.linalg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import kernevo
from kernevo.cache import ChampionCache
from kernevo.certificate import CERTIFICATE_FORMAT, REQUIRED_CHECKS, Certificate
from kernevo.client import ChampionKernel, service_fetcher
from kernevo.device import GpuInfo, nvidia_driver_version, parse_nvrm_version
from kernevo.keys import public_raw_of
from kernevo.resolver import Resolver
from kernevo.settings import LoaderSettings
from kernevo.signature import champion_payload, key_id, sign
from kernevo.solver import TrsmSolver
from kernevo.trust import TrustPolicy, policy_from_settings

GPU = GpuInfo(index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90")
API = "http://kernevo.test"
CUBIN = b"\x7fELF fake champion cubin"
SOURCE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32\n// EVOLVE-BLOCK-END\n"
SIGNER = Ed25519PrivateKey.generate()
TRUST = TrustPolicy({key_id(public_raw_of(SIGNER)): public_raw_of(SIGNER)})

# The service's "no champion" 404 detail, as api.routes.kernels words it (the only 404 the
# loader remembers).
NO_CHAMPION = "no champion yet for path trsm_small float64 on nvidia-h200 (shape bucket m1_64)"


class DeviceArray(np.ndarray):
    """A NumPy array that says it lives on CUDA device 0, as a CuPy array would."""

    device = SimpleNamespace(id=0)


def on_device(x: np.ndarray) -> DeviceArray:
    return np.asfortranarray(x).view(DeviceArray)


def certificate_json(**changes: Any) -> dict[str, Any]:
    """A v2 certificate as a promotion stores it (kernevo.certificate), with ``changes``."""
    certificate = Certificate(
        checks_passed=[*REQUIRED_CHECKS[CERTIFICATE_FORMAT], "sanitizer_memcheck"],
        input_seeds=[11, 12, 13, 14, 15],
        held_out_seeds=[21, 22, 23],
        verified_shapes=[(64, 64)],
        held_out_shapes=[(5, 3)],
        determinism_shapes=[(64, 64)],
        sanitizer_tools=["memcheck"],
        sanitizer_version="2025.3.1",
        sanitizer_shapes={"memcheck": [(33, 31), (64, 64)]},
        gpu_name="NVIDIA H200",
        gpu_key="nvidia-h200",
        arch="sm_90",
        nvidia_driver_version="580.95.05",
        cuda_driver_api_version="13.0",
        cuda_runtime_version="13.0",
        nvrtc_version="13.0",
        timings=[],
        noise_floor=None,
        input_scales=[],
        not_verified=["dtypes other than float64"],
    )
    return {**certificate.to_json_dict(), **changes}


def champion_json(
    *,
    program_id: int = 17,
    cubin: bytes = CUBIN,
    arch: str = "sm_90",
    m_max: int = 64,
    n_max: int = 64,
    gpu: str = GPU.key,
    dtype: str = "float64",
    signer: Ed25519PrivateKey | None = SIGNER,
    certificate: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of ``GET /v1/kernels/best`` as CONTRACTS.md specifies it, signed by ``signer``
    (``None``: unsigned, as an older service or an unsigned promotion sends it), with
    ``certificate`` (default :func:`certificate_json` for this GPU and arch, its shapes clipped to
    the envelope, as a verification inside it would have run them)."""
    if certificate is None:
        document = certificate_json(gpu_key=gpu, arch=arch)
        for name in ("verified_shapes", "held_out_shapes", "determinism_shapes"):
            document[name] = [[min(m, m_max), min(n, n_max)] for m, n in document[name]]
        document["sanitizer_shapes"] = {
            tool: [[min(m, m_max), min(n, n_max)] for m, n in shapes]
            for tool, shapes in document["sanitizer_shapes"].items()
        }
        certificate = document
    body = {
        "path": "trsm_small",
        "dtype": dtype,
        "gpu": gpu,
        "shape_bucket": "m64n64",
        "program_id": program_id,
        "arch": arch,
        "nvrtc_version": "13.0",
        "cubin_b64": base64.b64encode(cubin).decode(),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "source": SOURCE,
        "source_sha256": hashlib.sha256(SOURCE.encode()).hexdigest(),
        "compile_options": [f"-arch={arch}", "-std=c++17", "-DKERNEVO_DTYPE=1"],
        "launch": {"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
        "envelope": {"m_max": m_max, "n_max": n_max, "verified_shapes": [[64, 64]]},
        "metrics": {"combined_score": 1.5},
        "promoted_at": "2025-01-01T00:00:00Z",
        "certificate": certificate,
    }
    return body if signer is None else sign_body(body, signer)


def sign_body(body: dict[str, Any], signer: Ed25519PrivateKey) -> dict[str, Any]:
    """``body`` with ``signature`` and ``signing_key_id`` set as a promotion signs them."""
    champion = ChampionKernel.from_payload(body, base64.b64decode(body["cubin_b64"]))
    public_raw = public_raw_of(signer)
    return {
        **body,
        "signature": sign(signer, champion_payload(champion)),
        "signing_key_id": key_id(public_raw),
    }


class FakeService:
    """A MockTransport handler answering every request the same way, and counting requests."""

    def __init__(self, status: int = 200, body: Any = None, *, down: bool = False) -> None:
        self.status = status
        self.body = champion_json() if body is None and status == 200 else body
        self.down = down
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if isinstance(self.body, bytes):
            return httpx.Response(self.status, content=self.body)
        return httpx.Response(self.status, json=self.body)


class FakeDriver:
    """Stands in for ``TrsmSmallDriver``: solves with SciPy, or raises after writing garbage."""

    def __init__(self, cubin: bytes, dtype: str, *, fail: bool) -> None:
        self.cubin = cubin
        self.dtype = dtype
        self.fail = fail
        self.shapes: list[tuple[int, int]] = []

    def solve(self, a: np.ndarray, b: np.ndarray, stream: Any = None) -> np.ndarray:
        self.shapes.append(b.shape)
        if self.fail:
            b[...] = np.nan  # a driver that broke halfway: the solver must restore b
            raise RuntimeError("launch failed: too many resources requested")
        b[...] = scipy.linalg.solve_triangular(a, b, lower=True)
        return b


class Harness:
    """A solver wired to a fake service, a real disk cache, a fake driver and a fake fallback."""

    def __init__(
        self,
        service: FakeService,
        cache_dir: Path,
        *,
        fail: bool = False,
        gpu: GpuInfo = GPU,
        dtype: str = "float64",
        trust: TrustPolicy = TRUST,
    ) -> None:
        self.service = service
        self.drivers: list[FakeDriver] = []
        self.fallback_shapes: list[tuple[int, int]] = []
        self.compiled: list[tuple[str, list[str], str]] = []
        self.fail = fail
        fetch = service_fetcher(
            API, op="trsm", timeout_s=1.0, transport=httpx.MockTransport(service)
        )
        resolver = Resolver(
            "trsm", dtype, gpu=gpu, fetch=fetch, cache=ChampionCache(cache_dir), trust=trust
        )
        self.solver = TrsmSolver(
            resolver,
            driver_factory=self.make_driver,
            fallback=self.fallback,
            compile_fn=self.compile,
        )

    def make_driver(self, path_id: str, cubin: bytes, dtype: str) -> FakeDriver:
        assert path_id == "trsm_small"
        driver = FakeDriver(cubin, dtype, fail=self.fail)
        self.drivers.append(driver)
        return driver

    def fallback(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.fallback_shapes.append(b.shape)
        b[...] = scipy.linalg.solve_triangular(a, b, lower=True)
        return b

    def compile(self, source: str, options: list[str], arch: str) -> bytes:
        self.compiled.append((source, options, arch))
        return b"recompiled for " + arch.encode()

    @property
    def kernel_shapes(self) -> list[tuple[int, int]]:
        return [shape for driver in self.drivers for shape in driver.shapes]


def problem(m: int, n: int, dtype: str = "float64", seed: int = 0) -> tuple[Any, Any, Any]:
    """A well-conditioned lower-triangular A (garbage above the diagonal), B, and X = A⁻¹B."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, m)) / m + np.diag(rng.uniform(1, 2, m))
    a += np.triu(np.full((m, m), 1e3), 1)  # the upper triangle must never be read
    b = rng.uniform(-1, 1, (m, n))
    x = scipy.linalg.solve_triangular(np.tril(a), b, lower=True)
    return on_device(a.astype(dtype)), on_device(b.astype(dtype)), x


def test_inside_envelope_goes_to_the_kernel(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, x = problem(48, 33)

    out = h.solver(a, b)

    assert out is b
    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [(48, 33)] and h.fallback_shapes == []
    assert h.drivers[0].cubin == CUBIN and h.drivers[0].dtype == "float64"
    decision = h.solver.explain(48, 33)
    assert (decision.route, decision.reason) == ("kernel", "champion program 17 from service")
    assert decision.path == "trsm_small" and decision.shape_bucket == "m64n64"


def test_request_names_the_problem_and_fetches_once_per_bucket(tmp_path: Path) -> None:
    service = FakeService()
    h = Harness(service, tmp_path)
    for m, n in [(7, 5), (64, 64), (7, 5), (1, 1), (100, 100)]:
        a, b, _ = problem(m, n)
        h.solver(a, b)

    assert len(service.requests) == 1
    request = service.requests[0]
    assert request.url.path == "/v1/kernels/best"
    assert dict(request.url.params) == {
        "op": "trsm",
        "dtype": "float64",
        "gpu": "nvidia-h200",
        "m": "7",
        "n": "5",
        "path": "trsm_small",
    }
    assert len(h.drivers) == 1  # the module is loaded once for all shapes of the bucket


def test_outside_the_champions_envelope_goes_to_cublas(tmp_path: Path) -> None:
    h = Harness(FakeService(body=champion_json(m_max=48, n_max=64)), tmp_path)
    a, b, x = problem(50, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [] and h.fallback_shapes == [(50, 8)]
    decision = h.solver.explain(50, 8)
    assert decision.route == "cublas"
    assert decision.reason == "outside envelope m <= 48, n <= 64 of champion program 17 (m=50, n=8)"
    assert h.solver.explain(48, 64).route == "kernel"


def test_no_path_serves_a_large_problem(tmp_path: Path) -> None:
    service = FakeService()
    h = Harness(service, tmp_path)
    a, b, x = problem(100, 100)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.fallback_shapes == [(100, 100)]
    decision = h.solver.explain(100, 100)
    assert (decision.route, decision.reason) == ("cublas", "no path serves m=100 n=100")
    assert service.requests == []


def test_service_down_uses_the_disk_cache(tmp_path: Path) -> None:
    Harness(FakeService(), tmp_path).solver.explain(8, 8)  # fills the cache
    h = Harness(FakeService(down=True), tmp_path)
    a, b, x = problem(8, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [(8, 8)] and h.fallback_shapes == []
    decision = h.solver.explain(8, 8)
    assert decision.route == "kernel"
    assert decision.reason.startswith(
        "champion program 17 from disk cache (service unreachable: ConnectError"
    )


def test_service_down_and_no_cache_goes_to_cublas(tmp_path: Path) -> None:
    h = Harness(FakeService(down=True), tmp_path)
    a, b, x = problem(8, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.fallback_shapes == [(8, 8)] and h.drivers == []
    decision = h.solver.explain(8, 8)
    assert decision.route == "cublas"
    assert decision.reason.startswith("service unreachable: ConnectError")
    assert decision.reason.endswith("; disk cache: no entry")


def test_real_connection_refused_is_service_unreachable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the fetch: nothing listens there
    fetch = service_fetcher(f"http://127.0.0.1:{port}", op="trsm", timeout_s=1.0)
    resolver = Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=ChampionCache(tmp_path), trust=TRUST
    )

    decision = resolver.resolve(8, 8)

    assert decision.route == "cublas"
    assert decision.reason.startswith("service unreachable: ConnectError")


def test_sha256_mismatch_goes_to_cublas(tmp_path: Path) -> None:
    body = champion_json()
    body["cubin_b64"] = base64.b64encode(b"\x7fELF a different cubin").decode()
    h = Harness(FakeService(body=body), tmp_path)
    a, b, x = problem(16, 16)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.fallback_shapes == [(16, 16)] and h.drivers == []
    decision = h.solver.explain(16, 16)
    assert decision.route == "cublas"
    assert decision.reason.startswith("cubin digest mismatch: cubin hashes to")
    assert not (tmp_path / "nvidia-h200").exists()  # nothing unverified reaches the cache


def test_not_found_goes_to_cublas(tmp_path: Path) -> None:
    service = FakeService(404, {"detail": NO_CHAMPION})
    h = Harness(service, tmp_path)
    a, b, x = problem(16, 4)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.fallback_shapes == [(16, 4)]
    decision = h.solver.explain(16, 4)
    assert decision.route == "cublas"
    assert decision.reason == (f"no champion on service (404: {NO_CHAMPION}); disk cache: no entry")


def test_not_found_with_a_cached_champion_uses_the_cache(tmp_path: Path) -> None:
    Harness(FakeService(), tmp_path).solver.explain(8, 8)
    h = Harness(FakeService(404, {"detail": NO_CHAMPION}), tmp_path)

    decision = h.solver.explain(8, 8)

    assert decision.route == "kernel"
    assert (
        decision.reason
        == f"champion program 17 from disk cache (no champion on service (404: {NO_CHAMPION}))"
    )


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, b"<html>gateway</html>", "bad service response: not JSON"),
        (200, [1, 2], "bad service response: not an object"),
        (200, {"cubin_b64": "AAAA"}, "bad service response: path: Field required"),
        (
            200,
            {**champion_json(), "cubin_b64": "@@not base64@@"},
            "bad service response: cubin_b64",
        ),
        (200, champion_json(gpu="nvidia-h100"), "bad service response: champion for nvidia-h100"),
        (200, champion_json(dtype="float32"), "bad service response: champion for"),
        (500, {"detail": "database locked"}, "bad service response: HTTP 500: database locked"),
    ],
)
def test_garbage_from_the_service_goes_to_cublas(
    tmp_path: Path, status: int, body: Any, reason: str
) -> None:
    h = Harness(FakeService(status, body), tmp_path)

    decision = h.solver.explain(8, 8)

    assert decision.route == "cublas"
    assert decision.reason.startswith(reason)


def test_kernel_error_falls_back_once_and_is_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(FakeService(), tmp_path, fail=True)
    a, b, x = problem(32, 32)

    with caplog.at_level(logging.WARNING, logger="kernevo"):
        h.solver(a, b)
        np.testing.assert_allclose(b, x, rtol=1e-12)  # b restored, then solved by cuBLAS
        a2, b2, x2 = problem(32, 32, seed=1)
        h.solver(a2, b2)
        np.testing.assert_allclose(b2, x2, rtol=1e-12)

    assert h.kernel_shapes == [(32, 32)]  # the broken kernel ran once, never again
    assert h.fallback_shapes == [(32, 32), (32, 32)]
    decision = h.solver.explain(32, 32)
    assert decision.route == "cublas"
    assert (
        decision.reason == "kernel error: RuntimeError: launch failed: too many resources requested"
    )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "m=32 n=32" in warnings[0].getMessage()
    assert h.solver.explain(8, 8).route == "kernel"  # other shapes are still tried


def test_driver_that_cannot_load_is_built_once(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    builds: list[bytes] = []

    def broken_factory(path_id: str, cubin: bytes, dtype: str) -> FakeDriver:
        builds.append(cubin)
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")

    h.solver._driver_factory = broken_factory
    for m in (4, 5, 4):
        a, b, x = problem(m, 3)
        h.solver(a, b)
        np.testing.assert_allclose(b, x, rtol=1e-12)

    assert builds == [CUBIN]
    assert h.fallback_shapes == [(4, 3), (5, 3), (4, 3)]
    assert h.solver.explain(5, 3).reason == "kernel error: RuntimeError: CUDA_ERROR_INVALID_IMAGE"


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: (np.ascontiguousarray(a).view(DeviceArray), b),  # C order A
        lambda a, b: (a, np.ascontiguousarray(b).view(DeviceArray)),  # C order B
        lambda a, b: (a.astype(np.float32), b),  # A in another dtype
        lambda a, b: (a, b.astype(np.complex128)),  # B in another dtype
    ],
)
def test_arrays_the_kernel_cannot_take_go_to_cublas(tmp_path: Path, make: Any) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, x = problem(6, 5)
    a, b = make(a, b)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-6)
    assert h.kernel_shapes == [] and h.fallback_shapes == [(6, 5)]
    assert h.solver.explain(6, 5).route == "kernel"  # the shape itself stays with the kernel


def test_other_arch_recompiles_the_champion_source(tmp_path: Path) -> None:
    h = Harness(FakeService(body=champion_json(arch="sm_80")), tmp_path)
    a, b, x = problem(9, 9)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.compiled == [(SOURCE, ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"], "sm_90")]
    assert h.drivers[0].cubin == b"recompiled for sm_90"
    decision = h.solver.explain(9, 9)
    assert decision.route == "kernel"
    assert (
        decision.reason
        == "champion program 17 from service; recompiled for sm_90 (built for sm_80)"
    )


def test_same_arch_never_recompiles(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, _ = problem(9, 9)
    h.solver(a, b)

    assert h.compiled == []


def test_operands_are_checked() -> None:
    h = Harness(FakeService(), Path("/nonexistent-not-used"))
    a, b, _ = problem(4, 3)
    with pytest.raises(ValueError, match="square"):
        h.solver(a[:, :3].view(DeviceArray), b)
    with pytest.raises(ValueError, match="m=4"):
        h.solver(a, on_device(np.zeros((5, 3))))
    with pytest.raises(TypeError, match="CuPy arrays"):
        h.solver(np.asarray(a), np.asarray(b))
    with pytest.raises(TypeError, match="cannot solve in place"):
        h.solver(a.astype(np.complex128).view(DeviceArray), b)


@pytest.mark.parametrize(
    ("op", "dtype", "message"),
    [
        ("gemm", "float64", "unknown op 'gemm'; known ops: trsm"),
        ("trsm", "float16", "unknown dtype 'float16'; expected one of"),
    ],
)
def test_load_rejects_unknown_op_and_dtype_before_touching_the_gpu(
    op: str, dtype: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        kernevo.load(op, dtype)
    assert "\n" not in str(info.value)


def test_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KERNEVO_API_URL", "http://service:9000/")
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("KERNEVO_REQUEST_TIMEOUT_S", "0.5")
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", " /keys/a.pub, AAAA ,,/keys/b.pem")
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "k"))
    monkeypatch.setenv("KERNEVO_TRUST_LOCAL_KEY", "false")
    monkeypatch.setenv("KERNEVO_LOCK_FILE", str(tmp_path / "kernevo.lock"))
    monkeypatch.setenv("KERNEVO_DATABASE_URL", "sqlite:///other-layer.db")  # not ours: ignored

    settings = LoaderSettings()

    assert settings.api_url == "http://service:9000"
    assert settings.cache_dir == tmp_path / "c"
    assert settings.request_timeout_s == 0.5
    assert settings.trusted_keys == ("/keys/a.pub", "AAAA", "/keys/b.pem")
    assert settings.key_dir == tmp_path / "k"
    assert settings.trust_local_key is False
    assert settings.lock_file == tmp_path / "kernevo.lock"


def test_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "KERNEVO_API_URL",
        "KERNEVO_CACHE_DIR",
        "KERNEVO_REQUEST_TIMEOUT_S",
        "KERNEVO_TRUSTED_KEYS",
        "KERNEVO_KEY_DIR",
        "KERNEVO_TRUST_LOCAL_KEY",
        "KERNEVO_LOCK_FILE",
    ):
        monkeypatch.delenv(name, raising=False)

    settings = LoaderSettings()

    assert settings.api_url == "http://127.0.0.1:8000"
    assert settings.cache_dir == Path.home() / ".cache" / "kernevo"
    assert settings.request_timeout_s == 2.0
    assert settings.trusted_keys == ()
    assert settings.key_dir == Path.home() / ".config" / "kernevo" / "keys"
    assert settings.trust_local_key is True
    assert settings.lock_file is None


# --- the champion's certificate against this device's driver and toolkit ---------------------

SAME_TOOLKIT = GpuInfo(
    index=0,
    name="NVIDIA H200",
    key="nvidia-h200",
    arch="sm_90",
    cuda_driver_api_version="13.0",
    nvrtc_version="13.0",
    nvidia_driver_version="580.95.05",
)
OTHER_DRIVER = replace(SAME_TOOLKIT, nvidia_driver_version="575.57.08")
STRICT = TrustPolicy(TRUST.keys, require_same_toolkit=True)


def test_a_champion_verified_under_this_toolkit_is_served_without_remark(tmp_path: Path) -> None:
    for trust in (TRUST, STRICT):
        h = Harness(FakeService(), tmp_path / str(trust.require_same_toolkit), gpu=SAME_TOOLKIT)
        decision = h.solver.explain(8, 8)
        assert (decision.route, decision.reason) == ("kernel", "champion program 17 from service")


def test_another_nvidia_driver_is_stated_and_the_kernel_served(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path, gpu=replace(OTHER_DRIVER, nvrtc_version="13.1"))
    a, b, x = problem(8, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [(8, 8)]
    assert h.solver.explain(8, 8).reason == (
        "champion program 17 from service; served not re-verified on this toolkit: "
        "NVIDIA driver 575.57.08 here, verified under 580.95.05, NVRTC 13.1 here, verified "
        "under 13.0"
    )


@pytest.mark.parametrize(
    ("gpu", "certificate", "clause"),
    [
        (OTHER_DRIVER, None, "NVIDIA driver 575.57.08 here, verified under 580.95.05"),
        (replace(SAME_TOOLKIT, cuda_driver_api_version="12.9"), None, "CUDA driver API 12.9 here"),
        (replace(SAME_TOOLKIT, nvidia_driver_version=""), None, "NVIDIA driver: unknown here"),
        (
            SAME_TOOLKIT,
            certificate_json(nvidia_driver_version=None),
            "NVIDIA driver: not recorded at verification",
        ),
    ],
    ids=["other driver", "other driver API", "driver unknown here", "driver not recorded"],
)
def test_require_same_toolkit_routes_any_difference_to_cublas(
    tmp_path: Path, gpu: GpuInfo, certificate: dict[str, Any] | None, clause: str
) -> None:
    body = champion_json(certificate=certificate)
    h = Harness(FakeService(body=body), tmp_path, gpu=gpu, trust=STRICT)
    a, b, x = problem(8, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [] and h.fallback_shapes == [(8, 8)]
    decision = h.solver.explain(8, 8)
    assert decision.route == "cublas" and decision.refusals == ()
    assert decision.reason.startswith("champion program 17 not re-verified on this toolkit: ")
    assert clause in decision.reason
    assert decision.reason.endswith(" (KERNEVO_REQUIRE_SAME_TOOLKIT)")


def test_require_same_toolkit_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path))
    assert policy_from_settings(LoaderSettings()).require_same_toolkit is False
    monkeypatch.setenv("KERNEVO_REQUIRE_SAME_TOOLKIT", "1")
    assert policy_from_settings(LoaderSettings()).require_same_toolkit is True


@pytest.mark.parametrize(
    ("first_line", "version"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC "
            "2025",
            "580.95.05",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 27 03:36:05 UTC 2025",
            "570.124.06",
        ),
        ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54", "550.54"),
        ("GCC version:  gcc version 12.2.0", ""),
        ("", ""),
    ],
)
def test_the_nvidia_driver_version_is_read_from_the_kernel_module(
    tmp_path: Path, first_line: str, version: str
) -> None:
    proc_file = tmp_path / "version"
    proc_file.write_text(first_line + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")

    assert parse_nvrm_version(proc_file.read_text()) == version
    assert nvidia_driver_version(proc_file) == version
    assert nvidia_driver_version(tmp_path / "no driver loaded") == ""
