"""GET /v1/champions: the champion table with speedups, certificate facts and promotion history,
on the demo job of tests/web_demo.py (two promotions through ``promote_best``, signed, with a
certificate built by ``build_certificate``); open like the best-kernel query
(tests/test_api_scopes.py checks it closed with KERNEVO_API_KERNELS_REQUIRE_READ)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import bearer
from fastapi.testclient import TestClient
from web_demo import BASELINE_US, DemoJob, build_demo_job

from api.schemas_champions import VerificationFacts

if TYPE_CHECKING:
    from conftest import Seeded


@pytest.fixture
def demo(fresh_database_url: str, tmp_path: Path) -> DemoJob:
    return build_demo_job(fresh_database_url, tmp_path / "keys")


def test_a_champion_with_its_speedups_facts_and_history(
    api_client: TestClient, demo: DemoJob
) -> None:
    response = api_client.get("/v1/champions")
    assert response.status_code == 200, response.text
    assert response.headers["x-total-count"] == "1"
    (champion,) = response.json()
    ids = demo.program_ids
    key = tuple(champion[k] for k in ("gpu", "op", "path", "dtype", "shape_bucket"))
    assert key == ("nvidia-h200", "trsm", "trsm_small", "float64", "m64n64")
    assert (champion["program_id"], champion["program_uid"], champion["job_id"]) == (
        ids["i9"],
        "i9",
        demo.job_id,
    )
    assert champion["score"] == 2.31
    # Every timed shape at the evaluation's speedup (baseline / kernel, not stored: computed).
    assert [(s["m"], s["n"]) for s in champion["speedups"]] == list(BASELINE_US)
    for shape in champion["speedups"]:
        assert math.isclose(shape["speedup"], 2.31)
        assert math.isclose(shape["baseline_us"], BASELINE_US[(shape["m"], shape["n"])])
    assert (champion["signed"], champion["signing_key_id"]) == (True, demo.signing_key_id)
    assert champion["envelope"]["m_max"] == 64
    assert "cubin_b64" not in champion and "source" not in champion

    facts = champion["facts"]
    assert facts["format"] == "kernevo.certificate.v2"
    assert {"held_out_shapes", "determinism", "sanitizer_racecheck", "scale_invariance"} <= set(
        facts["checks_passed"]
    )
    assert facts["sanitizer_tools"] == ["memcheck", "racecheck", "synccheck", "initcheck"]
    assert (facts["sanitizer_version"], facts["nvidia_driver_version"]) == (
        "2025.3.1.0",
        "580.95.05",
    )
    assert (facts["gpu_name"], facts["arch"], facts["nvrtc_version"]) == (
        "NVIDIA H200",
        "sm_90",
        "13.0",
    )
    assert facts["noise_floor"] == 0.02
    assert facts["input_scales"] == [2.0**-20, 2.0**20]
    assert (facts["input_seeds"], facts["held_out_seeds"]) == (4, 2)
    assert [33, 31] in facts["determinism_shapes"]
    assert len(facts["held_out_shapes"]) > 0 and [64, 64] in facts["verified_shapes"]
    assert [(t["m"], t["n"]) for t in facts["timings"]] == list(BASELINE_US)
    for timing in facts["timings"]:
        assert timing["speedup_low"] <= timing["speedup"] <= timing["speedup_high"]
        assert timing["faster_than_baseline"] is True
    assert any("float64" in line for line in facts["not_verified"])

    history = champion["promotions"]
    assert [(p["program_id"], p["score"], p["job_id"]) for p in history] == [
        (ids["i9"], 2.31, demo.job_id),
        (ids["i7"], 2.05, demo.job_id),
    ]
    assert history[0]["cubin_sha256"] == champion["cubin_sha256"]
    assert history[0]["cubin_sha256"] != history[1]["cubin_sha256"]
    assert {p["signing_key_id"] for p in history} == {demo.signing_key_id}
    assert history[0]["promoted_at"] >= history[1]["promoted_at"]


@pytest.mark.parametrize(
    ("params", "count"),
    [
        ({"gpu": "NVIDIA H200"}, 1),
        ({"gpu": "nvidia-h200", "op": "trsm", "dtype": "float64", "shape_bucket": "m64n64"}, 1),
        ({"path": "trsm_small"}, 1),
        ({"gpu": "NVIDIA A100"}, 0),
        ({"path": "trsm_blocked"}, 0),
        ({"op": "trsm", "path": "trsm_small_z64"}, 0),
        ({"dtype": "float32"}, 0),
        ({"shape_bucket": "m2049_16384"}, 0),  # a bucket of trsm_blocked, no champion
        ({"path": "trsm_small", "shape_bucket": "m64n64"}, 1),
        ({"op": "trsm", "shape_bucket": "m64n64"}, 1),
    ],
)
def test_filters(api_client: TestClient, demo: DemoJob, params: dict[str, str], count: int) -> None:
    response = api_client.get("/v1/champions", params=params)
    assert response.status_code == 200, response.text
    assert len(response.json()) == count
    assert response.headers["x-total-count"] == str(count)


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"op": "gemm"}, "unknown op 'gemm'"),
        ({"path": "trsm_huge"}, "unknown path 'trsm_huge'"),
        ({"dtype": "float16"}, "float16"),
        ({"gpu": "!!!"}, "not a GPU name"),
    ],
)
def test_unknown_keys_are_422(api_client: TestClient, params: dict[str, str], detail: str) -> None:
    response = api_client.get("/v1/champions", params=params)
    assert response.status_code == 422
    assert detail in response.json()["detail"]


H200_FLOAT64 = {"gpu": "nvidia-h200", "dtype": "float64"}


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        # A fresh user's findings: each answered 200 [], as if no champion had been promoted.
        ({**H200_FLOAT64, "path": "trsm_small", "shape_bucket": "nope"},
         "unknown shape bucket 'nope' of path trsm_small; its buckets: m64n64"),
        ({**H200_FLOAT64, "path": "trsm_blocked", "shape_bucket": "m64n64"},
         "unknown shape bucket 'm64n64' of path trsm_blocked; its buckets: m128_2048, "
         "m2049_16384"),
        ({"op": "solve_tri", "shape_bucket": "m64n64"},
         "unknown shape bucket 'm64n64' of path solve_tri; its buckets: n256_k128"),
        ({"op": "trsm", "shape_bucket": "n256_k128"},
         "unknown shape bucket 'n256_k128' of any path of op trsm; their buckets: trsm_small: "
         "m64n64; trsm_small_z64: m64eq_n64; trsm_blocked: m128_2048, m2049_16384"),
        ({"shape_bucket": "m16384n16384"},
         "unknown shape bucket 'm16384n16384' of any path; their buckets: trsm_small: m64n64; "
         "trsm_small_z64: m64eq_n64; trsm_blocked: m128_2048, m2049_16384; solve_tri: "
         "n256_k128; band_bidiag: n1_2048, n2049_16384; trsm_small_batched: m64n64"),
        # An op and a path that contradict each other.
        ({**H200_FLOAT64, "op": "solve_tri", "path": "trsm_blocked"},
         "path trsm_blocked implements trsm, not solve_tri"),
        ({"op": "trsm", "path": "trsm_small_batched"},
         "path trsm_small_batched implements trsm_batched, not trsm"),
    ],
)  # fmt: skip
def test_filters_no_champion_can_match_are_422(
    api_client: TestClient, params: dict[str, str], detail: str
) -> None:
    response = api_client.get("/v1/champions", params=params)
    assert response.status_code == 422
    assert response.json() == {"detail": detail}


@pytest.mark.parametrize(
    ("route", "params", "detail"),
    [
        # A path with a dtype it lacks: GET /v1/kernels/best's words (not_implementing).
        ("/v1/champions", {"path": "solve_tri", "dtype": "float64"},
         "path solve_tri does not implement solve_tri in float64 (it implements solve_tri in "
         "float32)"),
        ("/v1/jobs", {"path": "trsm_small_z64", "dtype": "complex64"},
         "path trsm_small_z64 does not implement trsm in complex64 (it implements trsm in "
         "complex128)"),
        # An op none of whose paths has the dtype: seeds.spec.MissingDtypeError's words.
        ("/v1/manifest", {"gpu": "nvidia-h200", "op": "solve_tri", "dtype": "complex128"},
         "op solve_tri has no complex128 kernel; it implements float32"),
        ("/v1/champions", {"op": "solve_tri", "dtype": "complex128"},
         "op solve_tri has no complex128 kernel; it implements float32"),
    ],
)  # fmt: skip
def test_a_dtype_the_path_or_op_lacks_is_a_422_not_an_empty_list(
    api_client: TestClient,
    read_token: str,
    seeded: Seeded,
    route: str,
    params: dict[str, str],
    detail: str,
) -> None:
    """Each answered 200 [] (read as "no champion yet"): ``api.key_filters.check_dtype_filter``
    refuses it with a text ``detail``, the form of the other filter refusals (no validation list
    with ``loc``/``type``), whatever rows the database holds."""
    response = api_client.get(route, params=params, headers=bearer(read_token))
    assert (response.status_code, response.json()) == (422, {"detail": detail})


def test_a_dtype_the_path_and_op_implement_still_lists(
    api_client: TestClient, read_token: str, seeded: Seeded
) -> None:
    """conftest's lineage: a trsm_small float64 job and its champion on nvidia-h200."""
    headers = bearer(read_token)
    for params in ({"path": "trsm_small", "dtype": "float64"}, {"op": "trsm", "dtype": "float64"}):
        (champion,) = api_client.get("/v1/champions", params=params).json()
        assert champion["program_id"] == seeded.grandchild_id
        manifest = api_client.get("/v1/manifest", params={"gpu": "nvidia-h200", **params})
        assert manifest.status_code == 200
        assert [c["program_id"] for c in manifest.json()["champions"]] == [seeded.grandchild_id]
    (job,) = api_client.get(
        "/v1/jobs", params={"path": "trsm_small", "dtype": "float64"}, headers=headers
    ).json()
    assert job["id"] == seeded.job_id


