"""Routing over several paths (issue 7, "Routing"): ``seeds.registry.route`` returns every path
serving a problem, the best-kernel query answers with the champion measured fastest among them
and lists the paths it compared, the loader dispatches each shape the same way and
``explain()`` names the path and the comparison, and ``kernevo best`` prints it.

A fake second path, ``fake_path``, is registered for each test: trsm_small's spec for float64
only, serving m ≤ 64 and n ≤ 32 at its own shape bucket, so the two paths overlap at n ≤ 32 and
only trsm_small serves n > 32.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import H200, SEED_SOURCE, make_report
from fastapi.testclient import TestClient
from test_loader_resolver import (
    API,
    GPU,
    SIGNER,
    TRUST,
    FakeDriver,
    champion_json,
    problem,
    sign_body,
)

import kernevo.cli
import kernevo.cli.best
import kernevo.cli.errors
from kernevo.cache import ChampionCache
from kernevo.client import service_fetcher
from kernevo.resolver import Resolver
from kernevo.solver import TrsmSolver
from seeds import registry
from seeds.registry import Measured, Route
from seeds.trsm_small.spec import TRSM_SMALL

FAKE = dataclasses.replace(
    TRSM_SMALL,
    path_id="fake_path",
    dtypes=("float64",),
    shape_bucket="m64n32",
    envelope={"m_max": 64, "n_max": 32},
)
SMALL = Route("trsm_small", "m64n64")
FAKE_ROUTE = Route("fake_path", "m64n32")
BEST = "/v1/kernels/best"
QUERY = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200"}


@pytest.fixture(autouse=True)
def fake_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fake_path`` in the registry, after trsm_small (registry order)."""
    monkeypatch.setitem(registry.PATHS, FAKE.path_id, FAKE)


def timing(m: int, n: int, us: float) -> dict[str, Any]:
    """A timed shape as a report (and so a champion's metrics) records it."""
    return {"m": m, "n": n, "candidate_us": us, "baseline_us": 2 * us, "speedup": 2.0}


# --- seeds.registry ----------------------------------------------------------------------------


def test_route_returns_every_serving_path_with_its_bucket() -> None:
    assert registry.route("trsm", "float64", 32, 32) == [SMALL, FAKE_ROUTE]
    assert registry.route("trsm", "float64", 64, 33) == [SMALL]  # beyond fake_path's n ≤ 32
    assert registry.route("trsm", "complex64", 8, 8) == [SMALL]  # a dtype fake_path lacks
    assert registry.route("trsm", "float64", 65, 1) == []
    assert registry.route("trsm", "float64", 0, 1) == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("gemm", "float64", 8, 8), registry.UnknownOpError),
        (("trsm", "float16", 8, 8), ValueError),
    ],
)
def test_route_refuses_an_unknown_op_or_dtype(args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error, match="unknown"):
        registry.route(*args)


def slower_timing(m: int, n: int, us: float, speedup: float, high: float) -> dict[str, Any]:
    """A timed shape where the champion lost to cuBLAS in its own evaluation: speedup 95 %
    interval [speedup - 0.002, ``high``], noise floor 0.2 %."""
    return {
        "m": m, "n": n, "candidate_us": us, "baseline_us": speedup * us, "speedup": speedup,
        "speedup_low": speedup - 0.002, "speedup_high": high, "noise_floor": 0.002,
    }  # fmt: skip


def test_measured_reads_the_score_and_the_time_at_the_shape() -> None:
    metrics = {"combined_score": 1.8, "timings": [timing(16, 16, 4.0), timing(32, 32, 9.5)]}
    assert registry.measured(SMALL, metrics, 32, 32) == Measured(SMALL, 1.8, 9.5, 2.0)
    assert registry.measured(SMALL, metrics, 32, 16) == Measured(SMALL, 1.8, None)
    # ``score`` (the evaluation's) stands in for a combined score not copied.
    assert registry.measured(SMALL, {"score": 1.2}, 8, 8) == Measured(SMALL, 1.2, None)


