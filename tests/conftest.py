"""Shared test setup: the ``gpu`` marker, databases on SQLite and PostgreSQL, seeded lineages.

GPU tests (``@pytest.mark.gpu``) are skipped where no CUDA device answers. Database fixtures run
every test on SQLite (a temporary file) and on PostgreSQL at ``KERNEVO_TEST_POSTGRES_URL``
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``), each in a schema of its own that
is dropped afterwards. An unreachable PostgreSQL skips its half, unless
``KERNEVO_REQUIRE_POSTGRES=1`` (CI), where it fails.

- ``db_session``: one session per test inside a transaction that is rolled back, on a database
  migrated once per run and backend.
- ``fresh_database_url``: a freshly migrated database per test, for tests that commit for real
  (concurrency, crashes, the API); ``empty_database_url``: the same, never migrated.

Every test runs with ``HOME`` (and the XDG, CuPy and kernevo caches under it) in a temporary
folder and without the developer's own ``KERNEVO_*`` settings: tests never write to the real
home directory's caches or keys (``_isolated_home``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from evaluator.pipeline import Evaluator

POSTGRES_URL = os.environ.get(
    "KERNEVO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("KERNEVO_REQUIRE_POSTGRES") == "1"
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

# --- isolation from the real home and environment ------------------------------------------

# Read by this file and by CI; every other KERNEVO_* variable is the developer's, not the run's.
_KEPT_VARIABLES = ("KERNEVO_TEST_POSTGRES_URL", "KERNEVO_REQUIRE_POSTGRES")


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary home for the whole run: ``HOME``, ``XDG_CACHE_HOME``, ``XDG_CONFIG_HOME``,
    ``CUPY_CACHE_DIR``, ``KERNEVO_COMPILE_CACHE`` and ``KERNEVO_CACHE_DIR`` all point inside it,
    so ``~/.cache/kernevo`` (cubins, champions), ``~/.config/kernevo/keys`` and CuPy's kernel
    cache are never written by a test, in this process or in the processes it starts (they
    inherit the environment). Other ``KERNEVO_*`` variables are removed for the run."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.upper().startswith("KERNEVO_") and name not in _KEPT_VARIABLES:
                patch.delenv(name)
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
        patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        patch.setenv("CUPY_CACHE_DIR", str(home / ".cupy" / "kernel_cache"))
        patch.setenv("KERNEVO_COMPILE_CACHE", str(home / ".cache" / "kernevo" / "cubin"))
        patch.setenv("KERNEVO_CACHE_DIR", str(home / ".cache" / "kernevo"))
        yield home


# --- GPU marker -------------------------------------------------------------------------------


@functools.cache
def _cuda_device_count() -> tuple[int, str]:
    """Whether device 0 answers (1) or not (0, with the reason: no NVIDIA driver, no device …),
    asked by ``evolver.gpu.query_gpu`` in a child process so this one never initializes CUDA
    (a process that touched CUDA must not fork GPU workers)."""
    from evolver.errors import NoGpuError
    from evolver.gpu import query_gpu

    try:
        query_gpu(0)
    except NoGpuError as exc:
        return 0, str(exc)
    return 1, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests, with the reason, when no CUDA device is present."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    count, reason = _cuda_device_count()
    if count == 0:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that collected no test must not pass (pytest's own exit code 5 is kept as is)."""
    if session.testscollected == 0 and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


# --- databases --------------------------------------------------------------------------------


def _render(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """URL of a reachable PostgreSQL; skips (fails with KERNEVO_REQUIRE_POSTGRES=1) otherwise."""
    engine = None
    try:
        # Inside the try: without psycopg (the GPU host's wheelhouse) create_engine itself raises.
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 5})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to connect means "no PostgreSQL here"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"PostgreSQL unreachable at {_render(POSTGRES_URL)}: {first_line}"
        if REQUIRE_POSTGRES:
            pytest.fail(f"{message} (KERNEVO_REQUIRE_POSTGRES=1)", pytrace=False)
        pytest.skip(message)
    finally:
        if engine is not None:
            engine.dispose()
    return POSTGRES_URL