def test_a_champion_promoted_unsigned_before_certificates_says_so(
    api_client: TestClient, seeded: Seeded
) -> None:
    """conftest's lineage promotes through the repository alone: no signature, no
    certificate — shown as such, not as facts."""
    (champion,) = api_client.get("/v1/champions").json()
    assert champion["program_id"] == seeded.grandchild_id
    assert (champion["signed"], champion["signing_key_id"], champion["facts"]) == (
        False,
        None,
        None,
    )
    assert champion["score"] == 2.01
    assert [(s["m"], s["n"], s["speedup"]) for s in champion["speedups"]] == [(64, 64, 2.01)]
    (promotion,) = champion["promotions"]
    assert (promotion["program_id"], promotion["signing_key_id"]) == (seeded.grandchild_id, None)


def test_no_champion_is_an_empty_table(api_client: TestClient) -> None:
    response = api_client.get("/v1/champions")
    assert (response.status_code, response.json(), response.headers["x-total-count"]) == (
        200,
        [],
        "0",
    )


def test_facts_of_a_malformed_certificate_keep_only_what_has_its_type() -> None:
    """The service verifies nothing: a stored document that is not a valid certificate is
    summarized field by field, never refused or raised on (the loader refuses it)."""
    facts = VerificationFacts.from_document(
        {
            "format": 2,
            "checks_passed": ["screen", 7, None],
            "verified_shapes": [[1, 1], [1, "2"], [True, 3], [4, 5, 6], "7x7"],
            "sanitizer_tools": "memcheck",
            "gpu_name": "   ",
            "noise_floor": True,
            "input_scales": [2.0, "3", float("inf"), -1.0],
            "input_seeds": {"a": 1},
            "timings": [{"m": 64, "n": 64, "speedup": "fast"}, {"m": "64", "n": 64}, 5],
            "not_verified": ["other GPUs", {"x": 1}],
        }
    )
    assert facts.format is None
    assert facts.checks_passed == ["screen"]
    assert facts.verified_shapes == [[1, 1]]
    assert (facts.sanitizer_tools, facts.gpu_name, facts.noise_floor) == ([], None, None)
    assert facts.input_scales == [2.0, -1.0]
    assert facts.input_seeds == 0
    assert [(t.m, t.n, t.speedup) for t in facts.timings] == [(64, 64, None)]
    assert facts.not_verified == ["other GPUs"]