@pytest.mark.parametrize(
    "metrics",
    [
        None,
        [1, 2],
        {"combined_score": "2.0", "timings": "fast"},
        {"combined_score": True, "timings": [None, 7, {"m": "32", "n": 32, "candidate_us": 1}]},
        {"combined_score": float("nan"), "timings": [{"m": 32, "n": 32, "candidate_us": -1.0}]},
        {"combined_score": 10**400, "timings": [{"m": True, "n": 32, "candidate_us": 1.0}]},
        {"score": float("inf"), "timings": [{"m": 32, "n": 32, "candidate_us": float("inf")}]},
    ],
)
def test_measured_takes_anything_that_is_not_a_positive_number_as_not_recorded(
    metrics: Any,
) -> None:
    """The loader reads metrics from the service: no form of them raises."""
    assert registry.measured(SMALL, metrics, 32, 32) == Measured(SMALL, None, None)


def test_fastest_compares_times_at_the_shape_when_every_champion_recorded_one() -> None:
    slow_but_high_score = Measured(SMALL, 3.0, 10.0)
    fast = Measured(FAKE_ROUTE, 1.5, 6.0)
    assert registry.fastest([slow_but_high_score, fast]) == (fast, "time_at_shape")


def test_fastest_compares_combined_scores_when_a_time_is_missing() -> None:
    high = Measured(SMALL, 3.0, None)
    timed = Measured(FAKE_ROUTE, 1.5, 1.0)
    assert registry.fastest([timed, high]) == (high, "combined_score")
    unscored = Measured(FAKE_ROUTE, None, None)
    assert registry.fastest([unscored, Measured(SMALL, 1.1, None)])[0].route == SMALL


def test_fastest_breaks_ties_by_registry_order_and_names_a_lone_champion() -> None:
    first, second = Measured(SMALL, 2.0, 5.0), Measured(FAKE_ROUTE, 2.0, 5.0)
    assert registry.fastest([first, second]) == (first, "time_at_shape")
    assert registry.fastest([Measured(SMALL, 2.0, None), Measured(FAKE_ROUTE, 2.0, None)]) == (
        Measured(SMALL, 2.0, None),
        "combined_score",
    )
    assert registry.fastest([second]) == (second, "only_champion")
    assert registry.fastest([]) is None


def test_measured_reads_the_comparison_with_the_vendor_at_the_shape() -> None:
    # RESULTS 22: trsm_blocked's m128_2048 champion in complex128 at 129 x 8192.
    metrics = {"combined_score": 1.7, "timings": [slower_timing(32, 32, 105.4, 0.978, 0.979)]}
    got = registry.measured(SMALL, metrics, 32, 32)
    assert got == Measured(SMALL, 1.7, 105.4, 0.978, 0.979, 0.002)
    assert got.slower_than_vendor
    assert got.against_vendor() == "0.978x (95 % interval up to 0.979, noise floor 0.2 %)"
    # The champion row's ShapeTiming stores no ratio: it is baseline_us / candidate_us.
    row = {k: v for k, v in slower_timing(32, 32, 100.0, 0.5, 0.51).items() if k != "speedup"}
    assert registry.measured(SMALL, {"timings": [row]}, 32, 32).speedup == pytest.approx(0.5)
    assert registry.measured(SMALL, metrics, 16, 16).slower_than_vendor is False  # not timed


@pytest.mark.parametrize(
    ("high", "floor", "slower"),
    [
        (0.979, 0.002, True),  # the whole interval below 1 / (1 + floor)
        (0.999, 0.002, False),  # within the noise floor of 1: a tie, not a loss
        (1.2, 0.0, False),
        (0.9, None, True),  # no floor recorded: the interval alone
    ],
)
def test_slower_than_the_vendor_is_the_evaluators_rule(
    high: float, floor: float | None, slower: bool
) -> None:
    measured = Measured(SMALL, 1.0, 1.0, high - 0.01, high, floor)
    assert measured.slower_than_vendor is slower


def test_a_champion_slower_than_the_vendor_at_the_shape_never_answers() -> None:
    lost = Measured(SMALL, 3.0, 2.0, 0.97, 0.98, 0.002)
    other = Measured(FAKE_ROUTE, 1.2, 9.0)
    assert registry.fastest([lost]) is None  # the library answers
    assert registry.fastest([lost, other]) == (other, "only_champion")
    assert registry.fastest([Measured(SMALL, 3.0, 2.0, 0.99, 0.999, 0.002)])[0].route == SMALL


# --- GET /v1/kernels/best ----------------------------------------------------------------------