@contextmanager
def _postgres_schema(server_url: str) -> Iterator[str]:
    """A URL whose connections see only a new, empty schema; the schema is dropped afterwards."""
    schema = f"kernevo_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def _empty_database(backend: str, request: pytest.FixtureRequest, folder: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'kernevo.db'}"
        return
    with _postgres_schema(request.getfixturevalue("postgres_server_url")) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def empty_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A new database with no tables (SQLite file or PostgreSQL schema), per test."""
    with _empty_database(request.param, request, tmp_path_factory.mktemp("db")) as url:
        yield url


@pytest.fixture
def fresh_database_url(empty_database_url: str) -> str:
    """A new database migrated to the Alembic head, per test: for tests that commit."""
    from db.migrate import upgrade

    upgrade(empty_database_url)
    return empty_database_url


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    """An engine on a fresh, migrated database of each backend, disposed after the test."""
    from db.session import make_engine

    engine = make_engine(fresh_database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture(scope="session", params=BACKENDS)
def migrated_engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """One migrated database per backend for the whole run, reached through ``db.session``."""
    from db.migrate import upgrade
    from db.session import make_engine

    with _empty_database(request.param, request, tmp_path_factory.mktemp("db")) as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.fixture
def db_session(migrated_engine: Engine) -> Iterator[Session]:
    """A session inside a transaction rolled back after the test; the code under test may
    commit or use savepoints (they become savepoints of the outer transaction)."""
    connection = migrated_engine.connect()
    transaction = connection.begin()
    session = Session(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()


# --- a seeded lineage -------------------------------------------------------------------------

SEED_SOURCE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32 64\n// EVOLVE-BLOCK-END\n"
H200 = "nvidia-h200"


def make_report(score: float, *, cubin: bytes | None = None, status: str = "ok") -> str:
    """An evaluator-shaped report (``EvaluationReport.to_json()`` layout) as a JSON string."""
    return json.dumps(
        {
            "status": status,
            "combined_score": score,
            "failure": None,
            "timings": [
                {"m": 64, "n": 64, "candidate_us": 10.0, "baseline_us": 20.1, "speedup": 2.01}
            ],
            "compile": {
                "log": "ptxas info: 40 registers",
                "registers": 40,
                "spills": 0,
                "cubin_sha256": hashlib.sha256(cubin).hexdigest() if cubin else None,
                "nvrtc_version": "13.0",
                "arch": "sm_90",
            },
            "phase_seconds": {"compile": 0.04, "verify": 0.5, "time": 1.2},
            "gpu": {"name": "NVIDIA H200", "key": H200, "arch": "sm_90"},
            "verified_shapes": [[1, 1], [64, 64]],
        }
    )


@dataclass(frozen=True)
class Seeded:
    """Ids of a job with a seed → child → grandchild lineage whose grandchild is champion of
    (trsm_small, float64, nvidia-h200, m64n64)."""

    job_id: int
    seed_id: int
    child_id: int
    grandchild_id: int
    verified_evaluation_id: int
    cubin: bytes
    grandchild_source: str


def seed_lineage(url: str) -> Seeded:
    """Write a job, three generations of programs, evaluations and a champion through
    ``db.repository``, committed."""
    from db import repository as repo
    from db.session import make_engine, session_scope

    cubin = b"\x7fELF fake cubin \x00\x01\x02" * 16
    grandchild_source = SEED_SOURCE.replace("NB 32", "NB 64")
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(
                s,
                path="trsm_small",
                dtype="float64",
                gpu=H200,
                shape_bucket="m64n64",
                config={"iterations": 100},
                backend="offline",
                model=None,
            )
            common = {"job_id": job.id, "island": 0, "backend": "offline", "model": None}
            seed, _ = repo.record_program(
                s,
                uid="seed",
                source=SEED_SOURCE,
                parent_uid=None,
                generation=0,
                iteration=0,
                diff=None,
                **common,
            )
            child, _ = repo.record_program(
                s,
                uid="child",
                source=SEED_SOURCE.replace("NB 32", "NB 16"),
                parent_uid="seed",
                generation=1,
                iteration=1,
                diff="-NB 32\n+NB 16",
                **common,
            )
            grandchild, _ = repo.record_program(
                s,
                uid="grandchild",
                source=grandchild_source,
                parent_uid="child",
                generation=2,
                iteration=2,
                diff="-NB 16\n+NB 64",
                **common,
            )
            gpu = {"gpu_key": H200, "gpu_name": "NVIDIA H200", "arch": "sm_90"}
            versions = {"driver_version": "580.65", "nvrtc_version": "13.0"}
            repo.record_evaluation(
                s,
                program_id=grandchild.id,
                report_json=make_report(2.01, cubin=cubin),
                score=2.01,
                state="scored",
                error_kind=None,
                **gpu,
                **versions,
            )
            verified = repo.record_evaluation(
                s,
                program_id=grandchild.id,
                report_json=make_report(2.01, cubin=cubin),
                score=2.01,
                state="verified",
                error_kind=None,
                **gpu,
                **versions,
            )
            repo.promote_champion(
                s,
                evaluation_id=verified.id,
                path="trsm_small",
                dtype="float64",
                gpu_key=H200,
                shape_bucket="m64n64",
                cubin=cubin,
                launch={"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
                envelope={"m_max": 64, "n_max": 64},
                compile_options=["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"],
            )
            return Seeded(
                job_id=job.id,
                seed_id=seed.id,
                child_id=child.id,
                grandchild_id=grandchild.id,
                verified_evaluation_id=verified.id,
                cubin=cubin,
                grandchild_source=grandchild_source,
            )
    finally:
        engine.dispose()


API_TOKEN = "test-token-0123456789-abcdefghijklmn"


@pytest.fixture
def report_json() -> Callable[..., str]:
    """``make_report``: an evaluator-shaped report JSON string for a score (and cubin)."""
    return make_report


@pytest.fixture
def seeded(fresh_database_url: str) -> Seeded:
    """The ``seed_lineage`` data, committed to this test's fresh database."""
    return seed_lineage(fresh_database_url)


