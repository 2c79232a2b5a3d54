"""Per-job evaluator throughput and lineage counts from a kernevo database.

    python scripts/job_stats.py sqlite:///runs/kernevo.db [JOB_ID ...]

Prints, per job: programs recorded, how many passed, failures by kind, candidates per minute
(programs / wall time between the first and last program), the mean time per candidate spent in
compile, verification and timing (from each evaluation's report), and the best score.
"""

from __future__ import annotations

import sys
from collections import Counter

from sqlalchemy import select

from db.models import Evaluation, Job, Program
from db.session import make_engine, session_scope


def main(url: str, job_ids: list[int]) -> None:
    engine = make_engine(url)
    with session_scope(engine) as s:
        jobs = s.scalars(select(Job).order_by(Job.id)).all()
        for job in jobs:
            if job_ids and job.id not in job_ids:
                continue
            programs = s.scalars(select(Program).where(Program.job_id == job.id)).all()
            evals = s.scalars(
                select(Evaluation).join(Program).where(Program.job_id == job.id)
            ).all()
            kinds = Counter(e.error_kind or "ok" for e in evals if e.state != "verified")
            phases: Counter[str] = Counter()
            for e in evals:
                if e.state == "verified":
                    continue
                for name, sec in (e.report.get("phase_seconds") or {}).items():
                    if not name.endswith("_wall"):
                        phases[name] += sec
            times = sorted(p.created_at for p in programs)
            minutes = (times[-1] - times[0]).total_seconds() / 60 if len(times) > 1 else 0
            n_eval = max(1, sum(1 for e in evals if e.state != "verified"))
            print(
                f"job {job.id} {job.path} {job.dtype} {job.gpu_key} state={job.state} "
                f"iteration={job.iteration} backend={job.backend}"
            )
            print(f"  programs {len(programs)}, evaluations {len(evals)}, outcomes {dict(kinds)}")
            if minutes:
                print(f"  {len(programs) / minutes:.1f} candidates/min over {minutes:.1f} min")
            split = ", ".join(f"{k} {v / n_eval * 1e3:.0f} ms" for k, v in sorted(phases.items()))
            print(f"  mean per candidate: {split}")
            print(f"  best score {job.best_score}, best speedup {job.best_speedup}")


if __name__ == "__main__":
    main(sys.argv[1], [int(a) for a in sys.argv[2:]])
