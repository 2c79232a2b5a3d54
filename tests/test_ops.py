"""The op registry (issue 8, Build item 1): each op's shape parameters, ranges, relations and
words; generic envelopes; the loader's call adapters on the CPU (NumPy arrays tagged with a
device id stand in for CuPy arrays); band_bidiag's LAPACK fallback against NumPy's SVD."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from seeds import ops, registry
from seeds.band_bidiag.lapack import gbbrd
from seeds.ops import band_bidiag, solve_tri, trsm
from seeds.ops.spec import (
    INT32_MAX,
    OpSpec,
    ShapeError,
    ShapeParam,
    corners,
    describe_envelope,
    overlap,
    serves,
)
from seeds.spec import ShapeBucket, envelope_params
from seeds.trsm_blocked.spec import TRSM_BLOCKED
from seeds.trsm_small.spec import TRSM_SMALL


class DeviceArray(np.ndarray):
    """A NumPy array that says it lives on CUDA device 0, as a CuPy array would."""

    device = SimpleNamespace(id=0)


def on_device(x: np.ndarray, order: str = "C") -> DeviceArray:
    return np.array(x, order=order).view(DeviceArray)


# --- the registry -----------------------------------------------------------------------------


def test_the_registry_holds_the_four_ops_trsm_first_with_their_parameters():
    assert list(ops.OPS) == ["trsm", "solve_tri", "band_bidiag", "trsm_batched"]
    assert ops.get_op("trsm").param_names == ("m", "n")
    assert ops.get_op("solve_tri").param_names == ("n", "k", "b2", "b3")
    assert ops.get_op("band_bidiag").param_names == ("n", "bandwidth")
    assert ops.get_op("trsm_batched").param_names == ("m", "n", "batch")
    assert ops.param_names() == ("m", "n", "k", "b2", "b3", "bandwidth", "batch")
    assert ops.ops_with_param("n") == ["trsm", "solve_tri", "band_bidiag", "trsm_batched"]
    assert ops.ops_with_param("k") == ["solve_tri"]
    assert registry.OPS is ops.OPS  # one registry, monkeypatched in one place


@pytest.mark.parametrize("name", ["gemm", "", "TRSM", None])
def test_an_unknown_op_is_one_line_naming_the_known_ones(name: Any):
    with pytest.raises(
        ops.UnknownOpError, match="known ops: trsm, solve_tri, band_bidiag, trsm_batched$"
    ):
        ops.get_op(name)


def test_every_op_names_a_call_adapter_that_exists():
    for spec in ops.OPS.values():
        call = spec.call()
        assert all(callable(getattr(call, part)) for part in
                   ("shape", "kernel_ready", "run", "fallback", "snapshot", "restore"))  # fmt: skip
        assert spec.fallback_route != "kernel" and spec.fallback_library
        assert set(spec.dtypes) <= {"float32", "float64", "complex64", "complex128"}


@pytest.mark.parametrize(
    ("op", "values", "kind", "param", "message"),
    [
        ("trsm", {"m": 4}, "missing", "n", "trsm needs n (columns of B)"),
        ("trsm", {"m": 4, "n": 4, "k": 2}, "extra", "k",
         "k is not a shape parameter of trsm (its parameters: m, n)"),
        ("trsm", {"m": -1, "n": 4}, "range", "m", "m=-1 is out of range: trsm takes 0 <= m"),
        ("trsm", {"m": 2**31, "n": 4}, "range", "m", f"m <= {INT32_MAX}"),
        ("solve_tri", {"n": 64, "k": 6, "b2": 4}, "missing", "b3", "solve_tri needs b3"),
        ("solve_tri", {"n": 64, "k": 0, "b2": 4, "b3": 2}, "range", "k", "1 <= k"),
        ("solve_tri", {"n": 64, "k": 6, "b2": 2**16, "b3": 2**16}, "relation", None,
         "solve_tri needs b2 * b3 <= 2147483647"),
        ("solve_tri", {"m": 64, "n": 64, "k": 6, "b2": 4, "b3": 2}, "extra", "m",
         "m is not a shape parameter of solve_tri"),
        ("band_bidiag", {"n": 4096}, "missing", "bandwidth", "band_bidiag needs bandwidth"),
        ("band_bidiag", {"n": 8, "bandwidth": 8}, "relation", None,
         "band_bidiag needs bandwidth <= n - 1; got n=8, bandwidth=8"),
        ("band_bidiag", {"n": 0, "bandwidth": 0}, "range", "n", "n=0 is out of range"),
    ],
)  # fmt: skip
def test_a_shape_by_name_is_checked_against_the_op(op, values, kind, param, message):
    with pytest.raises(ShapeError, match=re.escape(message)) as raised:
        ops.get_op(op).shape_from(values)
    assert (raised.value.kind, raised.value.param) == (kind, param)


def test_a_valid_shape_by_name_comes_back_in_parameter_order():
    assert ops.get_op("solve_tri").shape_from({"b3": 2, "k": 6, "n": 64, "b2": 4}) == (64, 6, 4, 2)
    assert ops.get_op("trsm").shape_from({"m": 0, "n": 0, "k": None}) == (0, 0)  # BLAS's m = 0
    assert ops.get_op("band_bidiag").shape_from({"n": 1, "bandwidth": 0}) == (1, 0)
    with pytest.raises(ShapeError, match="m must be an integer; got True"):
        ops.get_op("trsm").check_shape((True, 4))
    with pytest.raises(ShapeError, match=r"trsm takes 2 shape values \(m, n\); got 3"):
        ops.get_op("trsm").check_shape((1, 2, 3))


def test_a_shape_in_words():
    assert ops.get_op("trsm").assignments((48, 64), ", ") == "m=48, n=64"
    assert ops.get_op("trsm").describe((48, 64)) == "A 48x48, B 48x64"
    assert ops.get_op("solve_tri").assignments((64, 6, 4, 2)) == "n=64 k=6 b2=4 b3=2"
    assert ops.get_op("solve_tri").describe((64, 6, 4, 2)) == "4x2 batch of A 64x64, B 64x6"
    assert ops.get_op("band_bidiag").describe((4096, 32)) == "upper band 4096x4096 of bandwidth 32"


@pytest.mark.parametrize("name", ["op", "dtype", "gpu", "path", "key", "M", "1n", "a_b"])
def test_a_parameter_name_the_query_or_the_fetch_uses_is_refused(name: str):
    with pytest.raises(ValueError, match="not allowed"):
        ShapeParam(name, 1, 2, "x")


def test_an_op_with_repeated_parameters_is_refused():
    with pytest.raises(ValueError, match="distinct"):
        dataclasses.replace(trsm.TRSM, params=(ShapeParam("m", 0, 1, "x"),) * 2)


# --- envelopes --------------------------------------------------------------------------------


def test_envelopes_bound_every_parameter_the_lower_bound_defaulting_to_one():
    env = {"n_max": 256, "k_max": 128, "b2_max": 4096, "b3_max": 4096}
    params = ("n", "k", "b2", "b3")
    assert serves(env, params, (64, 6, 4, 2)) and not serves(env, params, (64, 129, 4, 2))
    assert not serves(env, params, (0, 6, 4, 2)) and not serves(env, params, (64, 6, 4))
    assert not serves({"n_max": 4}, params, (1, 1, 1, 1))  # a parameter without bound
    assert corners({"m_min": 64, "m_max": 64, "n_max": 64}, ("m", "n")) == ((64, 1), (64, 64))
    assert overlap({"n_max": 8, "k_max": 8}, {"n_min": 8, "n_max": 9, "k_max": 1}, ("n", "k"))
    assert not overlap({"n_max": 8, "k_max": 8}, {"n_min": 9, "n_max": 9, "k_max": 1}, ("n", "k"))


def test_an_envelope_in_words_as_trsm_always_said_it():
    assert describe_envelope({"m_max": 64, "n_max": 64}) == "m <= 64, n <= 64"
    assert describe_envelope(TRSM_BLOCKED.envelope) == "128 <= m <= 16384, n <= 16384"
    band = {"bandwidth_min": 16, "bandwidth_max": 512, "n_max": 32768}
    assert describe_envelope(band, ("n", "bandwidth")) == "n <= 32768, 16 <= bandwidth <= 512"
    assert envelope_params(band) == ("bandwidth", "n")


# --- paths of an op ---------------------------------------------------------------------------


def test_a_path_takes_its_ops_shapes():
    assert TRSM_SMALL.params == ("m", "n") and TRSM_SMALL.serves(64, 64)
    assert not TRSM_SMALL.serves(64, 64, 1) and not TRSM_SMALL.serves(64)
    assert TRSM_BLOCKED.bucket_of(4096, 17) == "m2049_16384"


@pytest.fixture
def band_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A path of band_bidiag with two buckets by bandwidth, registered as the op's only path
    (the registry's own band_bidiag path is set aside)."""
    for path_id, registered in list(registry.PATHS.items()):
        if registered.op == "band_bidiag":
            monkeypatch.delitem(registry.PATHS, path_id)
    narrow = ShapeBucket(
        "bw64", {"n_max": 16384, "bandwidth_max": 64}, ((100, 7),), ((100, 7), (1000, 33)),
        ((1024, 32),), ((333, 5),), (257, 17),
    )  # fmt: skip
    wide = ShapeBucket(
        "bw512", {"n_max": 16384, "bandwidth_min": 65, "bandwidth_max": 512}, ((300, 100),),
        ((300, 100),), ((4096, 128),), ((700, 300),), (500, 70),
    )  # fmt: skip
    spec = dataclasses.replace(
        TRSM_SMALL, path_id="band_fake", op="band_bidiag", dtypes=("float32", "float64"),
        envelope={"n_max": 16384, "bandwidth_max": 512}, shape_bucket="bw64",
        quick_shapes=narrow.quick_shapes, verify_shapes=narrow.verify_shapes,
        timed_shapes=narrow.timed_shapes, held_out_shapes=narrow.held_out_shapes,
        sanitizer_shape=narrow.sanitizer_shape, buckets=(narrow, wide),
    )  # fmt: skip
    monkeypatch.setitem(registry.PATHS, "band_fake", spec)
    return spec


