"""Run the red-team corpus (``tests/redteam``) on one GPU and write a Markdown table of what
refused each entry: candidate, path, stage, dtype, expected check, the check that refused it,
status, seconds. Each path's control (the solver its entries start from, with nothing planted)
runs first in the pipeline (in float64, or complex128 for trsm_small_z64) and must pass.

    python scripts/redteam_table.py OUT.md [--gpu 0] [--only NAME ...] [--path PATH ...]

``--only`` keeps the named entries, ``--path`` the entries of those paths (both: entries that
are in either). Exit status 0 when every entry was refused by its expected check and every
control run passed, 1 otherwise (the table is written either way). Each entry runs as
``tests/test_redteam_gpu.py`` runs it (``redteam.runner.evaluate_entry``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from redteam.corpus import CONTROLS, ENTRIES, with_block  # noqa: E402
from redteam.runner import Outcome, evaluate_entry  # noqa: E402

from evaluator.pipeline import Evaluator  # noqa: E402
from seeds.registry import get_path  # noqa: E402

HEADER = (
    "| candidate | path | stage | dtype | expected check | refused by | at (m, n) | status "
    "| seconds |\n|---|---|---|---|---|---|---|---|---|\n"
)


def _row(outcome: Outcome) -> str:
    entry = outcome.entry
    refused_by = outcome.check or "(passed)"
    mark = "" if outcome.as_expected else " **unexpected**"
    at = f"{outcome.shape[0]}, {outcome.shape[1]}" if outcome.shape else ""
    return (
        f"| {entry.name} | {entry.path} | {entry.stage} | {entry.dtype} | {entry.check} | "
        f"{refused_by}{mark} | "
        f"{at} | {outcome.status} | {outcome.seconds:.1f} |\n"
    )


def control_dtype(path: str) -> str:
    """The dtype a path's control runs in: float64, or the path's first dtype without it."""
    dtypes = get_path(path).dtypes
    return "float64" if "float64" in dtypes else dtypes[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="Markdown file to write")
    parser.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these entries")
    parser.add_argument("--path", nargs="+", metavar="PATH", help="run only these paths' entries")
    args = parser.parse_args()
    unknown = set(args.only or ()) - {e.name for e in ENTRIES}
    unknown |= set(args.path or ()) - set(CONTROLS)
    if unknown:
        parser.error(f"no such entries or paths: {', '.join(sorted(unknown))}")
    chosen = set(args.only or ()), set(args.path or ())
    entries = [e for e in ENTRIES if not any(chosen) or e.name in chosen[0] or e.path in chosen[1]]
    paths = list(dict.fromkeys(e.path for e in entries))
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__, args.gpu)

    evaluators: dict[tuple[str, str], Evaluator] = {}

    def evaluator_for(path: str, dtype: str) -> Evaluator:
        if (path, dtype) not in evaluators:
            evaluators[(path, dtype)] = Evaluator(path, dtype, gpu_index=args.gpu)
        return evaluators[(path, dtype)]

    rows: list[str] = []
    controls: list[str] = []
    good = 0
    gpu = "unknown GPU"
    try:
        for path in paths:
            t0 = time.perf_counter()
            dtype = control_dtype(path)
            control = evaluator_for(path, dtype).evaluate(with_block(CONTROLS[path], path))
            controls.append(f"{path} ({dtype}): {control.status}")
            print(f"control {controls[-1]} ({time.perf_counter() - t0:.1f} s)", flush=True)
            if control.status != "ok":
                print(f"  detail: {control.failure}", flush=True)
            gpu = control.gpu.name if control.gpu else gpu
        for entry in entries:
            outcome = evaluate_entry(entry, evaluator_for, args.gpu)
            good += outcome.as_expected
            rows.append(_row(outcome))
            print(rows[-1], end="", flush=True)
            print(f"  detail: {outcome.detail[:300]}", flush=True)
    finally:
        for evaluator in evaluators.values():
            evaluator.close()
    controls_ok = all(c.endswith(": ok") for c in controls)
    summary = (
        f"{good} of {len(entries)} entries refused by their expected check on {gpu}; each "
        f"path's control alone: {'; '.join(controls)}.\n"
    )
    args.out.write_text(f"# Red-team corpus\n\n{summary}\n{HEADER}{''.join(rows)}")
    print(summary, end="")
    return 0 if good == len(entries) and controls_ok else 1


if __name__ == "__main__":
    sys.exit(main())
