"""Issue 10's GPU runs: kill a Dask worker mid-evaluation, and tabulate the jobs afterwards.

    python scripts/dask_job_check.py kill tcp://127.0.0.1:8786 WORKER_NAME DATABASE_URL [--after 20]
    python scripts/dask_job_check.py table sqlite:///runs/kernevo.db LABEL=JOB_ID ...

``kill``: waits until the database holds ``--after`` programs, then until the
worker named ``WORKER_NAME`` (``kernevo dask-worker`` names it ``<host>-gpu<I>``) is running one
(a ``kernevo-evaluate-*`` task), and SIGKILLs that worker's process: its nanny starts a new one,
the scheduler gives the task to a worker. Prints the task key, the worker's address and pid.

``table``: one markdown row per job: programs, distinct program ids, programs without exactly
one evaluation (migrant copies have none, and are counted apart), the iterations never recorded,
candidates per minute (children recorded between the first and the last child, by their
``created_at``), the Dask workers the reports name, evaluations that ended in ``infra_error``,
and the job's state. Exit status 1 when a program id repeats or a program has two evaluations.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _programs(url: str) -> int:
    """Programs recorded so far in the database (0 before the schema exists)."""
    from sqlalchemy import create_engine, func, select

    from db.models import Program

    try:
        with create_engine(url).connect() as conn:
            return int(conn.execute(select(func.count(Program.id))).scalar() or 0)
    except Exception:
        return 0


def kill(scheduler: str, name: str, url: str, after: int, timeout_s: float) -> int:
    from distributed import Client

    deadline = time.monotonic() + timeout_s
    while _programs(url) < after:
        if time.monotonic() > deadline:
            print(f"fewer than {after} programs recorded in {timeout_s:g} s", file=sys.stderr)
            return 1
        time.sleep(0.5)
    with Client(scheduler, timeout=30) as client:
        while time.monotonic() < deadline:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            target = next((a for a, w in workers.items() if w.get("name") == name), None)
            if target is not None:
                keys = [str(k) for k in client.processing(workers=[target]).get(target, [])]
                running = [k for k in keys if k.startswith("kernevo-evaluate-")]
                if running:
                    pid = client.run(os.getpid, workers=[target])[target]
                    os.kill(pid, signal.SIGKILL)
                    print(f"killed worker {name} {target} pid {pid} while it ran {running[0]}")
                    return 0
            time.sleep(0.02)
    print(f"worker {name} was never seen evaluating", file=sys.stderr)
    return 1


def table(url: str, labelled: list[tuple[str, int]]) -> int:
    from sqlalchemy import select

    from db.models import Evaluation, Job, Program
    from db.session import make_engine, session_scope

    bad = False
    print(
        "| run | job | GPU key | state | iterations | programs | distinct ids | evaluations "
        "≠ 1 | iterations missing | candidates/min | Dask workers | infra_error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with session_scope(make_engine(url)) as s:
        for label, job_id in labelled:
            job = s.get(Job, job_id)
            if job is None:
                print(f"| {label} | {job_id} | — | missing | | | | | | | | |")
                bad = True
                continue
            programs = s.scalars(select(Program).where(Program.job_id == job_id)).all()
            per_program: dict[int, int] = {p.id: 0 for p in programs}
            workers: set[str] = set()
            infra = 0
            for e in s.scalars(select(Evaluation).join(Program).where(Program.job_id == job_id)):
                if e.state == "verified":
                    continue  # a champion verification, not the iteration's evaluation
                per_program[e.program_id] += 1
                infra += e.error_kind == "infra_error"
                for note in e.report.get("notes") or []:
                    if found := re.match(r"evaluated on Dask worker (\S+)", note):
                        workers.add(found.group(1))
            migrants = sum(1 for p in programs if p.backend == "migration")
            wrong = sum(1 for p in programs if p.backend != "migration" and per_program[p.id] != 1)
            twice = sum(1 for n in per_program.values() if n > 1)
            uids = {p.uid for p in programs}
            missing = sorted(set(range(job.iteration + 1)) - {p.iteration for p in programs})
            children = sorted(p.created_at for p in programs if p.iteration > 0)
            minutes = (children[-1] - children[0]).total_seconds() / 60 if len(children) > 1 else 0
            rate = f"{(len(children) - 1) / minutes:.1f}" if minutes else "—"
            print(
                f"| {label} | {job_id} | {job.gpu_key} | {job.state} | {job.iteration} | "
                f"{len(programs)} ({migrants} migrants) | {len(uids)} | {wrong} | "
                f"{missing or 'none'} | {rate} | {', '.join(sorted(workers)) or 'local'} | "
                f"{infra} |"
            )
            bad = bad or len(uids) != len(programs) or twice > 0
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    k = commands.add_parser("kill")
    k.add_argument("scheduler")
    k.add_argument("name")
    k.add_argument("url")
    k.add_argument("--after", type=int, default=20)
    k.add_argument("--timeout-s", type=float, default=600)
    t = commands.add_parser("table")
    t.add_argument("url")
    t.add_argument("jobs", nargs="+", help="LABEL=JOB_ID")
    args = parser.parse_args()
    if args.command == "kill":
        return kill(args.scheduler, args.name, args.url, args.after, args.timeout_s)
    pairs = [(j.split("=", 1)[0], int(j.split("=", 1)[1])) for j in args.jobs]
    return table(args.url, pairs)


if __name__ == "__main__":
    raise SystemExit(main())
