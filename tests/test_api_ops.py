"""The best-kernel query, the manifest and the champion listing by op (issue 8, Build item 1):
each op's own shape parameters in the query, a 422 for every way they can be wrong, routing by
them to the op's paths and buckets.

Two fake paths stand in for the ops whose paths are another folder's: ``tri_fake`` (solve_tri,
float32, n ≤ 128, k ≤ 64, b2, b3 ≤ 64) and ``band_fake`` (band_bidiag, float32 and float64, n ≤
16384, two buckets by bandwidth: ≤ 64 and 65..512). Any other path of those ops is taken out of
the registry for the test, so the answers do not depend on it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from conftest import H200, SEED_SOURCE, make_report
from fastapi.testclient import TestClient

from seeds import registry
from seeds.registry import Route
from seeds.spec import ShapeBucket
from seeds.trsm_small.spec import TRSM_SMALL

BEST = "/v1/kernels/best"
TRI = dataclasses.replace(
    TRSM_SMALL, path_id="tri_fake", op="solve_tri", dtypes=("float32",), shape_bucket="n128",
    envelope={"n_max": 128, "k_max": 64, "b2_max": 64, "b3_max": 64},
    quick_shapes=((11, 5, 1, 1),), verify_shapes=((11, 5, 1, 1), (64, 6, 4, 2)),
    timed_shapes=((64, 6, 4, 2),), held_out_shapes=((33, 3, 2, 1),),
    sanitizer_shape=(70, 33, 3, 2),
)  # fmt: skip
NARROW = ShapeBucket(
    "bw64", {"n_max": 16384, "bandwidth_max": 64}, ((100, 7),), ((100, 7),), ((1024, 32),),
    ((333, 5),), (257, 17),
)  # fmt: skip
WIDE = ShapeBucket(
    "bw512", {"n_max": 16384, "bandwidth_min": 65, "bandwidth_max": 512}, ((300, 100),),
    ((300, 100),), ((4096, 128),), ((700, 300),), (500, 70),
)  # fmt: skip
BAND = dataclasses.replace(
    TRSM_SMALL, path_id="band_fake", op="band_bidiag", dtypes=("float32", "float64"),
    envelope={"n_max": 16384, "bandwidth_max": 512}, shape_bucket="bw64",
    quick_shapes=NARROW.quick_shapes, verify_shapes=NARROW.verify_shapes,
    timed_shapes=NARROW.timed_shapes, held_out_shapes=NARROW.held_out_shapes,
    sanitizer_shape=NARROW.sanitizer_shape, buckets=(NARROW, WIDE),
)  # fmt: skip
TRI_QUERY = {"op": "solve_tri", "dtype": "float32", "gpu": "NVIDIA H200"}
BAND_QUERY = {"op": "band_bidiag", "dtype": "float64", "gpu": "nvidia-h200"}


@pytest.fixture(autouse=True)
def fake_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two fake paths in the registry, and no other path of their ops."""
    for path_id, spec in list(registry.PATHS.items()):
        if spec.op != "trsm":
            monkeypatch.delitem(registry.PATHS, path_id)
    monkeypatch.setitem(registry.PATHS, TRI.path_id, TRI)
    monkeypatch.setitem(registry.PATHS, BAND.path_id, BAND)


