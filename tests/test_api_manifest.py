"""GET /v1/manifest: every champion for a GPU in one answer, with an ETag that If-None-Match
turns into 304 until a champion of that GPU changes."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from api.routes.manifest import matches
from db import repository as repo
from db.session import make_engine, session_scope

if TYPE_CHECKING:
    from conftest import Seeded

MANIFEST = "/v1/manifest"


def _promote(
    url: str,
    report_json: Callable[..., str],
    *,
    dtype: str,
    gpu: str,
    score: float,
    cubin: bytes,
    uid: str,
) -> None:
    """A trsm_small champion of ``dtype`` on ``gpu`` with ``score``: job, program, verified
    evaluation and promotion, committed."""
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(s, path="trsm_small", dtype=dtype, gpu=gpu,
                                  shape_bucket="m64n64", config={}, backend="offline",
                                  model=None)  # fmt: skip
            program, _ = repo.record_program(s, job_id=job.id, uid=uid, source=f"// {uid}\n",
                                             parent_uid=None, island=0, generation=0,
                                             iteration=0, diff=None, backend="offline",
                                             model=None)  # fmt: skip
            evaluation = repo.record_evaluation(
                s, program_id=program.id, report_json=report_json(score, cubin=cubin),
                gpu_key=gpu, gpu_name=gpu, arch="sm_90", driver_version=None,
                nvrtc_version="13.0", score=score, state="verified", error_kind=None,
            )  # fmt: skip
            repo.promote_champion(
                s, evaluation_id=evaluation.id, path="trsm_small", dtype=dtype, gpu_key=gpu,
                shape_bucket="m64n64", cubin=cubin,
                launch={"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
                envelope={"m_max": 64, "n_max": 64}, compile_options=["-arch=sm_90"],
            )  # fmt: skip
    finally:
        engine.dispose()


def _get(client: TestClient, *, etag: str | None = None, **params: str) -> object:
    headers = {} if etag is None else {"If-None-Match": etag}
    return client.get(MANIFEST, params={"gpu": "nvidia-h200", **params}, headers=headers)


def test_the_manifest_holds_every_champion_of_the_gpu(
    api_client: TestClient,
    seeded: Seeded,
    fresh_database_url: str,
    report_json: Callable[..., str],
) -> None:
    f32 = b"\x7fELF float32 cubin" * 8
    _promote(fresh_database_url, report_json, dtype="float32", gpu="nvidia-h200", score=1.7,
             cubin=f32, uid="f32")  # fmt: skip
    _promote(fresh_database_url, report_json, dtype="float32", gpu="nvidia-a100", score=1.9,
             cubin=b"other gpu", uid="a100")  # fmt: skip
    response = api_client.get(MANIFEST, params={"gpu": "NVIDIA H200"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["format"], body["gpu"]) == ("kernevo.manifest.v1", "nvidia-h200")
    assert response.headers["etag"] == f'"{body["etag"]}"'
    assert response.headers["cache-control"] == "no-cache"
    assert [(c["path"], c["dtype"], c["gpu"]) for c in body["champions"]] == [
        ("trsm_small", "float32", "nvidia-h200"),
        ("trsm_small", "float64", "nvidia-h200"),
    ]
    by_dtype = {c["dtype"]: c for c in body["champions"]}
    assert base64.b64decode(by_dtype["float32"]["cubin_b64"]) == f32
    assert base64.b64decode(by_dtype["float64"]["cubin_b64"]) == seeded.cubin
    float64 = by_dtype["float64"]
    assert float64["cubin_sha256"] == hashlib.sha256(seeded.cubin).hexdigest()
    assert float64["source"] == seeded.grandchild_source
    assert float64["program_id"] == seeded.grandchild_id
    assert "candidates" not in float64  # a manifest compares nothing: the loader does
    # The same champion as the best-kernel query serves, field for field.
    best = api_client.get(
        "/v1/kernels/best",
        params={"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 64, "n": 64},
    ).json()
    assert {k: best[k] for k in float64} == float64
    only = _get(api_client, dtype="float64").json()  # type: ignore[attr-defined]
    assert [c["dtype"] for c in only["champions"]] == ["float64"]
    assert only["etag"] != body["etag"]
    assert _get(api_client, path="trsm_small_z64").json()["champions"] == []  # type: ignore[attr-defined]
    none = api_client.get(MANIFEST, params={"gpu": "nvidia-b200"})
    assert (none.status_code, none.json()["champions"]) == (200, [])


def test_if_none_match_answers_304_until_a_champion_changes(
    api_client: TestClient,
    seeded: Seeded,
    fresh_database_url: str,
    report_json: Callable[..., str],
) -> None:
    first = _get(api_client)
    etag = first.headers["etag"]  # type: ignore[attr-defined]
    for header in (etag, f"W/{etag}", f'"nope", {etag}', "*"):
        again = _get(api_client, etag=header)
        assert again.status_code == 304, header  # type: ignore[attr-defined]
        assert again.content == b""  # type: ignore[attr-defined]
        assert again.headers["etag"] == etag  # type: ignore[attr-defined]
    assert _get(api_client, etag='"0000"').status_code == 200  # type: ignore[attr-defined]
    # Another GPU's promotion leaves this GPU's manifest as it was ...
    _promote(fresh_database_url, report_json, dtype="float64", gpu="nvidia-a100", score=3.0,
             cubin=b"a100", uid="a100")  # fmt: skip
    assert _get(api_client, etag=etag).status_code == 304  # type: ignore[attr-defined]
    # ... a better champion of this GPU changes it.
    _promote(fresh_database_url, report_json, dtype="float64", gpu="nvidia-h200", score=2.5,
             cubin=b"better", uid="better")  # fmt: skip
    changed = _get(api_client, etag=etag)
    assert changed.status_code == 200  # type: ignore[attr-defined]
    assert changed.headers["etag"] != etag  # type: ignore[attr-defined]
    (champion,) = changed.json()["champions"]  # type: ignore[attr-defined]
    assert base64.b64decode(champion["cubin_b64"]) == b"better"
    new_etag = changed.headers["etag"]  # type: ignore[attr-defined]
    assert _get(api_client, etag=new_etag).status_code == 304  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"gpu": " -- "}, "not a GPU name"),
        ({"gpu": "nvidia-h200", "path": "gemm_big"}, "gemm_big"),
        ({"gpu": "nvidia-h200", "dtype": "float16"}, "unknown dtype 'float16'"),
        # An op and a path that contradict each other (a fresh user's finding: 200 []).
        ({"gpu": "nvidia-h200", "op": "solve_tri", "path": "trsm_blocked"},
         "path trsm_blocked implements trsm, not solve_tri"),
        ({"gpu": "nvidia-h200", "op": "band_bidiag", "path": "solve_tri", "dtype": "float32"},
         "path solve_tri implements solve_tri, not band_bidiag"),
        ({"gpu": "nvidia-h200", "op": "gemm", "path": "trsm_small"}, "unknown op 'gemm'"),
    ],
)  # fmt: skip
def test_unservable_manifest_requests_are_422(
    api_client: TestClient, params: dict[str, str], detail: str
) -> None:
    response = api_client.get(MANIFEST, params=params)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert api_client.get(MANIFEST).status_code == 422  # gpu is required


def test_an_op_and_a_path_of_another_op_is_a_422_not_an_empty_manifest(
    api_client: TestClient,
) -> None:
    """A fresh user's finding: ``op=solve_tri&path=trsm_blocked`` answered 200 with no
    champions, which reads as none promoted yet."""
    params = {"gpu": "nvidia-h200", "op": "solve_tri", "path": "trsm_blocked"}
    response = api_client.get(MANIFEST, params=params)
    assert response.status_code == 422
    assert response.json() == {"detail": "path trsm_blocked implements trsm, not solve_tri"}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('"abc"', True),
        ('W/"abc"', True),
        (' "x" ,  "abc" ', True),
        ("*", True),
        ("abc", False),  # an entity tag is quoted
        ('"abcd"', False),
        ('"ab"', False),
        ("", False),
        (None, False),
    ],
)
def test_if_none_match_parsing(header: str | None, expected: bool) -> None:
    assert matches(header, "abc") is expected
