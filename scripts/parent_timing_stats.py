"""How a job's evaluations compared children with their parents (evaluator.parent_context).

    python scripts/parent_timing_stats.py RUNS_DIR

Reads every evaluator report (``*.json`` under RUNS_DIR, the job's KERNEVO_REPORT_DIR folders)
and prints how many passed, how many were timed against their parent, how many beat it beyond
the noise floor, and how many had their score held at the parent's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evaluator.report import EvaluationReport
from evaluator.score import beats_rival


def main(root: Path) -> None:
    passed = against_parent = faster = held = 0
    for path in sorted(root.rglob("*.json")):
        try:
            report = EvaluationReport.from_dict(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError):
            continue  # not a report (OpenEvolve's own files)
        if report.status != "ok":
            continue
        passed += 1
        parents = [t for t in report.rival_timings if t.name == "parent"]
        if parents:
            against_parent += 1
            faster += beats_rival(parents)
            held += any(n.startswith("not faster than its parent") for n in report.notes)
    print(f"{passed} passing reports; {against_parent} timed against their parent; {faster} "
          f"faster than it beyond noise; {held} held at the parent's score")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