def promote(url: str, route: Route, dtype: str, timings: list[dict[str, Any]]) -> int:
    """A job, a program and its verified evaluation on ``route``'s path and bucket, promoted to
    champion for ``dtype`` on the H200 with the path's envelope; returns the program id."""
    from db import repository as repo
    from db.session import make_engine, session_scope

    cubin = f"cubin of {route.path_id}/{route.shape_bucket}".encode()
    spec = registry.get_path(route.path_id, route.shape_bucket)
    report = {
        **json.loads(make_report(1.7, cubin=cubin)),
        "timings": timings,
        "verified_shapes": [list(shape) for shape in spec.verify_shapes],
    }
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(
                s, path=route.path_id, dtype=dtype, gpu=H200, shape_bucket=route.shape_bucket,
                config={"iterations": 1}, backend="offline", model=None,
            )  # fmt: skip
            program, _ = repo.record_program(
                s, job_id=job.id, uid=f"{route.path_id}-{route.shape_bucket}", source=SEED_SOURCE,
                parent_uid=None, island=0, generation=0, iteration=0, diff=None,
                backend="offline", model=None,
            )  # fmt: skip
            evaluation = repo.record_evaluation(
                s, program_id=program.id, report_json=report, gpu_key=H200,
                gpu_name="NVIDIA H200", arch="sm_90", driver_version="580.65",
                nvrtc_version="13.0", score=1.7, state="verified", error_kind=None,
            )  # fmt: skip
            repo.promote_champion(
                s, evaluation_id=evaluation.id, path=route.path_id, dtype=dtype, gpu_key=H200,
                shape_bucket=route.shape_bucket, cubin=cubin,
                launch={"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
                envelope=spec.envelope, compile_options=spec.compile_options(dtype, "sm_90"),
            )  # fmt: skip
            return program.id
    finally:
        engine.dispose()


@pytest.fixture
def champions(fresh_database_url: str) -> dict[str, int]:
    """A solve_tri champion (float32) and a band_bidiag champion per bucket (float64)."""
    return {
        "tri": promote(
            fresh_database_url, Route("tri_fake", "n128"), "float32",
            [{"n": 64, "k": 6, "b2": 4, "b3": 2, "candidate_us": 7.5, "baseline_us": 31.0}],
        ),
        "narrow": promote(
            fresh_database_url, Route("band_fake", "bw64"), "float64",
            [{"n": 1024, "bandwidth": 32, "candidate_us": 900.0, "baseline_us": 9000.0}],
        ),
        "wide": promote(
            fresh_database_url, Route("band_fake", "bw512"), "float64",
            [{"shape": [4096, 128], "candidate_us": 9e4, "baseline_us": 9e5}],
        ),
    }  # fmt: skip


# --- answers ----------------------------------------------------------------------------------


def test_solve_tri_is_routed_by_its_four_parameters(
    api_client: TestClient, champions: dict[str, int]
) -> None:
    response = api_client.get(BEST, params={**TRI_QUERY, "n": 64, "k": 6, "b2": 4, "b3": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["path"], body["shape_bucket"], body["program_id"]) == (
        "tri_fake", "n128", champions["tri"],
    )  # fmt: skip
    assert body["envelope"] == {
        "n_max": 128, "k_max": 64, "b2_max": 64, "b3_max": 64,
        "verified_shapes": [[11, 5, 1, 1], [64, 6, 4, 2]],
    }  # fmt: skip
    assert body["candidates"] == [{
        "path": "tri_fake", "shape_bucket": "n128", "status": "chosen",
        "program_id": champions["tri"], "combined_score": 1.7, "time_us": 7.5,
    }]  # fmt: skip


def test_band_bidiag_is_routed_to_the_bucket_of_its_bandwidth(
    api_client: TestClient, champions: dict[str, int]
) -> None:
    for bandwidth, bucket, key, time_us in ((32, "bw64", "narrow", 900.0),
                                            (128, "bw512", "wide", 9e4)):  # fmt: skip
        params = {**BAND_QUERY, "n": 4096 if bandwidth == 128 else 1024, "bandwidth": bandwidth}
        body = api_client.get(BEST, params=params).json()
        assert (body["path"], body["shape_bucket"], body["program_id"]) == (
            "band_fake", bucket, champions[key],
        )  # fmt: skip
        assert body["candidates"][0]["time_us"] == time_us  # by name, or by a listed shape
    no_float32 = api_client.get(BEST, params={**BAND_QUERY, "dtype": "float32", "n": 1024,
                                              "bandwidth": 32})  # fmt: skip
    assert no_float32.status_code == 404
    assert no_float32.json()["detail"] == (
        "no champion yet for path band_fake float32 on nvidia-h200 (shape bucket bw64)"
    )


def test_trsm_is_answered_as_before_beside_the_other_ops(
    api_client: TestClient, champions: dict[str, int]
) -> None:
    response = api_client.get(BEST, params={**BAND_QUERY, "op": "trsm", "m": 48, "n": 64})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "no champion yet for path trsm_small float64 on nvidia-h200 (shape bucket m64n64)"
    )


# --- 422s -------------------------------------------------------------------------------------


def _issues(response: Any) -> list[tuple[list[Any], str, str]]:
    assert response.status_code == 422, response.text
    return [(i["loc"], i["type"], i["msg"]) for i in response.json()["detail"]]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        # trsm: n missing; k and b2 belong to solve_tri; m out of its range.
        ({"op": "trsm", "m": 4}, [(["query", "n"], "missing", "trsm needs n (columns of B)")]),
        ({"op": "trsm", "m": 4, "n": 4, "k": 6, "b2": 1}, [
            (["query", "k"], "extra_forbidden",
             "k is not a shape parameter of trsm (its parameters: m, n); k is a parameter of "
             "solve_tri"),
            (["query", "b2"], "extra_forbidden",
             "b2 is not a shape parameter of trsm (its parameters: m, n); b2 is a parameter of "
             "solve_tri"),
        ]),
        ({"op": "trsm", "m": -1, "n": 4}, [
            (["query", "m"], "value_out_of_range",
             "m=-1 is out of range: trsm takes 0 <= m <= 2147483647 (rows of A and B)"),
        ]),
        # solve_tri: every parameter missing but n; m is trsm's; k, b3 out of range.
        ({"op": "solve_tri", "n": 64}, [
            (["query", "k"], "missing", "solve_tri needs k (columns of each B (right-hand sides))"),
            (["query", "b2"], "missing",
             "solve_tri needs b2 (batch size in ggml's third dimension)"),
            (["query", "b3"], "missing",
             "solve_tri needs b3 (batch size in ggml's fourth dimension)"),
        ]),
        ({"op": "solve_tri", "m": 64, "n": 64, "k": 6, "b2": 4, "b3": 2}, [
            (["query", "m"], "extra_forbidden",
             "m is not a shape parameter of solve_tri (its parameters: n, k, b2, b3); m is a "
             "parameter of trsm, trsm_batched"),
        ]),
        ({"op": "solve_tri", "n": 64, "k": 0, "b2": 4, "b3": -2}, [
            (["query", "k"], "value_out_of_range",
             "k=0 is out of range: solve_tri takes 1 <= k <= 2147483647 (columns of each B "
             "(right-hand sides))"),
            (["query", "b3"], "value_out_of_range",
             "b3=-2 is out of range: solve_tri takes 1 <= b3 <= 2147483647 (batch size in "
             "ggml's fourth dimension)"),
        ]),
        ({"op": "solve_tri", "n": 64, "k": 6, "b2": 65536, "b3": 65536}, [
            (["query"], "shape_relation",
             "solve_tri needs b2 * b3 <= 2147483647; got n=64, k=6, b2=65536, b3=65536"),
        ]),
        # band_bidiag: bandwidth missing; k is solve_tri's; bandwidth past n - 1.
        ({"op": "band_bidiag", "n": 4096}, [
            (["query", "bandwidth"], "missing",
             "band_bidiag needs bandwidth (superdiagonals of the upper band)"),
        ]),
        ({"op": "band_bidiag", "n": 4096, "bandwidth": 32, "k": 1}, [
            (["query", "k"], "extra_forbidden",
             "k is not a shape parameter of band_bidiag (its parameters: n, bandwidth); k is a "
             "parameter of solve_tri"),
        ]),
        ({"op": "band_bidiag", "n": 32, "bandwidth": 32}, [
            (["query"], "shape_relation",
             "band_bidiag needs bandwidth <= n - 1; got n=32, bandwidth=32"),
        ]),
        # trsm_batched: batch missing; k is solve_tri's; m past the small regime, batch 0.
        ({"op": "trsm_batched", "m": 16, "n": 16}, [
            (["query", "batch"], "missing",
             "trsm_batched needs batch (independent systems solved in one call)"),
        ]),
        ({"op": "trsm_batched", "m": 16, "n": 16, "batch": 8, "k": 1}, [
            (["query", "k"], "extra_forbidden",
             "k is not a shape parameter of trsm_batched (its parameters: m, n, batch); k is a "
             "parameter of solve_tri"),
        ]),
        ({"op": "trsm_batched", "m": 65, "n": 16, "batch": 0}, [
            (["query", "m"], "value_out_of_range",
             "m=65 is out of range: trsm_batched takes 1 <= m <= 64 (rows of each A and B (the "
             "small regime, m <= 64))"),
            (["query", "batch"], "value_out_of_range",
             "batch=0 is out of range: trsm_batched takes 1 <= batch <= 2147483647 (independent "
             "systems solved in one call)"),
        ]),
        ({"op": "trsm", "m": 16, "n": 16, "batch": 8}, [
            (["query", "batch"], "extra_forbidden",
             "batch is not a shape parameter of trsm (its parameters: m, n); batch is a "
             "parameter of trsm_batched"),
        ]),
        ({"op": "band_bidiag", "n": 0, "bandwidth": 0}, [
            (["query", "n"], "value_out_of_range",
             "n=0 is out of range: band_bidiag takes 1 <= n <= 2147483647 (order of the square "
             "band matrix)"),
        ]),
    ],
)  # fmt: skip
def test_every_wrong_shape_parameter_is_a_422_naming_it(
    api_client: TestClient, params: dict[str, Any], expected: list[Any]
) -> None:
    response = api_client.get(BEST, params={"dtype": "float32", "gpu": "nvidia-h200", **params})
    assert _issues(response) == expected


