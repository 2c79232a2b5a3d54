"""Per-job evaluator throughput and lineage counts from a kernevo database.

    python scripts/job_stats.py sqlite:///runs/kernevo.db [JOB_ID ...]

Prints, per job: programs recorded, how many passed, failures by kind, candidates per minute
(programs / wall time between the first and last program), the mean time per candidate spent in
compile, verification and timing (from each evaluation's report), the best score, and per timed
shape the seed's (iteration 0) and the best program's device µs against the baseline's, timed in
the same evaluation (graph-replayed medians from the reports). Then every champion in the
database: its key (path, dtype, GPU key, shape bucket), program, and the tunables its source
sets (``seeds.tunables``: for trsm_blocked the NB chosen for that bucket).
"""

from __future__ import annotations

import sys
from collections import Counter

from sqlalchemy import select

from db.models import Champion, Evaluation, Job, Program
from db.session import make_engine, session_scope
from seeds.tunables import parse_tunables


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
            for label, program in (("seed", _seed(programs)), ("best", _best(programs))):
                if program is not None:
                    print(f"  {label} program {program.id} (iteration {program.iteration}):")
                    for row in _timing_rows(program):
                        print(f"    {row}")
        for champion in s.scalars(select(Champion).order_by(Champion.id)).all():
            program = s.get(Program, champion.program_id)
            tunables = parse_tunables(program.source) if program is not None else []
            settings = " ".join(f"{t.name}={t.value}" for t in tunables)
            print(
                f"champion {champion.path} {champion.dtype} {champion.gpu_key} "
                f"{champion.shape_bucket}: program {champion.program_id}, {settings}"
            )


def _scored(program: Program) -> float | None:
    """The program's combined_score from its latest evaluation with one, else None."""
    for evaluation in sorted(program.evaluations, key=lambda e: e.id, reverse=True):
        score = (evaluation.report or {}).get("combined_score")
        if score is not None:
            return float(score)
    return None


def _seed(programs: list[Program]) -> Program | None:
    seeds = [p for p in programs if p.parent_id is None]
    return min(seeds, key=lambda p: p.id) if seeds else None


def _best(programs: list[Program]) -> Program | None:
    scored = [(score, p.id, p) for p in programs if (score := _scored(p)) is not None]
    return max(scored)[2] if scored else None


def _timing_rows(program: Program) -> list[str]:
    """One line per timed shape of the program's latest timed evaluation: kernel µs, baseline
    µs (same evaluation) and their ratio."""
    for evaluation in sorted(program.evaluations, key=lambda e: e.id, reverse=True):
        timings = (evaluation.report or {}).get("timings") or []
        if timings:
            rows = []
            for t in timings:
                shape = tuple(t.get("shape") or (t["m"], t["n"]))
                kernel, baseline = t["candidate_us"], t["baseline_us"]
                rows.append(
                    f"{'x'.join(map(str, shape))}: {kernel:.2f} us vs baseline {baseline:.2f} us"
                    f" ({baseline / kernel:.2f}x)"
                )
            return rows
    return ["no timed evaluation"]


if __name__ == "__main__":
    main(sys.argv[1], [int(a) for a in sys.argv[2:]])