def promote(url: str, route: Route, score: float, timings: list[dict[str, Any]]) -> int:
    """A job, a program and its verified evaluation on ``route``'s path and bucket, promoted to
    champion for float64 on the H200 through ``db.repository``; returns the program id."""
    from db import repository as repo
    from db.session import make_engine, session_scope

    cubin = f"cubin of {route.path_id}".encode()
    report = {**json.loads(make_report(score, cubin=cubin)), "timings": timings}
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(
                s, path=route.path_id, dtype="float64", gpu=H200, shape_bucket=route.shape_bucket,
                config={"iterations": 1}, backend="offline", model=None,
            )  # fmt: skip
            program, _ = repo.record_program(
                s, job_id=job.id, uid=f"best-{route.path_id}-{route.shape_bucket}",
                source=SEED_SOURCE,
                parent_uid=None, island=0, generation=0, iteration=0, diff=None,
                backend="offline", model=None,
            )  # fmt: skip
            evaluation = repo.record_evaluation(
                s, program_id=program.id, report_json=report, gpu_key=H200,
                gpu_name="NVIDIA H200", arch="sm_90", driver_version="580.65",
                nvrtc_version="13.0", score=score, state="verified", error_kind=None,
            )  # fmt: skip
            repo.promote_champion(
                s, evaluation_id=evaluation.id, path=route.path_id, dtype="float64",
                gpu_key=H200, shape_bucket=route.shape_bucket, cubin=cubin,
                launch={"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
                envelope=registry.get_path(route.path_id).envelope,
                compile_options=["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"],
            )  # fmt: skip
            return program.id
    finally:
        engine.dispose()


@pytest.fixture
def two_champions(fresh_database_url: str) -> dict[str, int]:
    """trsm_small: score 2.0, timed at 16×16 and 32×32 (10 µs); fake_path: score 1.5, timed at
    32×32 only (6 µs): faster at 32×32 for all its lower score. Program ids by path."""
    return {
        "trsm_small": promote(
            fresh_database_url, SMALL, 2.0, [timing(16, 16, 4.0), timing(32, 32, 10.0)]
        ),
        "fake_path": promote(fresh_database_url, FAKE_ROUTE, 1.5, [timing(32, 32, 6.0)]),
    }


def test_the_faster_champion_at_a_shape_both_timed_answers(
    api_client: TestClient, two_champions: dict[str, int]
) -> None:
    response = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["path"], body["shape_bucket"]) == ("fake_path", "m64n32")
    assert body["program_id"] == two_champions["fake_path"]
    assert body["compared_by"] == "time_at_shape"
    assert body["candidates"] == [
        {
            "path": "trsm_small",
            "shape_bucket": "m64n64",
            "status": "compared",
            "program_id": two_champions["trsm_small"],
            "combined_score": 2.0,
            "time_us": 10.0,
        },
        {
            "path": "fake_path",
            "shape_bucket": "m64n32",
            "status": "chosen",
            "program_id": two_champions["fake_path"],
            "combined_score": 1.5,
            "time_us": 6.0,
        },
    ]


def test_the_higher_combined_score_answers_where_a_champion_was_not_timed(
    api_client: TestClient, two_champions: dict[str, int]
) -> None:
    body = api_client.get(BEST, params={**QUERY, "m": 16, "n": 16}).json()
    assert (body["path"], body["compared_by"]) == ("trsm_small", "combined_score")
    assert [(c["path"], c["status"], c["time_us"]) for c in body["candidates"]] == [
        ("trsm_small", "chosen", 4.0),
        ("fake_path", "compared", None),
    ]


def test_a_shape_one_path_serves_compares_only_it(
    api_client: TestClient, two_champions: dict[str, int]
) -> None:
    body = api_client.get(BEST, params={**QUERY, "m": 48, "n": 48}).json()
    assert (body["path"], body["compared_by"]) == ("trsm_small", "only_champion")
    assert [c["path"] for c in body["candidates"]] == ["trsm_small"]