def test_a_value_that_is_not_an_integer_is_refused_by_the_query_itself(
    api_client: TestClient,
) -> None:
    response = api_client.get(BEST, params={**TRI_QUERY, "n": 64, "k": "six", "b2": 4, "b3": 2})
    [(loc, kind, _)] = _issues(response)
    assert (loc, kind) == (["query", "k"], "int_parsing")


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"op": "gemm", "m": 4, "n": 4},
         "unknown op 'gemm'; known ops: trsm, solve_tri, band_bidiag, trsm_batched"),
        ({**TRI_QUERY, "n": 300, "k": 6, "b2": 4, "b3": 2},
         "no path serves solve_tri float32 at n=300, k=6, b2=4, b3=2"),
        # A dtype the op lacks is said as the CLI says it, not blamed on the shape (a fresh
        # user's finding).
        ({**TRI_QUERY, "dtype": "float64", "n": 64, "k": 6, "b2": 4, "b3": 2},
         "op solve_tri has no float64 kernel; it implements float32"),
        ({**BAND_QUERY, "n": 4096, "bandwidth": 1024},
         "no path serves band_bidiag float64 at n=4096, bandwidth=1024"),
        ({**BAND_QUERY, "n": 4096, "bandwidth": 1024, "path": "band_fake"},
         "path band_fake does not serve band_bidiag float64 at n=4096, bandwidth=1024"),
        # A path of another op is said so, not blamed on the shape (a fresh user's finding).
        ({**BAND_QUERY, "n": 4096, "bandwidth": 32, "path": "tri_fake"},
         "path tri_fake does not implement band_bidiag in float64 (it implements solve_tri in "
         "float32)"),
    ],
)  # fmt: skip
def test_what_no_path_of_the_op_serves_is_a_422_in_the_ops_words(
    api_client: TestClient, params: dict[str, Any], detail: str
) -> None:
    response = api_client.get(BEST, params={"dtype": "float32", "gpu": "nvidia-h200", **params})
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_the_openapi_document_lists_every_ops_parameters(api_client: TestClient) -> None:
    document = api_client.get("/openapi.json").json()
    parameters = {p["name"]: p for p in document["paths"][BEST]["get"]["parameters"]}
    assert {"m", "n", "k", "b2", "b3", "bandwidth"} <= set(parameters)
    assert not any(parameters[name]["required"] for name in ("m", "n", "k", "bandwidth"))
    assert "solve_tri: columns of each B" in parameters["k"]["description"]
    assert "trsm: columns of B" in parameters["n"]["description"]
    assert "band_bidiag: order of the square band matrix" in parameters["n"]["description"]


