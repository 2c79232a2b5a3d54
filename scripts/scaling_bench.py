"""What limits a job as GPUs are added, measured on a CPU machine (docs/SCALING.md, issue 10).

Four measurements, each printed as markdown table rows with the machine and the date:

``snapshot``
    OpenEvolve's controller copies its whole program database into every iteration it submits
    (``ProcessParallelController._create_database_snapshot``, then pickled to the pool worker):
    the time and bytes of one submission for populations of realistic programs (the trsm_small
    seed's text and an artifact set of the size our evaluator returns).
``controller``
    Compile-only jobs with the offline mutator, the compile cache warmed first so evaluation is
    nearly free: wall time per candidate and the job process's own CPU time per candidate (the
    controller loop, the lineage writes, the snapshots), on the local path and on a Dask cluster
    of compile-only workers (a scheduler and ``kernevo dask-worker`` processes started here);
    with the Dask path, the resident memory of one OpenEvolve pool worker (one per candidate in
    flight, all on the job's host).
``postgres``
    Programs recorded per second the way the lineage recorder writes them (``record_program`` and
    ``record_evaluation`` in one transaction, a 10 KB source and a 5 KB report), by 1 and 4
    writer processes, into a scratch database created and dropped on the server.
``dask``
    The Dask scheduler's overhead on a local cluster of two worker processes: the round trip of
    one trivial task restricted by a resource, and the throughput of many submitted at once.

Usage: ``python scripts/scaling_bench.py snapshot|controller|postgres|dask|all
[--postgres postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``. CPU only; the figures
depend on the machine's load (say so when you quote them).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def machine() -> str:
    """CPU model, cores and the 1-minute load average when the measurement started."""
    model = "unknown CPU"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {date.today()}"


# --- snapshot ----------------------------------------------------------------------------------


def bench_snapshot(populations: tuple[int, ...] = (50, 200, 1000, 5000)) -> list[str]:
    from openevolve.database import Program, ProgramDatabase
    from openevolve.process_parallel import ProcessParallelController

    from evolver.job_config import JobConfig
    from evolver.llm import model_configs, resolve_backend
    from evolver.openevolve_config import build_config
    from evolver.settings import EvolverSettings
    from seeds.registry import get_path

    source = get_path("trsm_small").seed_source()
    artifacts = {
        "status": "ok",
        "compile_log": "ptxas info    : Used 40 registers\n" * 60,  # ~2 KB, as our logs
        "resources": "registers 40, spills 0 B, stack 0 B, static shared 0 B, compile 95 ms",
        "timings": "m=64 n=64 candidate 12.1 us baseline 13.8 us speedup 1.14x\n" * 3,
    }
    rows = []
    for population in populations:
        # Enough MAP-Elites cells that the database can hold the whole population.
        job = JobConfig(
            path="trsm_small", dtype="float32", compile_only=True, population=population,
            archive=min(population, 10_000), feature_bins=100,
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            backend = resolve_backend(job.llm, EvolverSettings())
            config = build_config(
                job,
                models=model_configs(backend, job.llm),
                system_message="",
                template_dir=Path(tmp),
                output_dir=Path(tmp),
            )
            database = ProgramDatabase(config.database)
            for i in range(population):
                program = Program(
                    id=str(uuid.uuid4()),
                    code=source.replace("EVOLVE-BLOCK-START", f"EVOLVE-BLOCK-START {i}"),
                    metrics={"combined_score": (i % 97) / 97, "registers": 16.0 + i % 240,
                             "speedup_64": (i % 89) / 22},
                )  # fmt: skip
                database.add(program, iteration=i)
                database.store_artifacts(program.id, artifacts)
            controller = ProcessParallelController(config, "unused.py", database)
            times, size = [], 0
            for _ in range(5):
                t0 = time.perf_counter()
                snapshot = controller._create_database_snapshot()
                size = len(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
                times.append(time.perf_counter() - t0)
            kept = len(database.programs)
        rows.append(
            f"| {population} | {kept} | {statistics.median(times) * 1e3:.1f} ms | "
            f"{size / 1e6:.2f} MB |"
        )
    return rows


# --- controller --------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _run_job(work: Path, iterations: int, cluster: Any, rss: list[float]) -> dict[str, float]:
    """One compile-only job; wall and job-process CPU per candidate after the first child."""
    import threading

    from evolver.job_config import JobConfig
    from evolver.runner import start_job
    from evolver.settings import EvolverSettings

    stamps: list[tuple[float, float]] = []

    def write(line: str) -> None:
        if "| iter " in line and "seed" not in line:
            stamps.append((time.perf_counter(), time.process_time()))

    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            for child in _children(os.getpid()):
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as fh:
                        if b"multiprocessing" in fh.read():
                            rss.append(_rss_mb(child))
                except OSError:
                    continue

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    job = JobConfig(
        path="trsm_small", dtype="float32", compile_only=True, iterations=iterations,
        checkpoint_interval=10, seed=7,
    )  # fmt: skip
    try:
        start_job(
            job,
            settings=EvolverSettings(work_dir=work / "runs"),
            database_url=f"sqlite:///{work / 'lineage.db'}",
            write=write,
            cluster=cluster,
        )
    finally:
        stop.set()
    (w0, c0), (w1, c1) = stamps[0], stamps[-1]
    n = len(stamps) - 1
    return {"wall_ms": (w1 - w0) / n * 1e3, "cpu_ms": (c1 - c0) / n * 1e3, "n": n}


def _start_dask(workers: int, tmp: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    file = tmp / "scheduler.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    while not file.exists() or not file.read_text().strip():
        time.sleep(0.1)
    time.sleep(0.2)
    address = json.loads(file.read_text())["address"]
    for i in range(workers):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "kernevo.cli", "dask-worker", "--compile-only",
                 "--scheduler", address, "--name", f"cpu{i}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    return procs, address


def bench_controller(iterations: int = 100) -> list[str]:
    from evolver.cluster import ClusterOptions

    os.environ.pop("KERNEVO_LLM_BASE_URL", None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["KERNEVO_COMPILE_CACHE"] = str(tmp / "cubin")
        _run_job(tmp / "warm", iterations, None, [])  # every source of seed 7 compiled once
        local = _run_job(tmp / "local", iterations, None, [])
        rows.append(
            f"| local GPU path (compile-only), 1 in flight | {local['n']} | "
            f"{local['wall_ms']:.0f} ms | {local['cpu_ms']:.0f} ms | — |"
        )
        procs, address = _start_dask(2, tmp)
        try:
            for in_flight in (2, 4):
                rss: list[float] = []
                options = ClusterOptions(scheduler=address, in_flight=in_flight)
                got = _run_job(tmp / f"dask{in_flight}", iterations, options, rss)
                rows.append(
                    f"| Dask, 2 compile-only workers, {in_flight} in flight | {got['n']} | "
                    f"{got['wall_ms']:.0f} ms | {got['cpu_ms']:.0f} ms | "
                    f"{max(rss, default=0):.0f} MB |"
                )
        finally:
            for proc in procs:
                proc.kill()
    return rows


# --- postgres ----------------------------------------------------------------------------------


def _writer(url: str, job_id: int, count: int, start: mp.Barrier, out: mp.Queue) -> None:
    from db import repository
    from db.session import make_engine, session_scope
    from seeds.registry import get_path

    engine = make_engine(url)
    source = get_path("trsm_small").seed_source()
    report = {"status": "compiled", "notes": ["x" * 4800], "compile": {"arch": "sm_90"}}
    parent = None
    start.wait()
    t0 = time.perf_counter()
    for i in range(count):
        uid = str(uuid.uuid4())
        with session_scope(engine) as s:
            program, _ = repository.record_program(
                s, job_id=job_id, uid=uid, source=f"{source}// {uid}\n", parent_uid=parent,
                island=0, generation=i, iteration=i, diff="@@ -1 +1 @@\n" * 40,
                backend="offline", model="offline-mutator",
            )  # fmt: skip
            repository.record_evaluation(
                s, program_id=program.id, report_json=report, gpu_key="none",
                gpu_name="no GPU", arch="sm_90", driver_version=None, nvrtc_version="13.0",
                score=0.0, state="scored", error_kind=None,
            )  # fmt: skip
        parent = uid
    out.put(time.perf_counter() - t0)


def bench_postgres(server_url: str, count: int = 500) -> list[str]:
    from sqlalchemy import create_engine, text

    from db import repository
    from db.migrate import upgrade
    from db.session import make_engine, session_scope

    name = f"kernevo_scaling_{os.getpid()}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = server_url.rsplit("/", 1)[0] + f"/{name}"
    rows = []
    try:
        upgrade(url)
        engine = make_engine(url)
        for writers in (1, 4):
            jobs = []
            with session_scope(engine) as s:
                for _ in range(writers):
                    job = repository.create_job(
                        s, path="trsm_small", dtype="float32", gpu="none", shape_bucket="m64n64",
                        config={}, backend="offline", model="offline-mutator",
                    )  # fmt: skip
                    s.flush()
                    jobs.append(job.id)
            ctx = mp.get_context("spawn")
            start, out = ctx.Barrier(writers), ctx.Queue()
            procs = [
                ctx.Process(target=_writer, args=(url, job_id, count, start, out))
                for job_id in jobs
            ]
            for proc in procs:
                proc.start()
            seconds = [out.get(timeout=600) for _ in procs]
            for proc in procs:
                proc.join()
            rate = writers * count / max(seconds)
            rows.append(f"| {writers} | {writers * count} | {rate:.0f} programs/s |")
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return rows


# --- dask --------------------------------------------------------------------------------------


def _noop(x: int) -> int:
    return x


def bench_dask(count: int = 2000) -> list[str]:
    from distributed import Client, LocalCluster

    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            resources={"GPU": 1, "gpu-none": 1}, silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        client.submit(_noop, 0, pure=False).result()
        for label, resources in (("with gpu-none=1", {"gpu-none": 1}), ("no resources", None)):
            latencies = []
            for i in range(200):
                t0 = time.perf_counter()
                client.submit(_noop, i, pure=False, resources=resources).result()
                latencies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            futures = [client.submit(_noop, i, pure=False, resources=resources)
                       for i in range(count)]  # fmt: skip
            client.gather(futures)
            seconds = time.perf_counter() - t0
            rows.append(
                f"| {label} | {statistics.median(latencies) * 1e3:.1f} ms | "
                f"{count} | {count / seconds:.0f} tasks/s |"
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["snapshot", "controller", "postgres", "dask", "all"])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.what in ("snapshot", "all"):
        print("\n| population | programs held | snapshot + pickle per submission | bytes |")
        print("|---|---|---|---|")
        print("\n".join(bench_snapshot()))
    if args.what in ("controller", "all"):
        print("\n| evaluation | candidates | wall per candidate | job-process CPU per candidate "
              "| pool worker RSS |")  # fmt: skip
        print("|---|---|---|---|---|")
        print("\n".join(bench_controller()))
    if args.what in ("postgres", "all"):
        print("\n| writer processes | programs | programs recorded per second |")
        print("|---|---|---|")
        print("\n".join(bench_postgres(args.postgres)))
    if args.what in ("dask", "all"):
        print("\n| tasks | round trip (median of 200) | submitted at once | throughput |")
        print("|---|---|---|---|")
        print("\n".join(bench_dask()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
