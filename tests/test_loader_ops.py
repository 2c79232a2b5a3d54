"""The loader by op (issue 8, Build item 1), on the CPU: ``OpSolver`` takes the op's operands,
asks the op's call adapter for the shape, routes it by the op's parameters (the request names
them, the envelope bounds them, ``explain()`` says them), runs the champion through its path's
driver or the op's fallback, and restores what a failed kernel wrote.

A fake op, ``double`` (``solver(x)`` doubles x in place; shapes (n, k)), with its own call
adapter in a module of the seeds package and a fake path, shows nothing in the loader is
trsm's; band_bidiag and solve_tri run through their real call adapters with fake paths, fake
drivers and a host fallback. NumPy arrays tagged with a device id stand in for CuPy arrays
(tests/test_loader_resolver.py); champions are signed with the harness's key.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from test_loader_resolver import (
    GPU,
    SIGNER,
    SOURCE,
    TRUST,
    DeviceArray,
    certificate_json,
    sign_body,
)

from kernevo.cache import ChampionCache
from kernevo.certificate import CERTIFICATE_V3, REQUIRED_CHECKS, Certificate
from kernevo.client import service_fetcher
from kernevo.resolver import Resolver
from kernevo.solver import OpSolver, check_problem
from seeds import ops, registry
from seeds.band_bidiag.lapack import gbbrd
from seeds.ops.spec import OpSpec, ShapeParam
from seeds.spec import ShapeBucket, UnknownDtypeError
from seeds.trsm_small.spec import TRSM_SMALL

API = "http://kernevo.test"

DOUBLE = OpSpec(
    name="double",
    params=(ShapeParam("n", 1, 1024, "rows of x"), ShapeParam("k", 1, 1024, "columns of x")),
    dtypes=("float64", "float32"),
    semantics="x <- 2 x in place",
    shape_words="x {n}x{k}",
    call_factory="_double_op:DoubleCall",
    fallback_library="NumPy on the host (the fake op's library)",
    fallback_route="host",
)


class DoubleCall:
    """The fake op's call adapter: one 2-D device array, doubled in place by the kernel (the
    fake driver) or by the fallback; the kernel takes C-contiguous arrays of the dtype."""

    fallback_calls: list[tuple[int, ...]] = []

    def shape(self, x: Any) -> tuple[int, int]:
        if getattr(x, "device", None) is None:
            raise TypeError("expected a device array")
        if x.ndim != 2:
            raise ValueError(f"x must be 2-D, got {x.shape}")
        return int(x.shape[0]), int(x.shape[1])

    def kernel_ready(self, dtype: str, device: int, x: Any) -> bool:
        return x.dtype == dtype and x.flags.c_contiguous and x.device.id == device

    def run(self, driver: Any, x: Any) -> Any:
        return driver.solve(x)

    def fallback(self, x: Any) -> Any:
        self.fallback_calls.append(x.shape)
        x *= 2
        return x

    def snapshot(self, x: Any) -> Any:
        return x.copy()

    def restore(self, snapshot: Any, x: Any) -> None:
        x[...] = snapshot


class DoubleDriver:
    """The fake path's driver: doubles x, or writes NaN and raises when ``fail``."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.shapes: list[tuple[int, ...]] = []

    def solve(self, x: Any, stream: Any = None) -> Any:
        self.shapes.append(x.shape)
        if self.fail:
            x[...] = np.nan
            raise RuntimeError("launch failed")
        x *= 2
        return x


