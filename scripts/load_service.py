"""Bounded loopback load test of the champion endpoints on PostgreSQL, with locust (headless).

Makes a fresh schema in the PostgreSQL at ``--postgres-url`` (default the tests'
``KERNEVO_TEST_POSTGRES_URL``), migrates it and promotes one champion per (path, dtype) of the
registry on ``nvidia-h200`` (nine: trsm_small and trsm_blocked in four dtypes, trsm_small_z64
in complex128; each with its path's real seed source and a cubin of ``--cubin-kib`` KiB of
seeded random bytes, about an NVRTC cubin's size; no certificate) plus one on another GPU;
starts ``kernevo serve`` on 127.0.0.1 (one uvicorn process) over it; then runs
``scripts/locustfile_service.py`` headless for ``--seconds`` with ``--users`` users that loop
without pause (best kernel 8 : manifest 1 : conditional manifest 1), and prints, per endpoint,
requests, failures, throughput and the p50/p90/p99/max latency from locust's CSV. Exit status 0
when no request failed. The schema is dropped at the end.

    python scripts/load_service.py                          # 16 users, 20 s (docs/RESULTS.md)
    python scripts/load_service.py --users 4 --seconds 3 --json

Needs ``pip install -e '.[test]'`` (locust) and a PostgreSQL; no GPU.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "scripts" / "locustfile_service.py"
GPU = "nvidia-h200"
DEFAULT_POSTGRES = os.environ.get(
    "KERNEVO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
STARTUP_TIMEOUT_S = 60.0


@dataclass
class Endpoint:
    """Locust's aggregate for one request name; latencies in milliseconds."""

    name: str
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    avg_bytes: float


@dataclass
class LoadResult:
    """A run's settings and locust's figures per endpoint (plus ``Aggregated``)."""

    users: int
    seconds: float
    champions: int
    cubin_kib: int
    command: str
    endpoints: list[Endpoint] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(e.failures for e in self.endpoints if e.name == "Aggregated")

    @property
    def ok(self) -> bool:
        """Every request answered as expected, and some were made."""
        total = sum(e.requests for e in self.endpoints if e.name == "Aggregated")
        return total > 0 and self.failures == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _report(score: float, cubin: bytes) -> str:
    return json.dumps(
        {
            "status": "ok",
            "combined_score": score,
            "timings": [{"m": 64, "n": 64, "candidate_us": 10.0, "baseline_us": 10.0 * score}],
            "compile": {"cubin_sha256": hashlib.sha256(cubin).hexdigest(), "arch": "sm_90"},
            "verified_shapes": [[1, 1], [64, 64]],
        }
    )


