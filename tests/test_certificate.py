"""The champion certificate (issue 6): its schema, built from a verified report at promotion,
stored (migration up and down), covered by the signature, served by ``GET /v1/kernels/best``,
printed by ``kernevo best``, and compared by the loader with its own driver and toolkit."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

import evaluator.champion
import evaluator.compile
import kernevo.cli
from db.migrate import downgrade, upgrade
from db.models import Program
from db.session import make_engine
from evaluator.certificate import build_certificate
from evaluator.report import CompileInfo, EvaluationReport, GpuInfo, ShapeTiming
from evolver.champion import promote_best
from kernevo.certificate import Certificate, certificate_sha256, environment_differences
from kernevo.client import ChampionKey, parse_champion
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings
from seeds.registry import get_path

SPEC = get_path("trsm_small")
CUBIN = b"\x7fELF the certified cubin"
BEST = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 64, "n": 64}


def _report(*_: Any) -> EvaluationReport:
    """A verify_champion report of a kernel that passed everything (the promotion's fake)."""
    return EvaluationReport(
        path_id=SPEC.path_id,
        dtype="float64",
        status="ok",
        stage="time",
        combined_score=3.0,
        compile=CompileInfo(
            ok=True,
            log="",
            options=("-arch=sm_90",),
            arch="sm_90",
            nvrtc_version="13.0",
            seconds=0.04,
            cubin_sha256=hashlib.sha256(CUBIN).hexdigest(),
        ),  # fmt: skip
        gpu=GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "12.8"),
        timings=[ShapeTiming(64, 64, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0)],
        verified_shapes=[(1, 1), (33, 7), (64, 64)],
        input_seeds=[11, 12, 13],
        held_out_seeds=[21, 22, 23],
    )


def test_built_from_a_verified_report() -> None:
    cert = build_certificate(_report(), SPEC)

    assert {"held_out_shapes", "determinism", "sanitizer_memcheck"} <= set(cert.checks_passed)
    assert cert.input_seeds == [11, 12, 13] and cert.held_out_seeds == [21, 22, 23]
    assert cert.held_out_shapes == list(SPEC.held_out_shapes)
    assert (cert.cuda_driver_api_version, cert.nvrtc_version) == ("13.0", "13.0")
    assert cert.nvidia_driver_version is None and cert.noise_floor_us is None
    (timing,) = cert.timings
    assert (timing.median_us, timing.iqr_us, timing.baseline_median_us) == (2.0, 0.1, 6.0)
    assert timing.speedup == pytest.approx(3.0)
    text = " ".join(cert.not_verified)
    assert "float64" in text and "sm_90" in text and "envelope m <= 64, n <= 64" in text


def test_a_failed_report_has_no_certificate() -> None:
    report = _report()
    report.status = "wrong"
    with pytest.raises(ValueError, match="wrong"):
        build_certificate(report, SPEC)


def test_schema_round_trip_and_strictness() -> None:
    document = build_certificate(_report(), SPEC).to_json_dict()
    again = json.loads(json.dumps(document))

    assert Certificate.model_validate(again).to_json_dict() == document
    assert certificate_sha256(again) == certificate_sha256(document)
    with pytest.raises(ValidationError):
        Certificate.model_validate({**document, "unexpected": 1})
    with pytest.raises(ValidationError):
        Certificate.model_validate({**document, "format": "kernevo.certificate.v0"})
    assert certificate_sha256(None) is None


def test_driver_or_toolkit_differences_are_stated() -> None:
    document = build_certificate(_report(), SPEC).to_json_dict()

    same = environment_differences(document, cuda_driver_api_version="13.0", nvrtc_version="13.0")
    assert same == ""
    unknown = environment_differences(document, cuda_driver_api_version="", nvrtc_version="")
    assert unknown == ""
    other = environment_differences(document, cuda_driver_api_version="12.9", nvrtc_version="13.0")
    assert other == (
        "served not re-verified on this toolkit: CUDA driver API 12.9 here, verified under 13.0"
    )
    bad = environment_differences({"x": 1}, cuda_driver_api_version="1", nvrtc_version="1")
    assert "unreadable" in bad


@pytest.fixture
def promoted(seeded, fresh_database_url, monkeypatch, tmp_path) -> Any:
    """The seeded child promoted with a faked verification (no GPU), signed by a local key."""
    monkeypatch.setattr(evaluator.champion, "verify_champion", _report)
    monkeypatch.setattr(
        evaluator.compile,
        "compile_cubin",
        lambda *_: SimpleNamespace(ok=True, cubin=CUBIN, log=""),
    )
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("KERNEVO_SIGNING_KEY", raising=False)
    engine = make_engine(fresh_database_url)
    with engine.connect() as conn:
        uid, source = conn.execute(
            select(Program.uid, Program.source).where(Program.id == seeded.child_id)
        ).one()
    outcome = promote_best(
        engine, spec=SPEC, dtype="float64", gpu_index=0, gpu_key="nvidia-h200", uid=uid,
        source=source,
    )  # fmt: skip
    engine.dispose()
    assert outcome.promoted, outcome.reason
    return policy_from_settings(LoaderSettings(key_dir=tmp_path / "keys"))


def test_served_and_signed_a_tampered_certificate_is_refused(
    promoted: Any, api_client: TestClient
) -> None:
    body = api_client.get("/v1/kernels/best", params=BEST).json()
    assert body["certificate"] == build_certificate(_report(), SPEC).to_json_dict()
    key = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
    fetched = parse_champion(body, key)
    assert fetched.champion is not None and promoted.check(fetched.champion) is None

    for change in (
        lambda c: c["not_verified"].pop(),
        lambda c: c["timings"][0].update(speedup=9.0),
        lambda c: c.update(nvrtc_version="12.0"),
    ):
        tampered = json.loads(json.dumps(body))
        change(tampered["certificate"])
        champion = parse_champion(tampered, key).champion
        assert champion is not None
        refusal = promoted.check(champion)
        assert refusal is not None and refusal.check == "bad_signature"
    stripped = parse_champion({**body, "certificate": None}, key).champion
    assert stripped is not None and promoted.check(stripped).check == "bad_signature"


def test_kernevo_best_prints_the_certificate(
    promoted: Any, api_client: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(
        kernevo.cli, "_get_json", lambda url, params: api_client.get(url, params=params).json()
    )
    args = ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 0
    out = capsys.readouterr().out
    assert "certificate: passed screen, compile" in out
    assert "held-out seeds [21, 22, 23]" in out
    assert "driver not recorded, CUDA driver API 13.0" in out
    assert "not verified: dtypes other than float64" in out


def test_migration_adds_and_drops_the_certificate_column(empty_database_url: str) -> None:
    def columns() -> set[str]:
        engine = make_engine(empty_database_url)
        try:
            return {c["name"] for c in sa.inspect(engine).get_columns("champion")}
        finally:
            engine.dispose()

    upgrade(empty_database_url)
    assert "certificate" in columns()
    downgrade(empty_database_url, "7c1e5a9d2b30")
    assert "certificate" not in columns()
    upgrade(empty_database_url)
    assert "certificate" in columns()
