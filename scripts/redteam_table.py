"""Run the red-team corpus (``tests/redteam``) on one GPU and write a Markdown table of what
refused each entry: candidate, stage, dtype, expected check, the check that refused it, status,
seconds. The corpus's solver with nothing planted runs first as a control and must pass.

    python scripts/redteam_table.py OUT.md [--gpu 0] [--only NAME ...]

Exit status 0 when every entry was refused by its expected check and the control passed, 1
otherwise (the table is written either way). Each entry runs as ``tests/test_redteam_gpu.py``
runs it (``redteam.runner.evaluate_entry``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from redteam.corpus import CONTROL, ENTRIES, PATH_ID, with_block  # noqa: E402
from redteam.runner import Outcome, evaluate_entry  # noqa: E402

from evaluator.pipeline import Evaluator  # noqa: E402

HEADER = (
    "| candidate | stage | dtype | expected check | refused by | at (m, n) | status | seconds |\n"
    "|---|---|---|---|---|---|---|---|\n"
)


def _row(outcome: Outcome) -> str:
    entry = outcome.entry
    refused_by = outcome.check or "(passed)"
    mark = "" if outcome.as_expected else " **unexpected**"
    at = f"{outcome.shape[0]}, {outcome.shape[1]}" if outcome.shape else ""
    return (
        f"| {entry.name} | {entry.stage} | {entry.dtype} | {entry.check} | {refused_by}{mark} | "
        f"{at} | {outcome.status} | {outcome.seconds:.1f} |\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="Markdown file to write")
    parser.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these entries")
    args = parser.parse_args()
    entries = [e for e in ENTRIES if not args.only or e.name in args.only]
    unknown = set(args.only or ()) - {e.name for e in entries}
    if unknown:
        parser.error(f"no such entries: {', '.join(sorted(unknown))}")

    evaluators: dict[str, Evaluator] = {}

    def evaluator_for(dtype: str) -> Evaluator:
        if dtype not in evaluators:
            evaluators[dtype] = Evaluator(PATH_ID, dtype, gpu_index=args.gpu)
        return evaluators[dtype]

    rows: list[str] = []
    good = 0
    try:
        t0 = time.perf_counter()
        control = evaluator_for("float64").evaluate(with_block(CONTROL))
        control_ok = control.status == "ok"
        print(f"control: {control.status} ({time.perf_counter() - t0:.1f} s)", flush=True)
        gpu = control.gpu.name if control.gpu else "unknown GPU"
        for entry in entries:
            outcome = evaluate_entry(entry, evaluator_for, args.gpu)
            good += outcome.as_expected
            rows.append(_row(outcome))
            print(rows[-1], end="", flush=True)
            print(f"  detail: {outcome.detail[:300]}", flush=True)
    finally:
        for evaluator in evaluators.values():
            evaluator.close()
    summary = (
        f"{good} of {len(entries)} entries refused by their expected check on {gpu}; the "
        f"corpus solver alone (control, float64): {control.status}.\n"
    )
    args.out.write_text(f"# Red-team corpus\n\n{summary}\n{HEADER}{''.join(rows)}")
    print(summary, end="")
    return 0 if good == len(entries) and control_ok else 1


if __name__ == "__main__":
    sys.exit(main())