def seed_champions(url: str, *, cubin_kib: int) -> int:
    """Promote one champion per (path, dtype) of the registry on ``GPU`` and one on another
    GPU, each through a job, a program (its path's seed source) and a verified evaluation;
    the number promoted."""
    from db import repository as repo
    from db.session import make_engine, session_scope
    from seeds.registry import PATHS

    rng = random.Random(20261202)
    promoted = 0
    engine = make_engine(url)
    try:
        keys = [(path, dtype, GPU) for path, spec in PATHS.items() for dtype in spec.dtypes]
        keys.append(("trsm_small", "float64", "nvidia-a100-sxm4-80gb"))
        for path, dtype, gpu in keys:
            spec = PATHS[path]
            cubin = rng.randbytes(cubin_kib * 1024)
            score = 1.2 + rng.random()
            with session_scope(engine) as s:
                job = repo.create_job(s, path=path, dtype=dtype, gpu=gpu,
                                      shape_bucket=spec.shape_bucket, config={},
                                      backend="offline", model=None)  # fmt: skip
                program, _ = repo.record_program(
                    s, job_id=job.id, uid=f"{path}-{dtype}-{gpu}",
                    source=spec.seed_file.read_text(), parent_uid=None, island=0,
                    generation=0, iteration=0, diff=None, backend="seed", model=None,
                )  # fmt: skip
                evaluation = repo.record_evaluation(
                    s, program_id=program.id, report_json=_report(score, cubin), gpu_key=gpu,
                    gpu_name=gpu, arch="sm_90", driver_version=None, nvrtc_version="13.0",
                    score=score, state="verified", error_kind=None,
                )  # fmt: skip
                repo.promote_champion(
                    s, evaluation_id=evaluation.id, path=path, dtype=dtype, gpu_key=gpu,
                    shape_bucket=spec.shape_bucket, cubin=cubin,
                    launch={"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
                    envelope=dict(spec.envelope), compile_options=["-arch=sm_90", "-std=c++17"],
                )  # fmt: skip
            promoted += 1
    finally:
        engine.dispose()
    return promoted


def _schema_url(server_url: str, schema: str) -> str:
    url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def _parse_stats(path: Path) -> list[Endpoint]:
    endpoints = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            endpoints.append(
                Endpoint(
                    name=row["Name"],
                    requests=int(row["Request Count"]),
                    failures=int(row["Failure Count"]),
                    rps=float(row["Requests/s"]),
                    p50_ms=float(row["50%"]),
                    p90_ms=float(row["90%"]),
                    p99_ms=float(row["99%"]),
                    max_ms=float(row["Max Response Time"]),
                    avg_bytes=float(row["Average Content Size"]),
                )
            )
    return endpoints


def _wait_healthy(base: str, serve: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise RuntimeError(f"kernevo serve exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"kernevo serve not healthy after {STARTUP_TIMEOUT_S:.0f} s")


def run_load(
    folder: Path, *, postgres_url: str, users: int, seconds: float, cubin_kib: int
) -> LoadResult:
    """Seed, serve, load with locust; locust's figures. The schema is dropped afterwards.

    Raises:
        RuntimeError: the service did not start, or locust did not write its statistics.
    """
    from db.migrate import upgrade

    schema = f"kernevo_load_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    serve: subprocess.Popen[bytes] | None = None
    try:
        url = _schema_url(postgres_url, schema)
        upgrade(url)
        champions = seed_champions(url, cubin_kib=cubin_kib)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
        log = folder / "serve.log"
        with log.open("wb") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "kernevo.cli", "serve", "--host", "127.0.0.1",
                 "--port", str(port), "--database-url", url],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait_healthy(base, serve, log)
        locust = shutil.which("locust") or "locust"
        command = [
            locust, "-f", str(LOCUSTFILE), "--headless", "--users", str(users),
            "--spawn-rate", str(users), "--run-time", f"{seconds:g}s", "--host", base,
            "--csv", str(folder / "load"), "--only-summary", "--loglevel", "WARNING",
            "--stop-timeout", "5",
        ]  # fmt: skip
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stats = folder / "load_stats.csv"
        if not stats.is_file():
            raise RuntimeError("locust wrote no statistics")
        shown = " ".join(Path(part).name if part == locust else part for part in command)
        return LoadResult(
            users=users,
            seconds=seconds,
            champions=champions,
            cubin_kib=cubin_kib,
            command=shown.replace(str(ROOT) + "/", ""),
            endpoints=_parse_stats(stats),
        )
    finally:
        if serve is not None:
            serve.terminate()
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def _table(result: LoadResult) -> str:
    lines = [
        f"{result.users} users, {result.seconds:g} s, {result.champions} champions "
        f"({result.cubin_kib} KiB cubins); {result.command}",
        f"{'endpoint':<22} {'requests':>9} {'fail':>5} {'req/s':>8} {'p50 ms':>7} "
        f"{'p90 ms':>7} {'p99 ms':>7} {'max ms':>7} {'bytes':>8}",
    ]
    for e in result.endpoints:
        lines.append(
            f"{e.name:<22} {e.requests:>9} {e.failures:>5} {e.rps:>8.1f} {e.p50_ms:>7.0f} "
            f"{e.p90_ms:>7.0f} {e.p99_ms:>7.0f} {e.max_ms:>7.0f} {e.avg_bytes:>8.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=16, help="concurrent users (default 16)")
    parser.add_argument("--seconds", type=float, default=20.0, help="run time (default 20)")
    parser.add_argument("--cubin-kib", type=int, default=48, help="cubin size (default 48)")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", type=Path, help="keep locust's CSVs and the log here")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="kernevo-load-"))
    try:
        result = run_load(
            folder,
            postgres_url=args.postgres_url,
            users=args.users,
            seconds=args.seconds,
            cubin_kib=args.cubin_kib,
        )
        if args.keep is not None:
            shutil.copytree(folder, args.keep, dirs_exist_ok=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps({**asdict(result), "ok": result.ok}, indent=2))
    else:
        print(_table(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
