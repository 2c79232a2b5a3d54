"""GET /v1/kernels/best against a real migrated database seeded through db.repository."""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

if TYPE_CHECKING:
    from conftest import Seeded

BEST = "/v1/kernels/best"
QUERY = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 48, "n": 64}


def test_best_kernel_serves_the_verified_cubin(api_client: TestClient, seeded: Seeded) -> None:
    response = api_client.get(BEST, params=QUERY)
    assert response.status_code == 200, response.text
    body = response.json()
    cubin = base64.b64decode(body["cubin_b64"], validate=True)
    assert cubin == seeded.cubin
    assert body["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
    assert body["source"] == seeded.grandchild_source
    assert body["source_sha256"] == hashlib.sha256(body["source"].encode()).hexdigest()
    assert (body["path"], body["dtype"], body["gpu"], body["shape_bucket"]) == (
        "trsm_small",
        "float64",
        "nvidia-h200",
        "m64n64",
    )
    assert (body["program_id"], body["program_uid"]) == (seeded.grandchild_id, "grandchild")
    assert (body["arch"], body["nvrtc_version"]) == ("sm_90", "13.0")
    assert body["compile_options"] == ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"]
    assert body["launch"] == {
        "kernel": "trsm_small_kernel",
        "config_kernel": "kernevo_launch_config",
    }
    assert body["envelope"] == {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]}
    assert body["metrics"]["score"] == 2.01
    assert body["metrics"]["timings"][0]["speedup"] == 2.01
    assert body["promoted_at"].endswith(("Z", "+00:00"))
    # Promoted without a signing key: served as such, and every loader refuses it
    # (tests/test_evolver_champion.py serves a signed one).
    assert (body["signature"], body["signing_key_id"]) == (None, None)


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "nvidia h200", "NVIDIA_H200", "nvidia-h200"])
def test_gpu_names_are_normalized_to_the_key(
    api_client: TestClient, seeded: Seeded, gpu: str
) -> None:
    response = api_client.get(BEST, params={**QUERY, "gpu": gpu})
    assert response.status_code == 200, response.text
    assert response.json()["gpu"] == "nvidia-h200"


def test_no_champion_is_404_with_the_key(api_client: TestClient, seeded: Seeded) -> None:
    response = api_client.get(BEST, params={**QUERY, "dtype": "complex128"})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "no champion yet for path trsm_small complex128 on nvidia-h200 (shape bucket m64n64)"
    )
    other_gpu = api_client.get(BEST, params={**QUERY, "gpu": "NVIDIA H100 80GB HBM3"})
    assert other_gpu.status_code == 404
    assert "on nvidia-h100-80gb-hbm3" in other_gpu.json()["detail"]


def test_empty_store_is_404(api_client: TestClient) -> None:
    response = api_client.get(BEST, params=QUERY)
    assert response.status_code == 404
    # No GPU key has a champion: nothing to point at.
    assert response.json()["detail"] == (
        "no champion yet for path trsm_small float64 on nvidia-h200 (shape bucket m64n64)"
    )


# A trial's finding: gpu=H200 asks for the key "h200" (seeds.hardware.normalize_gpu_name; no CUDA
# device's name gives it) and read "no champion yet … on h200" while nvidia-h200 had one: the
# 404 names the keys that do have champions (api.routes.kernels._elsewhere).
@pytest.mark.parametrize(
    ("params", "detail"),
    [
        (
            {"gpu": "H200"},
            "no champion yet for path trsm_small float64 on h200 (shape bucket m64n64); "
            "champions exist for nvidia-h200",
        ),
        (
            {"gpu": "nvidia"},
            "no champion yet for path trsm_small float64 on nvidia (shape bucket m64n64); "
            "champions exist for nvidia-h200",
        ),
        (
            # No GPU has a champion of this path and dtype; none at all is for "h200".
            {"gpu": "H200", "dtype": "complex128"},
            "no champion yet for path trsm_small complex128 on h200 (shape bucket m64n64); "
            "no champion of any path is for h200; champions exist for nvidia-h200",
        ),
        (
            # "nvidia-h200" has champions, only not this one: nothing is added.
            {"dtype": "complex128"},
            "no champion yet for path trsm_small complex128 on nvidia-h200 (shape bucket m64n64)",
        ),
    ],
)
def test_a_404_names_the_gpu_keys_that_have_champions(
    api_client: TestClient, seeded: Seeded, params: dict[str, str], detail: str
) -> None:
    response = api_client.get(BEST, params={**QUERY, **params})
    assert (response.status_code, response.json()) == (404, {"detail": detail})


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"dtype": "float16"}, "unknown dtype 'float16'"),
        ({"op": "gemm"}, "unknown op 'gemm'; known ops: trsm"),
        ({"m": 65}, "no path serves trsm float64 at m=65, n=64"),
        ({"n": 0}, "no path serves trsm float64 at m=48, n=0"),
        ({"gpu": "  --  "}, "not a GPU name"),
        ({"gpu": "x\x1b[2J"}, "not 'x\\x1b[2J'"),
        ({"gpu": "NVIDIA\nH200"}, "gpu: must be printable text (no control characters), not '"),
        # A named path that does not serve the shape says so (it read "path … serves …").
        ({"m": 64, "n": 64, "path": "trsm_blocked"},
         "path trsm_blocked does not serve trsm float64 at m=64, n=64"),
        ({"m": 128, "n": 64, "path": "trsm_small"},
         "path trsm_small does not serve trsm float64 at m=128, n=64"),
        ({"m": 32, "n": 8, "dtype": "complex128", "path": "trsm_small_z64"},
         "path trsm_small_z64 does not serve trsm complex128 at m=32, n=8"),
    ],
)  # fmt: skip
def test_unservable_requests_are_422_with_detail(
    api_client: TestClient, seeded: Seeded, params: dict[str, object], detail: str
) -> None:
    response = api_client.get(BEST, params={**QUERY, **params})
    assert response.status_code == 422
    assert detail in response.json()["detail"]


