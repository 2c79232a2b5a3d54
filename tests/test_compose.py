"""docker-compose.yml, parsed with PyYAML (no Docker needed): PostgreSQL with its volume and
healthcheck, the API that migrates at start, a worker with a GPU reservation running ``kernevo
worker``, the LLM endpoint and key passed through from the shell, and every ``KERNEVO_*``
variable it uses a real setting, set on a service that reads it and documented in the README.
``docker compose config`` validates the file too where the compose plugin is installed."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text

import kernevo.cli
import kernevo.cli.parser
from api.settings import ApiSettings
from db.settings import DatabaseSettings
from evolver.settings import EvolverSettings
from kernevo.environment import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
README = ROOT / "README.md"


def _fields(*classes: type[Any]) -> set[str]:
    """The ``KERNEVO_*`` names the pydantic-settings classes read."""
    return {f"KERNEVO_{name.upper()}" for cls in classes for name in cls.model_fields}


# What each service's process reads: the API the service's and the database's settings; the
# worker (and the jobs it starts) the evolver's, the database's and the evaluator's cubin cache
# (read outside a settings class: evaluator/compile.py, catalogued).
READ_BY = {
    "api": _fields(ApiSettings, DatabaseSettings),
    "worker": _fields(EvolverSettings, DatabaseSettings) | {"KERNEVO_COMPILE_CACHE"},
}
# Read by compose itself (its interpolation), catalogued as such.
COMPOSE_VARIABLES = {v.name for v in CATALOGUE if v.read_by == "docker-compose.yml"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def test_the_stack_is_postgres_the_api_and_a_worker(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"postgres", "api", "worker"}
    assert set(compose["volumes"]) == {"pgdata", "worker-data"}


def test_postgres_keeps_its_data_in_a_volume_and_reports_ready(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]
    assert postgres["image"].startswith("postgres:")
    assert "pgdata:/var/lib/postgresql/data" in postgres["volumes"]
    check = postgres["healthcheck"]
    assert check["test"][0] == "CMD-SHELL" and "pg_isready" in check["test"][1]
    assert check["retries"] >= 3
    environment = postgres["environment"]
    assert environment["POSTGRES_PASSWORD"] == "${KERNEVO_DB_PASSWORD:-kernevo}"
    assert "ports" not in postgres  # reachable from the stack only


def _database_url(service: dict[str, Any]) -> str:
    url = service["environment"]["KERNEVO_DATABASE_URL"]
    assert isinstance(url, str)
    return url


def test_the_api_migrates_at_start_after_postgres_is_healthy(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    command = api["command"]
    assert command[:2] == ["kernevo", "serve"]
    arguments = kernevo.cli.parser._parser().parse_args(command[1:])
    assert (arguments.command, arguments.host, arguments.port) == ("serve", "0.0.0.0", 8000)
    assert api["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert api["ports"] == ["8000:8000"]
    assert any("/healthz" in part for part in api["healthcheck"]["test"])
    assert _database_url(api) == (
        "postgresql+psycopg://kernevo:${KERNEVO_DB_PASSWORD:-kernevo}@postgres:5432/kernevo"
    )


def test_kernevo_serve_migrates_the_database_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the API service's command does first: an empty database (the stack's first start)
    is at the schema head before uvicorn serves."""
    import uvicorn

    from db.migrate import head_revision

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    monkeypatch.setenv("KERNEVO_DATABASE_URL", url)
    revisions: list[str | None] = []

    def serve(server: uvicorn.Server, sockets: list[object]) -> None:
        engine = create_engine(url)
        with engine.connect() as connection:
            query = text("SELECT version_num FROM alembic_version")
            revisions.append(connection.execute(query).scalar())
        engine.dispose()
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", serve)
    with socket.socket() as probe:  # a free port: serve binds it before uvicorn runs
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    assert kernevo.cli.main(["serve", "--host", "127.0.0.1", "--port", port]) == 0
    assert revisions == [head_revision()]