def test_a_path_without_a_champion_is_listed_as_such(
    api_client: TestClient, fresh_database_url: str
) -> None:
    program_id = promote(fresh_database_url, FAKE_ROUTE, 1.5, [timing(32, 32, 6.0)])
    body = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32}).json()
    assert (body["path"], body["compared_by"]) == ("fake_path", "only_champion")
    assert body["candidates"] == [
        {
            "path": "trsm_small",
            "shape_bucket": "m64n64",
            "status": "no_champion",
            "program_id": None,
            "combined_score": None,
            "time_us": None,
        },
        {
            "path": "fake_path",
            "shape_bucket": "m64n32",
            "status": "chosen",
            "program_id": program_id,
            "combined_score": 1.5,
            "time_us": 6.0,
        },
    ]


def test_no_champion_on_any_serving_path_is_404_naming_them(api_client: TestClient) -> None:
    response = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "no champion yet for paths trsm_small, fake_path float64 on nvidia-h200 "
        "(shape buckets m64n64, m64n32)"
    )


def test_a_path_parameter_asks_for_that_paths_champion_only(
    api_client: TestClient, two_champions: dict[str, int]
) -> None:
    """What the loader asks: it compares the champions it trusts itself."""
    body = api_client.get(BEST, params={**QUERY, "m": 16, "n": 16, "path": "fake_path"}).json()
    assert (body["path"], body["program_id"]) == ("fake_path", two_champions["fake_path"])
    assert [c["path"] for c in body["candidates"]] == ["fake_path"]


def test_a_champion_timed_slower_than_cublas_at_the_shape_is_not_the_answer(
    api_client: TestClient, fresh_database_url: str
) -> None:
    small = promote(
        fresh_database_url, SMALL, 2.0,
        [timing(16, 16, 4.0), slower_timing(32, 32, 10.0, 0.97, 0.98)],
    )  # fmt: skip
    # Alone at 32 x 32: a 404 that names the comparison (the library answers).
    response = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "every champion serving m=32, n=32 was measured slower than cuBLAS ?trsm (through "
        "CuPy) there: trsm_small/m64n64: 0.97x (95 % interval up to 0.98, noise floor 0.2 %)"
    )
    # At a shape it won, it answers; asked by path, as the loader asks at the first shape of
    # the bucket it meets, it is sent wherever (the loader judges each shape itself).
    assert api_client.get(BEST, params={**QUERY, "m": 16, "n": 16}).json()["program_id"] == small
    by_path = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32, "path": "trsm_small"})
    assert (by_path.status_code, by_path.json()["program_id"]) == (200, small)
    # Beside another path's champion, that one answers at 32 x 32 whatever the times say.
    fake = promote(fresh_database_url, FAKE_ROUTE, 1.1, [timing(32, 32, 50.0)])
    body = api_client.get(BEST, params={**QUERY, "m": 32, "n": 32}).json()
    assert (body["program_id"], body["compared_by"]) == (fake, "only_champion")
    assert [(c["path"], c["status"]) for c in body["candidates"]] == [
        ("trsm_small", "slower_than_vendor"),
        ("fake_path", "chosen"),
    ]


def test_kernevo_best_marks_a_path_timed_slower_than_the_library_at_the_shape() -> None:
    kernel = {
        "compared_by": "only_champion",
        "candidates": [
            {"path": "trsm_small", "shape_bucket": "m64n64", "status": "slower_than_vendor",
             "program_id": 17, "combined_score": 2.0, "time_us": 10.0},
            {"path": "fake_path", "shape_bucket": "m64n32", "status": "chosen",
             "program_id": 18, "combined_score": 1.1, "time_us": None},
        ],
    }  # fmt: skip
    assert kernevo.cli.best._compared_lines(kernel, "m=32 n=32") == [
        "compared 2 serving path(s) by only_champion:",
        "  trsm_small (shape bucket m64n64): program 17, score 2.000, 10.00 us at m=32 n=32 "
        "(timed slower than the library at m=32 n=32: not served there)",
        "  fake_path (shape bucket m64n32): program 18, score 1.100 (chosen)",
    ]


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        (
            {"m": 48, "n": 48, "path": "fake_path"},
            "path fake_path does not serve trsm float64 at m=48",
        ),
        ({"m": 8, "n": 8, "path": "trsm_nowhere"}, "unknown path 'trsm_nowhere'; known paths"),
        ({"m": 65, "n": 8}, "no path serves trsm float64 at m=65, n=8"),
        ({"m": 8, "n": 8, "op": "gemm"}, "unknown op 'gemm'"),
        ({"m": 8, "n": 8, "dtype": "float16"}, "unknown dtype 'float16'"),
    ],
)
def test_what_no_path_serves_is_422(
    api_client: TestClient, two_champions: dict[str, int], params: dict[str, Any], detail: str
) -> None:
    response = api_client.get(BEST, params={**QUERY, **params})
    assert response.status_code == 422
    assert detail in response.json()["detail"]


