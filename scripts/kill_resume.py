"""Stop a running `kernevo evolve` mid-job, resume it, and check the lineage survived.

    python scripts/kill_resume.py --dtype float32 --iterations 24 --kill-after 10 [--signal TERM]

Starts the job, waits until at least --kill-after programs are recorded, then either kills the
process group with SIGKILL (default) or sends SIGTERM to the job's process alone, as a scheduler
would, and requires exit 143 within STOP_BOUND_S; counts programs, runs `kernevo evolve --resume
JOB`, counts again, and checks: no program lost, no uid recorded twice, every program's parent
present. Exits 1 on any breach.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from sqlalchemy import func, select

from db.models import Job, Program
from db.session import make_engine, session_scope

# A SIGTERM'd job ends its iteration in flight's pool, 2 s at most to reap the workers
# (OpenEvolve's _terminate_process_pool), then the interpreter's exit; a CI run saw one hang.
STOP_BOUND_S = 30.0


def counts(url: str) -> tuple[int | None, set[str], int, int]:
    engine = make_engine(url)
    with session_scope(engine) as s:
        job = s.scalars(select(Job).order_by(Job.id.desc())).first()
        uids = set(s.scalars(select(Program.uid)).all())
        total = s.scalar(select(func.count(Program.id))) or 0
        orphans = (
            s.scalar(
                select(func.count(Program.id)).where(
                    Program.parent_id.is_not(None),
                    ~Program.parent_id.in_(select(Program.id)),
                )
            )
            or 0
        )
    engine.dispose()
    return (job.id if job else None), uids, total, orphans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--kill-after", type=int, default=10)
    parser.add_argument("--signal", choices=["KILL", "TERM"], default="KILL")
    parser.add_argument("--compile-only", action="store_true", help="a job that needs no GPU")
    args = parser.parse_args()
    url = os.environ["KERNEVO_DATABASE_URL"]
    cmd = ["kernevo", "evolve", "--path", "trsm_small", "--dtype", args.dtype,
           "--iterations", str(args.iterations)]  # fmt: skip
    cmd += ["--compile-only"] if args.compile_only else []
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.time() + 300
    recorded = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            _, _, recorded, _ = counts(url)
        except Exception:  # the schema may not exist yet in the first instants
            continue
        if recorded >= args.kill_after:
            break
    stopped = True
    if args.signal == "KILL":
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    else:
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            print(f"no exit within {STOP_BOUND_S:g} s of SIGTERM; killed")
        print(f"SIGTERM: exit {code} after {time.monotonic() - start:.1f} s")
        stopped = code == 143
    job_id, before_uids, before, _ = counts(url)
    print(f"stopped job {job_id} with SIG{args.signal} after {before} programs were recorded")
    done = subprocess.run(["kernevo", "evolve", "--resume", str(job_id)], check=False)
    job_id, after_uids, after, orphans = counts(url)
    lost = before_uids - after_uids
    print(
        f"resume exit {done.returncode}; programs before {before}, after {after}; "
        f"lost {len(lost)}, duplicate uids {after - len(after_uids)}, orphans {orphans}"
    )
    ok = stopped and done.returncode == 0 and not lost and after == len(after_uids)
    ok = ok and orphans == 0
    ok = ok and after > before
    print("kill/resume:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
