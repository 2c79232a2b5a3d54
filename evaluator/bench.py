"""Time one kernel source against cuBLAS in several dtypes and print a table.

    python -m evaluator.bench --path trsm_small --dtype float64 complex128 [--source FILE]

Each row is graph-replayed device µs per call (median ± IQR), candidate and cuBLAS interleaved in
one process, plus single-call latency; the seed kernel is used when no source is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from seeds.registry import get_path


def format_rows(label: str, report: EvaluationReport) -> list[str]:
    """Markdown table rows, one per timed shape of ``report``."""
    if not report.passed:
        return [
            f"| {label} | {report.dtype} | FAILED: {report.failure and report.failure.describe()} |"
        ]
    return [
        f"| {label} | {report.dtype} | {t.m}×{t.n} "
        f"| {t.baseline_us:.2f} ± {t.baseline_spread_us:.2f} "
        f"| {t.candidate_us:.2f} ± {t.candidate_spread_us:.2f} | {t.speedup:.2f}× "
        f"| {t.baseline_single_call_us:.1f} | {t.candidate_single_call_us:.1f} |"
        for t in report.timings
    ]


HEADER = (
    "| kernel | dtype | m×n | cuBLAS µs (IQR) | kernel µs (IQR) | speedup | cuBLAS 1-call µs "
    "| kernel 1-call µs |\n|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", default="trsm_small")
    parser.add_argument("--dtype", nargs="+", default=list(get_path("trsm_small").dtypes))
    parser.add_argument("--source", type=Path, help="kernel source (default: the seed)")
    parser.add_argument("--label", default=None)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the full reports here")
    args = parser.parse_args(argv)
    spec = get_path(args.path)
    source = args.source.read_text() if args.source else spec.seed_source()
    label = args.label or (args.source.name if args.source else "seed")
    print(HEADER)
    reports = []
    for dtype in args.dtype:
        evaluator = Evaluator(args.path, dtype, args.gpu)
        try:
            report = evaluator.evaluate(source)
        finally:
            evaluator.close()
        reports.append(report.to_dict())
        print("\n".join(format_rows(label, report)), flush=True)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    return 0 if all(r["status"] == "ok" for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
