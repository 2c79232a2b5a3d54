"""Load run: concurrent GETs against ``kernevo serve`` on SQLite while a compile-only job writes.

Starts ``kernevo serve`` on a fresh SQLite file (127.0.0.1, a free port) and a compile-only
``kernevo evolve`` job on the same file, waits until the job has recorded programs, then fires
``--clients`` concurrent GET loops (httpx, asyncio) for ``--seconds`` over ``/v1/jobs``,
``/v1/jobs/{id}``, ``/v1/programs/{id}``, ``/v1/programs/{id}/lineage`` and
``/v1/kernels/best`` (404: a compile-only job promotes nothing), and prints the number of
requests, the status counts, p50/p99/max latency and whether the job completed. Exit status 0
when no response was 5xx (and none failed at the transport) and the job completed, else 1.

    python scripts/load_sqlite_gets.py                       # 96 clients, 30 s (issue 5)
    python scripts/load_sqlite_gets.py --clients 32 --seconds 5 --iterations 60 --json

Everything goes to a temporary folder (database, job work folder, compile cache, logs), kept
with ``--keep``. Needs no GPU (NVRTC compiles only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

# Seconds to wait for the service to answer /healthz and for the job to record a program.
STARTUP_TIMEOUT_S = 120.0
# The service's configured token (KERNEVO_API_TOKEN, scope write): every /v1 read needs a token.
TOKEN = "load-test-token-0123456789-abcdefghij"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Per-request limit: well above SQLite's 30 s busy timeout, so a reader queueing for the write
# lock shows up as a slow answer or a 5xx, not as a client-side timeout.
REQUEST_TIMEOUT_S = 60.0


@dataclass
class LoadResult:
    """What one load run measured; latencies in milliseconds."""

    clients: int
    seconds: float
    requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    transport_errors: dict[str, int] = field(default_factory=dict)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    job_id: int | None = None
    job_exit_code: int | None = None
    job_state: str | None = None
    job_iterations: str = ""
    job_programs: int = 0
    job_running_through_load: bool = False
    job_seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.statuses.items() if code.startswith("5"))

    @property
    def ok(self) -> bool:
        """No 5xx, no transport error, and the job completed (exit 0, state complete)."""
        complete = self.job_exit_code == 0 and self.job_state == "complete"
        return self.server_errors == 0 and not self.transport_errors and complete


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment(folder: Path) -> dict[str, str]:
    # Only our own KERNEVO_ variables: the CLI refuses unknown ones, and the job must not write
    # to the real home's caches.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["KERNEVO_WORK_DIR"] = str(folder / "runs")
    env["KERNEVO_COMPILE_CACHE"] = str(folder / "cubin")
    env["KERNEVO_KEY_DIR"] = str(folder / "keys")
    env["KERNEVO_API_TOKEN"] = TOKEN
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kernevo(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kernevo.cli", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
        )


def _wait_for(predicate: object, what: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{what}: the process exited with {process.returncode}:\n{tail}")
        try:
            if predicate():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not ready after {STARTUP_TIMEOUT_S:.0f} s")


def _job_row(base: str) -> dict[str, object] | None:
    rows = httpx.get(f"{base}/v1/jobs", headers=AUTH, timeout=10).json()
    return rows[0] if rows else None


async def _client_loop(
    client: httpx.AsyncClient,
    paths: list[str],
    program_count: list[int],
    deadline: float,
    statuses: Counter[str],
    errors: Counter[str],
    latencies: list[float],
    rng: random.Random,
) -> None:
    while time.monotonic() < deadline:
        path = rng.choice(paths).format(program=rng.randint(1, max(program_count[0], 1)))
        started = time.perf_counter()
        try:
            response = await client.get(path)
        except httpx.HTTPError as error:
            errors[type(error).__name__] += 1
            continue
        latencies.append((time.perf_counter() - started) * 1000.0)
        statuses[str(response.status_code)] += 1
        if path.startswith("/v1/jobs/") and response.status_code == 200:
            program_count[0] = max(program_count[0], int(response.json().get("programs", 0)))


async def _load(base: str, job_id: int, programs: int, clients: int, seconds: float) -> tuple:
    paths = [
        "/v1/jobs",
        f"/v1/jobs/{job_id}",
        "/v1/programs/{program}",
        "/v1/programs/{program}/lineage",
        "/v1/kernels/best?op=trsm&dtype=float32&gpu=nvidia-h200&m=64&n=64",
    ]
    statuses: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    program_count = [programs]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(
        base_url=base, limits=limits, timeout=REQUEST_TIMEOUT_S, headers=AUTH
    ) as client:
        await asyncio.gather(
            *(
                _client_loop(
                    client,
                    paths,
                    program_count,
                    deadline,
                    statuses,
                    errors,
                    latencies,
                    random.Random(seed),
                )
                for seed in range(clients)
            )
        )
    return statuses, errors, latencies


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_load(
    folder: Path, *, clients: int, seconds: float, iterations: int, job_timeout_s: float
) -> LoadResult:
    """Serve, start the job, load for ``seconds`` with ``clients`` GET loops, wait for the job
    (at most ``job_timeout_s``), stop the service; the measurements.

    Raises:
        RuntimeError: the service or the job did not start (with the tail of its log).
    """
    env = _environment(folder)
    url = f"sqlite:///{folder / 'kernevo.db'}"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    result = LoadResult(clients=clients, seconds=seconds)
    serve_log, job_log = folder / "serve.log", folder / "evolve.log"
    serve = _kernevo(
        ["serve", "--host", "127.0.0.1", "--port", str(port), "--database-url", url],
        env,
        serve_log,
    )
    job: subprocess.Popen[bytes] | None = None
    try:
        _wait_for(
            lambda: httpx.get(f"{base}/healthz", timeout=5).status_code == 200,
            "kernevo serve",
            serve,
            serve_log,
        )
        job_started = time.monotonic()
        job = _kernevo(
            [
                "evolve",
                "--path",
                "trsm_small",
                "--dtype",
                "float32",
                "--compile-only",
                "--iterations",
                str(iterations),
                "--database-url",
                url,
            ],
            env,
            job_log,
        )

        def has_programs() -> bool:
            row = _job_row(base)
            return row is not None and int(row.get("programs", 0)) > 0  # type: ignore[call-overload]

        _wait_for(has_programs, "kernevo evolve", job, job_log)
        row = _job_row(base)
        assert row is not None
        result.job_id = int(row["id"])  # type: ignore[call-overload]
        statuses, errors, latencies = asyncio.run(
            _load(base, result.job_id, int(row["programs"]), clients, seconds)  # type: ignore[call-overload]
        )
        result.job_running_through_load = job.poll() is None
        try:
            result.job_exit_code = job.wait(timeout=job_timeout_s)
        except subprocess.TimeoutExpired:
            result.job_exit_code = None
        result.job_seconds = time.monotonic() - job_started
        final = httpx.get(f"{base}/v1/jobs/{result.job_id}", headers=AUTH, timeout=30).json()
        result.job_state = final.get("state")
        result.job_iterations = f"{final.get('iteration')}/{iterations}"
        result.job_programs = int(final.get("programs", 0))
        result.requests = sum(statuses.values())
        result.statuses = dict(sorted(statuses.items()))
        result.transport_errors = dict(errors)
        result.p50_ms = _percentile(latencies, 50)
        result.p99_ms = _percentile(latencies, 99)
        result.max_ms = max(latencies, default=0.0)
    finally:
        for process in (job, serve):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    return result


def _report(result: LoadResult) -> str:
    rps = result.requests / result.seconds if result.seconds else 0.0
    statuses = ", ".join(f"{code}: {n}" for code, n in result.statuses.items()) or "none"
    errors = ", ".join(f"{kind}: {n}" for kind, n in result.transport_errors.items()) or "none"
    return "\n".join(
        [
            f"clients {result.clients}, {result.seconds:.0f} s of GETs",
            f"requests {result.requests} ({rps:.0f}/s)",
            f"status counts: {statuses}",
            f"5xx: {result.server_errors}; transport errors: {errors}",
            f"latency p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
            f"max {result.max_ms:.1f} ms",
            f"job {result.job_id}: exit {result.job_exit_code}, state {result.job_state}, "
            f"iteration {result.job_iterations}, {result.job_programs} programs, "
            f"{result.job_seconds:.1f} s; running through the whole load: "
            f"{'yes' if result.job_running_through_load else 'no'}",
            f"job completed: {'yes' if result.job_state == 'complete' else 'no'}",
            f"verdict: {'ok' if result.ok else 'FAILED'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the load, print the report (``--json``: one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=96, help="concurrent GET loops (96)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the load (30)")
    parser.add_argument(
        "--iterations", type=int, default=400, help="job iterations (400: outlasts 30 s of load)"
    )
    parser.add_argument("--job-timeout", type=float, default=600.0, help="seconds (600)")
    parser.add_argument("--folder", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="kernevo-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        result = run_load(
            folder,
            clients=args.clients,
            seconds=args.seconds,
            iterations=args.iterations,
            job_timeout_s=args.job_timeout,
        )
    finally:
        if args.folder is None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(
            json.dumps({**asdict(result), "server_errors": result.server_errors, "ok": result.ok})
        )
    else:
        print(_report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