@pytest.fixture
def api_token() -> str:
    """The bearer token the ``api_client`` app accepts (``KERNEVO_API_TOKEN``: scope write)."""
    return API_TOKEN


def unused_port() -> int:
    """A loopback TCP port nothing listens on: bound, then released. A server started on it
    takes it; a client sent to it finds it closed (the unreachable endpoint tests use, never
    another address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def repo_pythonpath() -> str:
    """``PYTHONPATH`` for a test's child Python: the repository first, the environment's own
    entries kept (the lent GPU machine installs the packages to a folder named there; a child
    given the repository alone lacked openevolve and pyelftools)."""
    entries = (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", ""))
    return os.pathsep.join(p for p in entries if p)


def bearer(token: str) -> dict[str, str]:
    """The ``Authorization`` header carrying ``token``."""
    return {"Authorization": f"Bearer {token}"}


def create_api_token(url: str, scope: str, name: str = "test") -> str:
    """A token of ``scope`` created in the database at ``url`` (``db.tokens``); its secret."""
    from db.session import make_engine, session_scope
    from db.tokens import create_token

    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return create_token(s, scope=scope, name=name)[1]
    finally:
        engine.dispose()


@pytest.fixture
def read_token(fresh_database_url: str) -> str:
    """A ``read`` token in this test's fresh database."""
    return create_api_token(fresh_database_url, "read", "reader")


@pytest.fixture
def api_client(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A TestClient on ``api.app.create_app`` over this test's fresh database, with
    ``KERNEVO_API_TOKEN`` set to ``API_TOKEN``; the app's engine is disposed afterwards."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    with TestClient(create_app(fresh_database_url)) as client:
        yield client


@pytest.fixture(scope="module")
def evaluators() -> Iterator[Callable[[str], Evaluator]]:
    """``get(dtype)``: one trsm_small Evaluator on GPU 0 per dtype for the module's GPU tests,
    closed (its worker stopped) when the module is done."""
    from evaluator.pipeline import Evaluator

    made: dict[str, Evaluator] = {}

    def get(dtype: str) -> Evaluator:
        if dtype not in made:
            made[dtype] = Evaluator("trsm_small", dtype, gpu_index=0)
        return made[dtype]

    yield get
    for ev in made.values():
        ev.close()