def test_routing_goes_by_the_ops_parameters(band_path):
    assert band_path.bucket_of(8192, 32) == "bw64" and band_path.bucket_of(8192, 128) == "bw512"
    assert band_path.bucket_of(8192, 513) is None
    assert registry.route("band_bidiag", "float64", 8192, 128) == [
        registry.Route("band_fake", "bw512")
    ]
    assert registry.route("band_bidiag", "complex64", 8192, 128) == []
    # solve_tri's paths are another folder's: whichever the registry holds are solve_tri's.
    served = registry.route("solve_tri", "float32", 64, 6, 4, 2)
    assert all(registry.PATHS[route.path_id].op == "solve_tri" for route in served)
    assert registry.route("solve_tri", "complex128", 64, 6, 4, 2) == []
    with pytest.raises(ShapeError, match=r"band_bidiag takes 2 shape values \(n, bandwidth\)"):
        registry.route("band_bidiag", "float64", 8192)


def test_measured_reads_timings_by_the_ops_parameters_or_a_listed_shape(band_path):
    served = registry.Route("band_fake", "bw64")
    by_name = {"timings": [{"n": 1024, "bandwidth": 32, "candidate_us": 9.0}]}
    listed = {"timings": [{"shape": [1024, 32], "candidate_us": 8.0}]}
    assert registry.measured(served, by_name, 1024, 32).time_us == 9.0
    assert registry.measured(served, listed, 1024, 32).time_us == 8.0
    assert registry.measured(served, by_name, 1024, 33).time_us is None
    assert registry.measured(served, {"timings": [{"m": 1024, "n": 32, "candidate_us": 1.0}]},
                             1024, 32).time_us is None  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"envelope": {"n_max": 16384}}, "no bound bandwidth_max"),
        ({"timed_shapes": ((1024, 32, 1),)}, r"shape \(1024, 32, 1\) is not a shape of band"),
        ({"sanitizer_shape": (33,)}, "is not a shape of band_bidiag"),
    ],
)
def test_a_path_whose_shapes_or_envelope_do_not_fit_its_op_is_refused(band_path, change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(band_path, **change)


def test_a_path_of_an_unknown_op_is_refused():
    with pytest.raises(ops.UnknownOpError, match="unknown op 'gemm'"):
        dataclasses.replace(TRSM_SMALL, op="gemm")


# --- the loader's call adapters ---------------------------------------------------------------


def test_trsm_call_checks_operands_and_takes_fortran_arrays_of_the_dtype():
    call = ops.get_op("trsm").call()
    a, b = on_device(np.eye(4), "F"), on_device(np.ones((4, 3)), "F")
    assert call.shape(a, b) == (4, 3)
    assert call.kernel_ready("float64", 0, a, b)
    assert not call.kernel_ready("float32", 0, a, b)
    assert not call.kernel_ready("float64", 0, a, on_device(np.ones((4, 3)), "C"))
    assert not call.kernel_ready("float64", 1, a, b)
    snapshot = call.snapshot(a, b)
    b[...] = np.nan
    call.restore(snapshot, a, b)
    assert (b == 1).all()
    with pytest.raises(ValueError, match="b must be m×n with m=4"):
        call.shape(a, on_device(np.ones((5, 3))))
    with pytest.raises(TypeError, match="expected CuPy arrays"):
        call.shape(np.eye(4), np.ones((4, 3)))


def test_solve_tri_call_takes_ggml_tensors_as_ne_reversed():
    call = ops.get_op("solve_tri").call()
    a = on_device(np.zeros((2, 4, 64, 64), np.float32))
    b = on_device(np.zeros((2, 4, 64, 6), np.float32))
    assert call.shape(a, b) == (64, 6, 4, 2)  # (n, k, b2, b3)
    assert call.kernel_ready("float32", 0, a, b)
    assert not call.kernel_ready("float32", 0, a, on_device(np.zeros((2, 4, 64, 6)), "F"))
    with pytest.raises(ValueError, match=r"b must be \(b3, b2, n, k\) = \(2, 4, 64, k\)"):
        call.shape(a, on_device(np.zeros((4, 2, 64, 6), np.float32)))
    with pytest.raises(ValueError, match="a must be"):
        call.shape(on_device(np.zeros((64, 64), np.float32)), b)
    with pytest.raises(TypeError, match="float32 or float64"):
        call.shape(a, on_device(np.zeros((2, 4, 64, 6), np.complex64)))


def test_band_bidiag_call_takes_lapack_band_storage():
    call = ops.get_op("band_bidiag").call()
    band = on_device(np.zeros((33, 100)), "F")
    assert call.shape(band) == (100, 32)
    assert call.kernel_ready("float64", 0, band)
    assert not call.kernel_ready("float64", 0, on_device(np.zeros((33, 100)), "C"))
    assert call.snapshot(band) is None
    with pytest.raises(ValueError, match="at most 3 superdiagonals"):
        call.shape(on_device(np.zeros((5, 4)), "F"))
    with pytest.raises(TypeError, match="float32 or float64"):
        call.shape(on_device(np.zeros((3, 4), np.int32), "F"))


def upper_band(rng: np.random.Generator, n: int, bandwidth: int, dtype: Any) -> np.ndarray:
    """LAPACK upper band storage (bandwidth + 1, n) of a random upper band matrix."""
    ab = rng.uniform(-1, 1, (bandwidth + 1, n)).astype(dtype)
    for j in range(min(bandwidth, n)):
        ab[: bandwidth - j, j] = 0  # above row 0 of the matrix: not part of it
    return ab


def dense(ab: np.ndarray) -> np.ndarray:
    bandwidth, n = ab.shape[0] - 1, ab.shape[1]
    a = np.zeros((n, n))
    for j in range(n):
        for i in range(max(0, j - bandwidth), j + 1):
            a[i, j] = ab[bandwidth + i - j, j]
    return a


@pytest.mark.parametrize(
    ("n", "bandwidth", "dtype", "rtol"),
    [
        (1, 0, np.float64, 0),
        (7, 0, np.float64, 1e-15),
        (40, 1, np.float64, 1e-13),
        (65, 8, np.float64, 1e-12),
        (65, 64, np.float64, 1e-12),
        (100, 16, np.float32, 2e-5),
    ],
)
def test_the_fallbacks_gbbrd_keeps_the_singular_values(n, bandwidth, dtype, rtol):
    """The op's fallback routine (the path's binding, ``seeds.band_bidiag.lapack.gbbrd``):
    the reduction's bidiagonal has the band matrix's singular values: relative error
    against NumPy's SVD of the dense matrix in float64, within a multiple of n·ε of the dtype
    (rtol), measured against the largest singular value."""
    rng = np.random.default_rng(n * 1000 + bandwidth)
    ab = upper_band(rng, n, bandwidth, dtype)
    kept = ab.copy()
    d, e = gbbrd(ab)
    assert d.dtype == dtype and e.dtype == dtype and d.shape == (n,) and e.shape == (n - 1,)
    assert np.array_equal(ab, kept)  # the band is not written
    bidiagonal = np.diag(d.astype(np.float64)) + np.diag(e.astype(np.float64), 1)
    expected = np.linalg.svd(dense(ab), compute_uv=False)
    got = np.linalg.svd(bidiagonal, compute_uv=False)
    np.testing.assert_allclose(got, expected, rtol=0, atol=rtol * expected[0] + 1e-300)


def test_the_fallback_reduces_through_the_paths_binding(monkeypatch: pytest.MonkeyPatch):
    """``BandBidiagCall.fallback`` copies the band to the host, runs the path's ?gbbrd and
    copies d, e back (a host stand-in for CuPy's copies): the same bits as calling it."""
    fake_cupy = SimpleNamespace(
        asnumpy=lambda x: np.array(x), asarray=lambda x: np.array(x),
        cuda=SimpleNamespace(Device=lambda index: contextlib.nullcontext()),
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    ab = upper_band(np.random.default_rng(3), 50, 6, np.float32)
    band = on_device(ab, "F")
    d, e = band_bidiag.BandBidiagCall().fallback(band)
    expected = gbbrd(ab)
    assert np.array_equal(d, expected[0]) and np.array_equal(e, expected[1])
    assert d.dtype == np.float32 and np.array_equal(band, ab)


def test_the_fallbacks_gbbrd_refuses_what_it_cannot_reduce():
    """Before LAPACK sees it: a band with no row (no diagonal) would reach ?gbbrd as KU = −1."""
    with pytest.raises(ValueError, match="float32 or float64"):
        gbbrd(np.zeros((2, 4), np.complex128))
    for empty in ((2, 0), (0, 4)):
        with pytest.raises(ValueError, match="n >= 1"):
            gbbrd(np.zeros(empty))


def test_the_op_modules_import_nothing_of_cuda():
    """The registry imports every op module: CuPy only inside their functions."""
    for module in (trsm, solve_tri, band_bidiag):
        assert "cupy" not in vars(module)
    assert isinstance(ops.get_op("trsm"), OpSpec)


def test_band_bidiag_without_scipy_says_so_when_loaded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "scipy.linalg.cython_lapack", None)
    with pytest.raises(ModuleNotFoundError, match=r"LAPACK \?gbbrd through SciPy.*pip install"):
        ops.get_op("band_bidiag").call()