# --- a path with several shape buckets (trsm_blocked) ----------------------------------------

BLOCKED_SMALL = Route("trsm_blocked", "m128_2048")
BLOCKED_LARGE = Route("trsm_blocked", "m2049_16384")


def test_route_puts_a_shape_in_the_bucket_that_holds_it() -> None:
    assert registry.route("trsm", "float64", 2048, 16384) == [BLOCKED_SMALL]
    assert registry.route("trsm", "float64", 2049, 1) == [BLOCKED_LARGE]
    assert registry.get_path("trsm_blocked", "m2049_16384").shape_bucket == "m2049_16384"


def test_each_bucket_answers_with_its_own_champion(
    api_client: TestClient, fresh_database_url: str
) -> None:
    """The best block size per (dtype, bucket) is a query: a shape of each bucket gets that
    bucket's champion, and the candidates name the bucket."""
    small = promote(fresh_database_url, BLOCKED_SMALL, 1.3, [timing(1024, 1024, 300.0)])
    large = promote(fresh_database_url, BLOCKED_LARGE, 1.2, [timing(8192, 1024, 1500.0)])
    for (m, n), route, program_id, time_us in (
        ((1024, 1024), BLOCKED_SMALL, small, 300.0),
        ((129, 8192), BLOCKED_SMALL, small, None),
        ((8192, 1024), BLOCKED_LARGE, large, 1500.0),
        ((4096, 17), BLOCKED_LARGE, large, None),
    ):
        body = api_client.get(BEST, params={**QUERY, "m": m, "n": n}).json()
        assert (body["path"], body["shape_bucket"], body["program_id"]) == (
            "trsm_blocked", route.shape_bucket, program_id,
        )  # fmt: skip
        assert [(c["shape_bucket"], c["status"], c["time_us"]) for c in body["candidates"]] == [
            (route.shape_bucket, "chosen", time_us)
        ]


def test_a_bucket_without_a_champion_is_404_naming_it(
    api_client: TestClient, fresh_database_url: str
) -> None:
    promote(fresh_database_url, BLOCKED_SMALL, 1.3, [timing(1024, 1024, 300.0)])
    response = api_client.get(BEST, params={**QUERY, "m": 8192, "n": 8192})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "no champion yet for path trsm_blocked float64 on nvidia-h200 (shape bucket m2049_16384)"
    )


