"""Disk used by a compile-only job's work folder, with pruning and (for comparison) without.

    python scripts/work_folder_size.py --iterations 200 [--checkpoint-interval 5] [--keep 3 100]

Runs one fresh compile-only job (offline mutator, SQLite, a private compile cache) per ``--keep``
value in a temporary folder and prints, per job, ``du -sb`` of the work folder and of its
checkpoints, and the checkpoint folders left. ``--keep 100`` keeps every checkpoint of a
200-iteration job, as before pruning.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path


def du_bytes(path: Path) -> int:
    """``du -sb path`` in bytes."""
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def measure(iterations: int, interval: int, keep: int, root: Path) -> str:
    """Run one job under ``root`` and describe its work folder in one line."""
    from evolver.job_config import JobConfig
    from evolver.runner import start_job
    from evolver.settings import EvolverSettings

    job = JobConfig(
        path="trsm_small",
        dtype="float64",
        compile_only=True,
        iterations=iterations,
        checkpoint_interval=interval,
        keep_checkpoints=keep,
    )
    settings = EvolverSettings(work_dir=root / "runs", llm_base_url=None)
    started = time.monotonic()
    url = f"sqlite:///{root / 'lineage.db'}"
    outcome = start_job(job, settings=settings, database_url=url, write=lambda _: None)
    seconds = time.monotonic() - started
    work = outcome.work_folder  # runs/job-<id>-<key> (evolver.work_folder)
    if work is None:
        raise SystemExit(f"job {outcome.job_id} stopped before it took its work folder")
    checkpoints = work / "openevolve" / "checkpoints"
    names = sorted(p.name for p in checkpoints.iterdir())
    return (
        f"keep {keep}: job {outcome.state} at {outcome.iteration}/{iterations} in {seconds:.0f} s, "
        f"{outcome.programs_recorded} programs; du -sb {work}: {du_bytes(work)} bytes "
        f"(checkpoints {du_bytes(checkpoints)}); kept {', '.join(names)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--checkpoint-interval", type=int, default=5)
    parser.add_argument("--keep", type=int, nargs="+", default=[3])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernevo-size-") as tmp:
        os.environ["KERNEVO_COMPILE_CACHE"] = str(Path(tmp) / "cubin-cache")
        for keep in args.keep:
            root = Path(tmp) / f"keep-{keep}"
            root.mkdir()
            print(measure(args.iterations, args.checkpoint_interval, keep, root), flush=True)


if __name__ == "__main__":
    main()