# --- the manifest and the champion listing ----------------------------------------------------


def test_the_manifest_and_the_listing_take_the_op(
    api_client: TestClient, champions: dict[str, int]
) -> None:
    manifest = api_client.get("/v1/manifest", params={"gpu": H200, "op": "band_bidiag"}).json()
    assert [(c["path"], c["shape_bucket"]) for c in manifest["champions"]] == [
        ("band_fake", "bw512"), ("band_fake", "bw64"),
    ]  # fmt: skip
    everything = api_client.get("/v1/manifest", params={"gpu": H200}).json()
    assert len(everything["champions"]) == 3 and everything["etag"] != manifest["etag"]
    unknown = api_client.get("/v1/manifest", params={"gpu": H200, "op": "gemm"})
    assert unknown.status_code == 422 and "unknown op 'gemm'" in unknown.json()["detail"]
    listed = api_client.get("/v1/champions", params={"op": "solve_tri"}).json()
    assert [(c["path"], c["op"]) for c in listed] == [("tri_fake", "solve_tri")]


# --- kernevo best -----------------------------------------------------------------------------


def _best(api_client: TestClient, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """``kernevo best`` against the test client (its ``_get_json`` answered by the app)."""
    import kernevo.cli
    import kernevo.cli.best

    monkeypatch.setattr(
        kernevo.cli.best, "_get_json", lambda url, params: api_client.get(url, params=params).json()
    )
    command = ["best", *args, "--gpu", "nvidia-h200", "--api-url", "http://testserver"]
    return kernevo.cli.main(command)


def test_kernevo_best_takes_the_ops_shape(
    api_client: TestClient,
    champions: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tri = ["--op", "solve_tri", "--dtype", "float32", "--shape", "n=64,k=6,b2=4,b3=2"]
    assert _best(api_client, monkeypatch, *tri) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "solve_tri float32 n=64 k=6 b2=4 b3=2 on nvidia-h200: path tri_fake, shape bucket n128"
    )
    assert f"  tri_fake (shape bucket n128): program {champions['tri']}, score 1.700, 7.50 us " \
        "at n=64 k=6 b2=4 b3=2 (chosen)" in out  # fmt: skip
    assert "  n=64 k=6 b2=4 b3=2: 7.50 us vs 31.00 us (4.13x)" in out
    assert "envelope n <= 128, k <= 64, b2 <= 64, b3 <= 64, 2 verified shapes" in out

    band = ["--op", "band_bidiag", "--dtype", "float64", "--shape", "n=4096,bandwidth=128"]
    assert _best(api_client, monkeypatch, *band) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("path band_fake, shape bucket bw512")
    assert "  n=4096 bandwidth=128: 90000.00 us vs 900000.00 us (10.00x)" in out
    assert "envelope n <= 16384, bandwidth <= 512, 1 verified shapes" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--op", "solve_tri", "--shape", "n=64,k=6"], "solve_tri needs b2"),
        (["--shape", "m=4,n=2", "--m", "4"], "argument --m: m is also given by --shape"),
        (["--m", "8", "--n", "8", "--shape", "k=2"], "k is not a shape parameter of trsm"),
        (["--op", "band_bidiag", "--shape", "n=8,bandwidth=8"],
         "band_bidiag needs bandwidth <= n - 1"),
        (["--shape", "n=64,x"], "argument --shape: expected name=value pairs"),
        (["--shape", "n=1,n=2"], "argument --shape: n given twice"),
        (["--op", "gemm", "--m", "1", "--n", "1"], "unknown op 'gemm'; known ops: trsm, "),
    ],
)  # fmt: skip
def test_kernevo_best_refuses_a_shape_the_op_does_not_take(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import kernevo.cli

    with pytest.raises(SystemExit) as exited:
        kernevo.cli.main(["best", "--dtype", "float32", *args, "--gpu", "nvidia-h200"])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert message in line
