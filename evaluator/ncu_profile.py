"""A few Nsight Compute metrics for candidates that pass, fed back to the LLM.

Not named ``profile``: OpenEvolve puts this folder on ``sys.path`` of the job process (it loads
``evaluator/openevolve_entry.py`` by file), where a ``profile.py`` here would shadow the
standard library's, which ``cProfile`` imports (``KERNEVO_PROFILE_DIR``, evaluator.worker).

Profiling costs seconds per candidate, so only a candidate that becomes the job's best is
profiled (``evaluator.openevolve_entry``, after ``evaluator.new_best.gate_new_best``). Runs only
where `ncu` exists and can read the counters; otherwise the report notes why it has no profile.
"""

from __future__ import annotations

import csv
import io
import math
import subprocess
from typing import TYPE_CHECKING

from evaluator.tools import find_tool, run_candidate_under
from evaluator.worker import gpu_lock
from seeds.registry import get_path

if TYPE_CHECKING:
    from evaluator.pipeline import Evaluator
    from evaluator.report import EvaluationReport

# Achieved occupancy, memory throughput, and the warp-stall reasons that dominate small solves.
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
# Seconds Nsight Compute may take to profile one launch (replays the kernel per metric pass).
PROFILE_TIMEOUT_S = 120.0

METRICS = {
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    _STALL.format("barrier"): "stall_barrier",
    _STALL.format("long_scoreboard"): "stall_long_scoreboard",
    _STALL.format("short_scoreboard"): "stall_short_scoreboard",
    _STALL.format("wait"): "stall_wait",
    _STALL.format("math_pipe_throttle"): "stall_math_throttle",
    "gpu__time_duration.sum": "kernel_duration_ns",
}


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Metric name → value from ``ncu --csv --page raw`` output (first profiled launch)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        return {}
    header, values = rows[0], rows[2]  # rows[1] holds the units
    out: dict[str, float] = {}
    for name, value in zip(header, values, strict=False):
        if name in METRICS:
            try:
                out[METRICS[name]] = float(value.replace(",", ""))
            except ValueError:
                continue
    return out


def profile(
    cubin: bytes, path_id: str, dtype: str, shape: tuple[int, ...], gpu_index: int
) -> tuple[dict[str, float], str]:
    """ncu metrics of one launch at ``shape``; returns (metrics, note)."""
    ncu = find_tool("ncu")
    if ncu is None:
        return {}, "ncu not found: no hardware counters"
    argv = [
        ncu, "--clock-control", "none", "--csv", "--page", "raw",
        "--kernel-name", get_path(path_id).kernel_name, "--launch-count", "1",
        "--metrics", ",".join(METRICS),
    ]  # fmt: skip
    try:
        with gpu_lock(gpu_index):
            done = run_candidate_under(
                argv, cubin, path_id, dtype, shape, gpu_index, PROFILE_TIMEOUT_S
            )
    except subprocess.TimeoutExpired:
        return {}, "ncu timed out"
    metrics = parse_ncu_csv(done.stdout)
    if not metrics:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {}, f"ncu gave no metrics: {tail[0][:200]}"
    return metrics, ""


def attach_profile(evaluator: Evaluator, cubin: bytes, report: EvaluationReport) -> None:
    """Attach ncu metrics of ``cubin`` at the largest timed shape to ``report`` (or a note
    saying why there are none); nothing in compile-only mode."""
    if evaluator.gpu_index is None:
        return
    spec = evaluator.spec
    shape = max(spec.timed_shapes, key=math.prod)
    metrics, note = profile(cubin, spec.path_id, evaluator.dtype, shape, evaluator.gpu_index)
    report.profile = metrics
    if note:
        report.notes.append(note)