def test_missing_parameters_are_422(api_client: TestClient) -> None:
    response = api_client.get(BEST, params={"op": "trsm", "dtype": "float64", "gpu": "x", "m": 4})
    assert response.status_code == 422
    assert any(error["loc"] == ["query", "n"] for error in response.json()["detail"])


def test_a_gpu_name_past_256_characters_is_a_422_not_echoed(api_client: TestClient) -> None:
    """A trial sent a 100 KB ``gpu=`` and had it echoed back in the 404's detail (20 KB here:
    the test client refuses longer URLs); every other route capped it at 256 characters."""
    response = api_client.get(BEST, params={**QUERY, "gpu": "nvidia-" + "x" * 20_000})
    assert response.status_code == 422
    assert len(response.text) < 2000


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        # A fresh user's finding: it read "path solve_tri does not serve trsm float64 at m=64,
        # n=1", a shape problem; the path implements another op (kernevo export's words).
        ({"m": 64, "n": 1, "path": "solve_tri"},
         "path solve_tri does not implement trsm in float64 (it implements solve_tri in "
         "float32)"),
        ({"m": 64, "n": 1, "path": "band_bidiag"},
         "path band_bidiag does not implement trsm in float64 (it implements band_bidiag in "
         "float32, float64)"),
        ({"m": 64, "n": 1, "path": "trsm_small_batched"},
         "path trsm_small_batched does not implement trsm in float64 (it implements "
         "trsm_batched in float32, float64, complex64, complex128)"),
        # A path of the op without the dtype: not a shape it misses either.
        ({"m": 64, "n": 8, "path": "trsm_small_z64"},
         "path trsm_small_z64 does not implement trsm in float64 (it implements trsm in "
         "complex128)"),
        ({"op": "solve_tri", "dtype": "float32", "n": 64, "k": 6, "b2": 4, "b3": 2,
          "m": None, "path": "trsm_blocked"},
         "path trsm_blocked does not implement solve_tri in float32 (it implements trsm in "
         "float32, float64, complex64, complex128)"),
    ],
)  # fmt: skip
def test_a_path_of_another_op_or_dtype_is_a_422_saying_what_it_implements(
    api_client: TestClient, params: dict[str, object], detail: str
) -> None:
    query = {k: v for k, v in {**QUERY, **params}.items() if v is not None}
    response = api_client.get(BEST, params=query)
    assert response.status_code == 422
    assert response.json() == {"detail": detail}


DIGITS_ONLY = "Input should be an integer in decimal digits only"
TRSM_2049 = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": "2049", "n": "1"}


@pytest.mark.parametrize(
    ("params", "name", "given"),
    [
        # A fresh user's finding: FastAPI's lax integers took all four (200), the CLI none.
        ({}, "m", "20_49"),
        ({}, "m", "2049.0"),
        ({}, "m", "+2049"),
        ({}, "m", " 2049 "),
        ({}, "n", "1e0"),
        ({}, "n", "\u0661"),  # ARABIC-INDIC DIGIT ONE: int() reads it
        ({}, "n", ""),
        ({"op": "solve_tri", "dtype": "float32", "m": None, "n": "64", "k": "6", "b2": "4",
          "b3": "2"}, "b2", "+4"),
        ({"op": "band_bidiag", "m": None, "n": "4096", "bandwidth": "3_2"}, "bandwidth", "3_2"),
        ({"op": "trsm_batched", "m": "64", "n": "8", "batch": "8.0"}, "batch", "8.0"),
    ],
)  # fmt: skip
def test_an_integer_not_in_decimal_digits_is_a_422_as_the_cli_refuses_it(
    api_client: TestClient, params: dict[str, str | None], name: str, given: str
) -> None:
    query = {k: v for k, v in {**TRSM_2049, **params, name: given}.items() if v is not None}
    response = api_client.get(BEST, params=query)
    assert response.status_code == 422, response.text
    issue = {"loc": ["query", name], "msg": DIGITS_ONLY, "type": "int_parsing", "input": given}
    assert response.json() == {"detail": [issue]}


def test_decimal_digits_still_answer_and_a_minus_sign_is_told_the_range(
    api_client: TestClient,
) -> None:
    assert api_client.get(BEST, params=TRSM_2049).status_code == 404  # no champion: valid
    assert api_client.get(BEST, params={**TRSM_2049, "m": "02049"}).status_code == 404
    response = api_client.get(BEST, params={**TRSM_2049, "n": "-1"})
    assert response.status_code == 422
    [issue] = response.json()["detail"]
    assert (issue["loc"], issue["type"]) == (["query", "n"], "value_out_of_range")