def test_the_worker_runs_kernevo_worker_on_its_reserved_gpus(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    command = worker["command"]
    assert command[:2] == ["kernevo", "worker"]
    arguments = kernevo.cli.parser._parser().parse_args(command[1:])
    assert arguments.command == "worker" and not arguments.compile_only
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert "count" not in device  # device_ids and count exclude each other
    # Inside the container the reserved devices are numbered 0..n-1: --gpus names all of them.
    assert list(arguments.gpus) == list(range(len(device["device_ids"])))
    assert worker["depends_on"] == {"api": {"condition": "service_healthy"}}
    assert "worker-data:/data" in worker["volumes"]
    environment = worker["environment"]
    for name in ("KERNEVO_WORK_DIR", "KERNEVO_KEY_DIR", "KERNEVO_COMPILE_CACHE"):
        assert environment[name].startswith("/data/"), name  # inside the volume
    assert _database_url(worker) == _database_url(compose["services"]["api"])


def test_the_llm_endpoint_and_key_pass_through_from_the_shell(compose: dict[str, Any]) -> None:
    """A variable listed without a value is taken from the shell running compose (unset when
    the shell has none): the key never lands in the file."""
    worker = compose["services"]["worker"]["environment"]
    for name in ("KERNEVO_LLM_BASE_URL", "KERNEVO_LLM_MODEL", "KERNEVO_LLM_API_KEY_ENV"):
        assert name in worker and worker[name] is None, name
    assert "OPENAI_API_KEY" in worker and worker["OPENAI_API_KEY"] is None
    api = compose["services"]["api"]["environment"]
    assert api["KERNEVO_API_TOKEN"] is None
    assert api["KERNEVO_API_KERNELS_REQUIRE_READ"] is None
    # Secrets (the catalogue's, the LLM key, PostgreSQL's password) are never literals.
    secrets = {v.name for v in CATALOGUE if v.secret} | {"OPENAI_API_KEY", "POSTGRES_PASSWORD"}
    assert {"KERNEVO_API_TOKEN", "KERNEVO_DB_PASSWORD"} <= secrets
    for service in compose["services"].values():
        for name, value in service.get("environment", {}).items():
            if name in secrets:
                assert value is None or value.startswith("${"), f"{name} has a literal secret"


def test_every_kernevo_variable_is_a_setting_its_service_reads(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        variables = {v for v in service.get("environment", {}) if v.startswith("KERNEVO_")}
        if name == "postgres":
            assert variables == set()
            continue
        unread = variables - READ_BY[name]
        assert not unread, f"{name} sets {sorted(unread)}, which it never reads"
    interpolated = set(re.findall(r"\$\{(KERNEVO_[A-Z0-9_]+)", COMPOSE.read_text()))
    assert interpolated == {"KERNEVO_DB_PASSWORD"} <= COMPOSE_VARIABLES


def test_every_setting_the_stack_uses_is_documented_in_the_readme(compose: dict[str, Any]) -> None:
    configuration = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    used = set(re.findall(r"KERNEVO_[A-Z0-9_]*[A-Z0-9]", COMPOSE.read_text()))
    used |= {name for s in compose["services"].values() for name in s.get("environment", {})}
    used -= {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}  # the image's own
    missing = sorted(name for name in used if f"`{name}`" not in configuration)
    assert missing == [], f"README's Configuration section does not name {missing}"
    assert "docker compose up" in configuration


def _compose_command() -> list[str] | str:
    """The compose command here: Docker's ``docker compose`` plugin, else the standalone
    ``docker-compose`` (Debian's package, v1.29: CI installs it); or why neither runs."""
    reasons = []
    if shutil.which("docker") is not None:
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
        reasons.append("no docker compose plugin")
    else:
        reasons.append("no docker")
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    return ", ".join([*reasons, "no docker-compose"])


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    """``docker compose config`` resolves the file as Docker would (schema, anchors, merge
    keys, interpolation) without a daemon; the password comes from ``KERNEVO_DB_PASSWORD``."""
    command = _compose_command()
    if isinstance(command, str):
        pytest.skip(f"cannot validate with compose: {command}")
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KERNEVO_DB_PASSWORD": "pw9"}
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == {"postgres", "api", "worker"}
    assert resolved["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw9"
    url = resolved["services"]["worker"]["environment"]["KERNEVO_DATABASE_URL"]
    assert url == "postgresql+psycopg://kernevo:pw9@postgres:5432/kernevo"
    (device,) = resolved["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert (device["driver"], device["capabilities"]) == ("nvidia", ["gpu"])