@pytest.fixture
def double_op(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake op in the registry with its call module, and its path (a path of an op can
    only be built once the op is registered); returns the path's spec."""
    module = types.ModuleType(f"{registry.__package__}._double_op")
    module.DoubleCall = DoubleCall  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(ops.OPS, "double", DOUBLE)
    path = dataclasses.replace(
        TRSM_SMALL, path_id="double_path", op="double", dtypes=("float64",),
        shape_bucket="n64k8", envelope={"n_max": 64, "k_max": 8}, quick_shapes=((3, 2),),
        verify_shapes=((64, 8),), timed_shapes=((64, 8),), held_out_shapes=((5, 5),),
        sanitizer_shape=(33, 7),
    )  # fmt: skip
    monkeypatch.setitem(registry.PATHS, path.path_id, path)
    monkeypatch.setattr(DoubleCall, "fallback_calls", [])
    return path


def certificate_v3(spec: Any, verified: list[list[int]], **changes: Any) -> dict[str, Any]:
    """A v3 certificate of ``spec``'s op (its shapes ``verified``, a memcheck clean at the
    first of them), as a promotion of a champion of an op other than trsm stores it."""
    document = certificate_json(
        verified_shapes=[], held_out_shapes=[], determinism_shapes=[],
        sanitizer_shapes={"memcheck": []},
    )  # fmt: skip
    document.update(
        format=CERTIFICATE_V3, op=spec.op, shape_params=list(spec.params),
        checks_passed=[*REQUIRED_CHECKS[CERTIFICATE_V3], "sanitizer_memcheck"],
        verified_shapes=verified, sanitizer_shapes={"memcheck": verified[:1]}, **changes,
    )  # fmt: skip
    return Certificate.model_validate(document).to_json_dict()


def body_for(spec: Any, bucket: str, verified: list[list[int]], **certificate: Any) -> dict:
    """A signed ``/v1/kernels/best`` body of ``spec``'s path at ``bucket`` with ``spec``'s
    envelope (and ``verified``), its v3 certificate naming only shapes inside it."""
    cubin = f"cubin of {spec.path_id}/{bucket}".encode()
    document = certificate_v3(spec, verified, **certificate)
    body = {
        "path": spec.path_id, "dtype": "float64", "gpu": GPU.key, "shape_bucket": bucket,
        "program_id": 17, "arch": "sm_90", "nvrtc_version": "13.0",
        "cubin_b64": base64.b64encode(cubin).decode(),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "source": SOURCE,
        "source_sha256": hashlib.sha256(SOURCE.encode()).hexdigest(),
        "compile_options": spec.compile_options("float64", "sm_90"),
        "launch": {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
        "envelope": {**spec.envelope, "verified_shapes": verified},
        "metrics": {"combined_score": 1.5}, "promoted_at": "2025-01-01T00:00:00Z",
        "certificate": document,
    }  # fmt: skip
    return sign_body(body, SIGNER)


class Service:
    """Answers ``/v1/kernels/best`` by (path, bucket of the shape asked) from ``bodies``; 404
    for anything else. Records each request's query."""

    def __init__(self, bodies: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.bodies = bodies
        self.queries: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        query = dict(request.url.params)
        self.queries.append(query)
        spec = registry.get_path(query["path"])
        shape = [int(query[name]) for name in spec.params]
        body = self.bodies.get((query["path"], spec.bucket_of(*shape) or ""))
        if body is None:
            return httpx.Response(404, json={"detail": "no champion yet for path band_bidiag"})
        return httpx.Response(200, json=body)


def solver_for(
    op: str, service: Service, cache_dir: Path, driver: Any, fallback: Any = None
) -> OpSolver:
    fetch = service_fetcher(API, op=op, timeout_s=1.0, transport=httpx.MockTransport(service))
    resolver = Resolver(
        op, "float64", gpu=GPU, fetch=fetch, cache=ChampionCache(cache_dir), trust=TRUST
    )
    return OpSolver(resolver, driver_factory=lambda path, cubin, dtype: driver, fallback=fallback)


def on_device(x: np.ndarray, order: str = "C") -> DeviceArray:
    return np.array(x, order=order).view(DeviceArray)


# --- a fake op --------------------------------------------------------------------------------


def test_a_fake_op_runs_its_champion_and_says_its_shape_in_its_words(double_op, tmp_path):
    service = Service({("double_path", "n64k8"): body_for(double_op, "n64k8", [[64, 8]])})
    driver = DoubleDriver(fail=False)
    solver = solver_for("double", service, tmp_path, driver)
    x = on_device(np.arange(12.0).reshape(6, 2))

    assert solver(x) is x and np.array_equal(x, 2 * np.arange(12.0).reshape(6, 2))
    assert driver.shapes == [(6, 2)] and DoubleCall.fallback_calls == []
    assert service.queries == [{"op": "double", "dtype": "float64", "gpu": "nvidia-h200",
                                "n": "6", "k": "2", "path": "double_path"}]  # fmt: skip
    decision = solver.explain(6, 2)
    assert (decision.shape, decision.route, decision.path) == ((6, 2), "kernel", "double_path")
    assert decision.reason == "champion program 17 from service"
    assert decision.fallback == "NumPy on the host (the fake op's library)"


def test_a_fake_ops_fallback_answers_outside_its_envelope_and_paths(double_op, tmp_path):
    body = body_for(double_op, "n64k8", [[4, 4]])
    body["envelope"]["k_max"] = 4
    body = sign_body({k: v for k, v in body.items() if k not in ("signature",)}, SIGNER)
    solver = solver_for("double", Service({("double_path", "n64k8"): body}), tmp_path,
                        DoubleDriver(fail=False))  # fmt: skip
    x = on_device(np.ones((10, 6)))

    solver(x)

    assert np.array_equal(x, np.full((10, 6), 2.0)) and DoubleCall.fallback_calls == [(10, 6)]
    outside = solver.explain(10, 6)
    assert (outside.route, outside.reason) == (
        "host", "outside envelope n <= 64, k <= 4 of champion program 17 (n=10, k=6)",
    )  # fmt: skip
    nowhere = solver.explain(100, 1)
    assert (nowhere.route, nowhere.reason) == ("host", "no path serves n=100 k=1")
    with pytest.raises(ops.ShapeError, match=r"double takes 2 shape values \(n, k\)"):
        solver.explain(10)


def test_a_fake_ops_failed_kernel_is_undone_and_its_shape_pinned(double_op, tmp_path, caplog):
    service = Service({("double_path", "n64k8"): body_for(double_op, "n64k8", [[64, 8]])})
    driver = DoubleDriver(fail=True)
    solver = solver_for("double", service, tmp_path, driver)
    x = on_device(np.full((4, 4), 3.0))

    with caplog.at_level(logging.WARNING, logger="kernevo"):
        solver(x)
        solver(x)

    assert np.array_equal(x, np.full((4, 4), 12.0))  # restored, then doubled twice
    assert driver.shapes == [(4, 4)] and DoubleCall.fallback_calls == [(4, 4), (4, 4)]
    decision = solver.explain(4, 4)
    assert (decision.route, decision.reason) == (
        "host",
        "kernel error: RuntimeError: launch failed",
    )
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "at n=4 k=4; using NumPy on the host (the fake op's library)" in warning


def test_arrays_the_kernel_does_not_take_go_to_the_fallback(double_op, tmp_path):
    service = Service({("double_path", "n64k8"): body_for(double_op, "n64k8", [[64, 8]])})
    driver = DoubleDriver(fail=False)
    solver = solver_for("double", service, tmp_path, driver)
    fortran = on_device(np.ones((4, 3)), order="F")

    solver(fortran)

    assert driver.shapes == [] and DoubleCall.fallback_calls == [(4, 3)]
    assert solver.explain(4, 3).route == "kernel"  # routed to it, but not these arrays
    with pytest.raises(ValueError, match="x must be 2-D"):
        solver(on_device(np.ones(3)))


def test_load_checks_the_op_and_its_dtypes(double_op):
    check_problem("double", "float32")
    check_problem("solve_tri", "float32")  # an op whose paths have no champion yet still loads
    with pytest.raises(
        ops.UnknownOpError, match="known ops: trsm, solve_tri, band_bidiag, trsm_batched, double"
    ):
        check_problem("gemm", "float64")
    with pytest.raises(
        UnknownDtypeError,
        match="^op double has no complex64 kernel; it implements float64, float32$",
    ):
        check_problem("double", "complex64")
    with pytest.raises(
        UnknownDtypeError, match="^op solve_tri has no float64 kernel; it implements float32$"
    ):
        check_problem("solve_tri", "float64")
    with pytest.raises(
        UnknownDtypeError, match="^unknown dtype 'float16'; expected one of float32$"
    ):
        check_problem("solve_tri", "float16")


# --- band_bidiag and solve_tri through their own call adapters ---------------------------------

NARROW = ShapeBucket(
    "bw64", {"n_max": 4096, "bandwidth_max": 64}, ((100, 7),), ((100, 7),), ((1024, 32),),
    ((333, 5),), (257, 17),
)  # fmt: skip
WIDE = ShapeBucket(
    "bw512", {"n_max": 4096, "bandwidth_min": 65, "bandwidth_max": 512}, ((300, 100),),
    ((300, 100),), ((2048, 128),), ((700, 300),), (500, 70),
)  # fmt: skip
BAND = dataclasses.replace(
    TRSM_SMALL, path_id="band_fake", op="band_bidiag", dtypes=("float32", "float64"),
    envelope={"n_max": 4096, "bandwidth_max": 512}, shape_bucket="bw64",
    quick_shapes=NARROW.quick_shapes, verify_shapes=NARROW.verify_shapes,
    timed_shapes=NARROW.timed_shapes, held_out_shapes=NARROW.held_out_shapes,
    sanitizer_shape=NARROW.sanitizer_shape, buckets=(NARROW, WIDE),
)  # fmt: skip
TRI = dataclasses.replace(
    TRSM_SMALL, path_id="tri_fake", op="solve_tri", dtypes=("float32", "float64"),
    shape_bucket="n128", envelope={"n_max": 128, "k_max": 64, "b2_max": 64, "b3_max": 64},
    quick_shapes=((11, 5, 1, 1),), verify_shapes=((64, 6, 4, 2),), timed_shapes=((64, 6, 4, 2),),
    held_out_shapes=((33, 3, 2, 1),), sanitizer_shape=(70, 33, 3, 2),
)  # fmt: skip


@pytest.fixture
def other_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake band_bidiag and solve_tri paths, and no other path of those ops."""
    for path_id, spec in list(registry.PATHS.items()):
        if spec.op != "trsm":
            monkeypatch.delitem(registry.PATHS, path_id)
    monkeypatch.setitem(registry.PATHS, BAND.path_id, BAND)
    monkeypatch.setitem(registry.PATHS, TRI.path_id, TRI)


class BandDriver:
    """A band_bidiag driver on the host: LAPACK's reduction, recording the shapes it ran."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []

    def solve(self, band: Any, stream: Any = None) -> tuple[Any, Any]:
        self.shapes.append(band.shape)
        return gbbrd(np.asarray(band))


def test_band_bidiag_takes_a_band_and_returns_d_and_e_by_bucket_or_lapack(other_ops, tmp_path):
    narrow = body_for(BAND, "bw64", [[1024, 32]])
    service = Service({("band_fake", "bw64"): narrow})
    driver, fallen = BandDriver(), []

    def host_lapack(band: Any) -> tuple[Any, Any]:
        fallen.append(band.shape)
        return gbbrd(np.asarray(band))

    solver = solver_for("band_bidiag", service, tmp_path, driver, host_lapack)
    rng = np.random.default_rng(5)
    band = on_device(np.triu(rng.uniform(-1, 1, (33, 200)), 0), order="F")  # (BW + 1, n)
    kept = band.copy()

    d, e = solver(band)

    assert driver.shapes == [(33, 200)] and fallen == [] and np.array_equal(band, kept)
    assert d.shape == (200,) and e.shape == (199,)
    assert service.queries[0] == {"op": "band_bidiag", "dtype": "float64", "gpu": "nvidia-h200",
                                  "n": "200", "bandwidth": "32", "path": "band_fake"}  # fmt: skip
    wide = solver.explain(2048, 128)  # the other bucket: no champion there
    assert (wide.route, wide.shape_bucket) == ("lapack", "bw512")
    assert wide.fallback.startswith("LAPACK ?gbbrd on the host CPU")
    assert wide.reason == (
        "no champion on service (404: no champion yet for path band_bidiag); disk cache: no entry"
    )
    solver(on_device(np.ones((129, 2048)), order="F"))
    assert fallen == [(129, 2048)]
    assert solver.explain(4096, 1024).reason == "no path serves n=4096 bandwidth=1024"


class TriDriver:
    """A solve_tri driver on the host, as seeds/solve_tri's takes its arrays: X to ``out``
    (``b`` itself: in place), a new array without one."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def solve(self, a: Any, b: Any, out: Any = None, stream: Any = None) -> Any:
        self.shapes.append(b.shape)
        x = np.linalg.solve(np.tril(a), b)
        if out is None:
            return x
        out[...] = x
        return out


def test_solve_tri_takes_ggml_tensors_and_solves_every_batch_index(other_ops, tmp_path):
    service = Service({("tri_fake", "n128"): body_for(TRI, "n128", [])})
    driver, fallen = TriDriver(), []

    def host_trsm(a: Any, b: Any) -> Any:
        fallen.append(b.shape)
        b[...] = np.linalg.solve(np.tril(a), b)
        return b

    solver = solver_for("solve_tri", service, tmp_path, driver, host_trsm)
    rng = np.random.default_rng(3)
    a = on_device(np.tril(rng.uniform(0.1, 1, (2, 4, 64, 64))) + 4 * np.eye(64))
    x = rng.uniform(-1, 1, (2, 4, 64, 6))
    b = on_device(np.tril(np.asarray(a)) @ x)

    assert solver(a, b) is b
    np.testing.assert_allclose(b, x, rtol=1e-10, atol=1e-12)
    assert driver.shapes == [(2, 4, 64, 6)] and fallen == []
    assert service.queries[0] == {"op": "solve_tri", "dtype": "float64", "gpu": "nvidia-h200",
                                  "n": "64", "k": "6", "b2": "4", "b3": "2",
                                  "path": "tri_fake"}  # fmt: skip
    decision = solver.explain(64, 6, 4, 2)
    assert (decision.route, decision.path, decision.shape) == ("kernel", "tri_fake", (64, 6, 4, 2))
    strided = on_device(np.tril(np.asarray(a)) @ x, order="F")
    solver(a, strided)  # not packed row-major: the batched cuBLAS TRSM's
    assert fallen == [(2, 4, 64, 6)]
    assert solver.explain(300, 6, 4, 2).reason == "no path serves n=300 k=6 b2=4 b3=2"


# --- trsm's signed payloads -------------------------------------------------------------------


def _envelope_signed_before_ops(envelope: dict[str, Any]) -> dict[str, Any]:
    """The signed envelope as ``kernevo.signature.signed_payload`` built it before ops had
    their own parameters (m and n only), kept here to compare bytes with."""
    return {
        "m_max": envelope["m_max"],
        "n_max": envelope["n_max"],
        "verified_shapes": [[m, n] for m, n in envelope.get("verified_shapes", [])],
        **{k: envelope[k] for k in ("m_min", "n_min") if envelope.get(k) is not None},
    }


@pytest.mark.parametrize("path_id", ["trsm_small", "trsm_small_z64", "trsm_blocked"])
def test_trsm_payloads_are_byte_for_byte_what_they_were(path_id: str):
    import json

    from kernevo.signature import PAYLOAD_FORMAT, signed_payload

    spec = registry.get_path(path_id)
    envelope = {**spec.envelope, "verified_shapes": [list(s) for s in spec.verify_shapes],
                "comment": "not signed", "m_min": spec.envelope.get("m_min")}  # fmt: skip
    fields = {
        "path": path_id, "dtype": "complex128", "gpu": "nvidia-h200",
        "shape_bucket": spec.shape_bucket, "program_id": 7, "arch": "sm_90",
        "cubin_sha256": "a" * 64, "source_sha256": "b" * 64,
        "launch": {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
        "compile_options": spec.compile_options("complex128", "sm_90"), "nvrtc_version": "13.0",
        "certificate_sha256": "c" * 64,
    }  # fmt: skip
    before = {
        "format": PAYLOAD_FORMAT, **fields,
        "launch": {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
        "envelope": _envelope_signed_before_ops(envelope),
    }  # fmt: skip
    expected = json.dumps(before, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert signed_payload(**fields, envelope=envelope) == expected.encode("utf-8")