def test_kernevo_best_prints_the_paths_compared(
    api_client: TestClient,
    two_champions: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(
        kernevo.cli.best, "_get_json", lambda url, params: api_client.get(url, params=params).json()
    )
    args = ["best", "--dtype", "float64", "--m", "32", "--n", "32", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("compared 2 serving path(s) by time_at_shape:")
    small, fake = two_champions["trsm_small"], two_champions["fake_path"]
    assert lines[at + 1 : at + 3] == [
        f"  trsm_small (shape bucket m64n64): program {small}, score 2.000, 10.00 us at m=32 n=32",
        f"  fake_path (shape bucket m64n32): program {fake}, score 1.500, 6.00 us at m=32 n=32 "
        "(chosen)",
    ]
    assert lines[0].endswith("path fake_path, shape bucket m64n32")


def test_kernevo_best_says_the_library_serves_a_shape_every_champion_lost(
    api_client: TestClient,
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    promote(fresh_database_url, SMALL, 2.0, [slower_timing(48, 48, 10.0, 0.97, 0.98)])

    def get_json(url: str, params: dict[str, Any]) -> Any:
        answer = api_client.get(url, params=params)
        if answer.status_code != 200:  # as kernevo.cli.service._get_json words a service's refusal
            detail = answer.json()["detail"]
            raise kernevo.cli.errors.CliError(f"HTTP {answer.status_code}: {detail}")
        return answer.json()

    monkeypatch.setattr(kernevo.cli.best, "_get_json", get_json)
    args = ["best", "--dtype", "float64", "--m", "48", "--n", "48", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 1
    err = capsys.readouterr().err.strip()
    assert "was measured slower than cuBLAS ?trsm (through CuPy) there" in err
    assert err.endswith("; kernevo.load falls back to cuBLAS ?trsm (through CuPy) there")


# --- the loader ---------------------------------------------------------------------------------


def certified(document: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """``document`` (a certificate) with the timings of ``measured`` (metrics-shaped: each
    timing's speedup is ``measured``'s combined score, so the certificate's geometric mean is
    that score); a malformed timing is left out, as no verification would record it."""
    score = measured.get("combined_score")
    timings = []
    for t in measured.get("timings", []):
        us = t.get("candidate_us")
        if isinstance(us, float | int) and isinstance(score, float | int) and us > 0 < score:
            # A timing with an interval keeps its own speedup and interval (slower_timing).
            interval = "speedup_high" in t
            baseline = (t["speedup"] if interval else score) * us
            timings.append({
                "m": t["m"], "n": t["n"], "median_us": us, "iqr_us": 0.0,
                "baseline_median_us": baseline, "baseline_iqr_us": 0.0,
                "speedup": baseline / us,
                "speedup_low": t["speedup_low"] if interval else None,
                "speedup_high": t["speedup_high"] if interval else None,
                "noise_floor": t["noise_floor"] if interval else None,
                "faster_than_baseline": False if interval else None,
                "plausibility_floor_us": None,
            })  # fmt: skip
    return {**document, "timings": timings}


def loader_champion(
    route: Route,
    program_id: int,
    measured: dict[str, Any],
    metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A signed ``/v1/kernels/best`` body for ``route``'s path and bucket whose certificate
    records ``measured``; its unsigned ``metrics`` are ``metrics`` (default: ``measured``),
    which a hostile service may have edited after signing."""
    m_max, n_max = registry.get_path(route.path_id).envelope.values()
    body = champion_json(signer=None, program_id=program_id, m_max=m_max, n_max=n_max)
    body.update(
        path=route.path_id,
        shape_bucket=route.shape_bucket,
        envelope={"m_max": m_max, "n_max": n_max, "verified_shapes": [[m_max, n_max]]},
        metrics=measured,
        certificate=certified(body["certificate"], measured),
    )
    signed = sign_body(body, SIGNER)
    if metrics is not None:
        signed["metrics"] = metrics  # not covered by the signature
    return signed


class PathService:
    """A MockTransport handler answering ``/v1/kernels/best`` by its ``path`` parameter: a
    champion body, or 404 for a path it has none of; records the paths asked for."""

    def __init__(self, bodies: dict[str, dict[str, Any]]) -> None:
        self.bodies = bodies
        self.asked: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.params.get("path", "")
        self.asked.append(path)
        if path not in self.bodies:
            return httpx.Response(404, json={"detail": f"no champion yet for path {path}"})
        return httpx.Response(200, json=self.bodies[path])


class PathHarness:
    """A solver over :class:`PathService`, a disk cache and fake drivers recording their
    path; the fallback records the shapes it solved."""

    def __init__(self, service: PathService, cache_dir: Path) -> None:
        self.drivers: list[tuple[str, FakeDriver]] = []
        self.fallback_shapes: list[tuple[int, int]] = []
        # In-process answers: the deadline bounds only a failure, and 1 s was missed under a
        # loaded CI machine's two xdist workers (a 404 read as "service unreachable").
        fetch = service_fetcher(
            API, op="trsm", timeout_s=10.0, transport=httpx.MockTransport(service)
        )
        resolver = Resolver(
            "trsm", "float64", gpu=GPU, fetch=fetch, cache=ChampionCache(cache_dir), trust=TRUST
        )
        self.solver = TrsmSolver(resolver, driver_factory=self.driver, fallback=self.fallback)

    def driver(self, path_id: str, cubin: bytes, dtype: str) -> FakeDriver:
        made = FakeDriver(cubin, dtype, fail=False)
        self.drivers.append((path_id, made))
        return made

    def fallback(self, a: Any, b: Any) -> Any:
        self.fallback_shapes.append(b.shape)
        raise AssertionError("a served shape went to cuBLAS")


SMALL_METRICS = {"combined_score": 2.0, "timings": [timing(16, 16, 4.0), timing(32, 32, 10.0)]}
FAKE_METRICS = {"combined_score": 1.5, "timings": [timing(32, 32, 6.0)]}


def test_the_loader_runs_the_faster_path_and_explain_names_the_comparison(
    tmp_path: Path,
) -> None:
    service = PathService(
        {
            "trsm_small": loader_champion(SMALL, 17, SMALL_METRICS),
            "fake_path": loader_champion(FAKE_ROUTE, 18, FAKE_METRICS),
        }
    )
    h = PathHarness(service, tmp_path)
    a, b, x = problem(32, 32)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert [(path, made.shapes) for path, made in h.drivers] == [("fake_path", [(32, 32)])]
    decision = h.solver.explain(32, 32)
    assert (decision.route, decision.path, decision.shape_bucket) == (
        "kernel",
        "fake_path",
        "m64n32",
    )
    assert decision.champion is not None and decision.champion.program_id == 18
    assert decision.reason == (
        "champion program 18 from service; fastest of 2 paths by time_at_shape: "
        "trsm_small/m64n64 program 17 score 2 10 us at the shape; "
        "fake_path/m64n32 program 18 score 1.5 6 us at the shape (chosen)"
    )
    assert [(c.path, c.route, c.time_us, c.chosen) for c in decision.compared] == [
        ("trsm_small", "kernel", 10.0, False),
        ("fake_path", "kernel", 6.0, True),
    ]
    # One request per (path, bucket), each naming its path; later shapes reuse them.
    assert sorted(service.asked) == ["fake_path", "trsm_small"]
    assert h.solver.explain(16, 16).path == "trsm_small"  # by combined score: 2 > 1.5
    assert "by combined_score" in h.solver.explain(16, 16).reason
    assert sorted(service.asked) == ["fake_path", "trsm_small"]


def test_a_shape_one_path_serves_keeps_the_single_path_reason(tmp_path: Path) -> None:
    service = PathService({"trsm_small": loader_champion(SMALL, 17, SMALL_METRICS)})
    h = PathHarness(service, tmp_path)

    decision = h.solver.explain(48, 48)

    assert (decision.route, decision.path) == ("kernel", "trsm_small")
    assert decision.reason == "champion program 17 from service"
    assert [(c.path, c.chosen) for c in decision.compared] == [("trsm_small", True)]
    assert service.asked == ["trsm_small"]


def test_a_path_without_a_champion_leaves_the_other_to_run(tmp_path: Path) -> None:
    service = PathService({"trsm_small": loader_champion(SMALL, 17, SMALL_METRICS)})
    h = PathHarness(service, tmp_path)

    decision = h.solver.explain(32, 32)

    assert (decision.route, decision.path) == ("kernel", "trsm_small")
    assert decision.reason.startswith(
        "champion program 17 from service; fastest of 2 paths by only_champion: "
        "trsm_small/m64n64 program 17 score 2 10 us at the shape (chosen); "
        "fake_path/m64n32: no champion on service (404: no champion yet for path fake_path)"
    )
    assert [(c.path, c.route, c.program_id) for c in decision.compared] == [
        ("trsm_small", "kernel", 17),
        ("fake_path", "cublas", None),
    ]


def test_a_refused_faster_champion_leaves_the_trusted_one_to_run(tmp_path: Path) -> None:
    unsigned = {**loader_champion(FAKE_ROUTE, 18, FAKE_METRICS), "signature": None}
    service = PathService(
        {"trsm_small": loader_champion(SMALL, 17, SMALL_METRICS), "fake_path": unsigned}
    )
    h = PathHarness(service, tmp_path)

    decision = h.solver.explain(32, 32)

    assert (decision.route, decision.path) == ("kernel", "trsm_small")
    assert [(r.check, r.source) for r in decision.refusals] == [("unsigned", "service")]
    assert "fake_path/m64n32: refused champion program 18 from service" in decision.reason


def test_no_usable_champion_on_any_serving_path_goes_to_cublas_saying_why(
    tmp_path: Path,
) -> None:
    service = PathService({})
    h = PathHarness(service, tmp_path)

    decision = h.solver.explain(32, 32)

    assert (decision.route, decision.path, decision.champion) == ("cublas", None, None)
    assert decision.reason == (
        "no serving path's champion can run: "
        "trsm_small/m64n64: no champion on service (404: no champion yet for path trsm_small); "
        "disk cache: no entry; "
        "fake_path/m64n32: no champion on service (404: no champion yet for path fake_path); "
        "disk cache: no entry"
    )


def test_the_loader_runs_cublas_where_the_champion_was_timed_slower_than_it(
    tmp_path: Path,
) -> None:
    lost_at_32 = {
        "combined_score": 2.0,
        "timings": [timing(16, 16, 4.0), slower_timing(32, 32, 10.0, 0.97, 0.98)],
    }
    service = PathService({"trsm_small": loader_champion(SMALL, 17, lost_at_32)})
    h = PathHarness(service, tmp_path)

    decision = h.solver.explain(32, 32)  # served by two paths; fake_path has no champion
    assert (decision.route, decision.champion) == ("cublas", None)
    assert (
        "trsm_small/m64n64: champion program 17 was measured slower than cuBLAS ?trsm "
        "(through CuPy) at m=32, n=32: 0.97x (95 % interval up to 0.98, noise floor 0.2 %)"
    ) in decision.reason
    assert [(c.path, c.route, c.chosen) for c in decision.compared] == [
        ("trsm_small", "cublas", False),
        ("fake_path", "cublas", False),
    ]
    # The same champion, fetched once at 32 x 32, runs the shapes it did not lose.
    decision = h.solver.explain(48, 48)  # only trsm_small serves it; timed nowhere
    assert (decision.route, decision.path) == ("kernel", "trsm_small")
    assert sorted(service.asked) == ["fake_path", "trsm_small"]


def test_metrics_a_service_edits_after_signing_do_not_steer_the_choice(tmp_path: Path) -> None:
    """The choice reads the signed certificate's figures (kernevo.certificate.certified_metrics),
    never the unsigned metrics: trsm_small's forged 0.001 us does not beat fake_path's certified
    6 us (a red-team review steered it so), and garbage metrics cost nothing."""
    forged = {"combined_score": 99.0, "timings": [timing(32, 32, 0.001)]}
    garbage = {"combined_score": "fast", "timings": "none"}
    for attempt, metrics in enumerate((forged, garbage)):
        service = PathService(
            {
                "trsm_small": loader_champion(SMALL, 17, SMALL_METRICS, metrics=metrics),
                "fake_path": loader_champion(FAKE_ROUTE, 18, FAKE_METRICS),
            }
        )
        h = PathHarness(service, tmp_path / str(attempt))

        decision = h.solver.explain(32, 32)

        assert (decision.route, decision.path) == ("kernel", "fake_path")
        assert decision.refusals == ()
        assert "trsm_small/m64n64 program 17 score 2 10 us at the shape;" in decision.reason
        assert "0.001" not in decision.reason


@pytest.mark.parametrize(
    "change",
    [
        {"candidates": [{"path": "trsm_small", "status": "compared", "combined_score": "fast"}]},
        {"metrics": {"score": "high"}},
        {"path": None, "shape_bucket": None, "launch": "none"},
    ],
    ids=["candidate-score", "metrics-score", "launch"],
)
def test_kernevo_best_on_a_malformed_answer_is_one_line(
    api_client: TestClient,
    two_champions: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any],
) -> None:
    """A service's answer is data from elsewhere (a red-team review crashed the command with a
    string where a score belongs): one line on stderr, exit 1, no traceback."""
    monkeypatch.setattr(
        kernevo.cli.best,
        "_get_json",
        lambda url, params: {**api_client.get(url, params=params).json(), **change},
    )
    args = ["best", "--dtype", "float64", "--m", "32", "--n", "32", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    [line] = captured.err.strip().splitlines()
    assert "malformed answer from http://testserver/v1/kernels/best" in line


def test_kernevo_best_states_a_lower_bound_of_the_envelope(
    api_client: TestClient,
    two_champions: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def answer(url: str, params: dict[str, Any]) -> dict[str, Any]:
        body = api_client.get(url, params=params).json()
        return {**body, "envelope": {**body["envelope"], "m_min": 64, "m_max": 64}}

    monkeypatch.setattr(kernevo.cli.best, "_get_json", answer)
    args = ["best", "--dtype", "float64", "--m", "32", "--n", "32", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 0
    assert "envelope 64 <= m <= 64, n <= 32," in capsys.readouterr().out
