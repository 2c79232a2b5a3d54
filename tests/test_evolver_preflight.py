"""A job on a GPU checks its signing key before anything is written: a key that cannot sign
would otherwise surface at the first promotion, hours into the job."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from test_evolver_prompts import H200

from evolver import runner
from evolver.errors import SigningKeyError
from evolver.job_config import JobConfig
from evolver.settings import EvolverSettings
from kernevo.keys import generate_key_pair


@pytest.fixture
def on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "query_gpu", lambda index: H200)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file"),
        (b"not a key\n", "not an unencrypted PEM key"),
        (b"", "not an unencrypted PEM key"),
    ],
)
def test_an_unusable_signing_key_stops_the_job_before_its_row_exists(
    on_a_gpu: None, tmp_path: Path, content: bytes | None, reason: str
) -> None:
    key = tmp_path / "signing.pem"
    if content is not None:
        key.write_bytes(content)
    database = tmp_path / "k.db"
    settings = EvolverSettings(work_dir=tmp_path / "runs", signing_key=key)
    job = JobConfig(path="trsm_small", dtype="float64", iterations=2)
    with pytest.raises(SigningKeyError, match=reason) as caught:
        runner.start_job(job, settings=settings, database_url=f"sqlite:///{database}")
    assert "\n" not in str(caught.value) and str(key) in str(caught.value)
    assert (
        not database.exists()
        or "job" not in inspect(create_engine(f"sqlite:///{database}")).get_table_names()
    )


def test_a_usable_signing_key_passes_the_preflight(on_a_gpu: None, tmp_path: Path) -> None:
    key = generate_key_pair(tmp_path / "keys")
    settings = EvolverSettings(work_dir=tmp_path / "runs", signing_key=key.path)
    job = JobConfig(path="trsm_small", dtype="float64", iterations=2)
    gpu, backend = runner._preflight(job, settings)
    assert gpu == H200 and backend.offline
