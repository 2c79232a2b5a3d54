"""Sum the GPU worker's task profiles (``KERNEVO_PROFILE_DIR``) per task kind and print where
the time went.

    KERNEVO_PROFILE_DIR=/tmp/prof python3 -m evaluator.bench --path trsm_blocked \\
        --bucket m2049_16384 --dtype float64
    python3 scripts/task_profile.py /tmp/prof [--top 30] [--sort cumulative|tottime]

For each kind (``check``, ``time``, ``champion``): how many tasks, then the ``--top`` functions
by ``--sort``, as ``pstats`` prints them. A CUDA synchronization (an event's or a stream's)
is where the device's queued work is waited for, so device time shows up under it: compare it
with the replays' own event times in the report. Exit 1 when the folder holds no profile.

On Python 3.12 and later cProfile records every thread of the worker, not only the task's
(it is built on ``sys.monitoring``, which is process-wide): the parent watchdog's
``time.sleep``/``os.getppid`` (``evaluator.parent_watch``) and the host pool's input builds
appear nested under whatever the task's thread was running, and inflate its cumulative times
(RESULTS 23: 7.5 s of sleep in a 16.3 s timing task). Read those functions' own rows, not the
cumulative column of their apparent callers; on 3.11 only the task's thread is recorded.
"""

from __future__ import annotations

import argparse
import pstats
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Print the per-kind summaries; 0, or 1 when there is nothing to sum."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", choices=("cumulative", "tottime"), default="cumulative")
    args = parser.parse_args(argv)
    by_kind: dict[str, list[str]] = defaultdict(list)
    for path in sorted(args.folder.glob("*.prof")):
        by_kind[path.name.split("-", 1)[0]].append(str(path))
    if not by_kind:
        print(f"no *.prof files in {args.folder}", file=sys.stderr)
        return 1
    for kind, paths in sorted(by_kind.items()):
        print(f"## {kind}: {len(paths)} task(s)")
        stats = pstats.Stats(*paths, stream=sys.stdout)
        stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
