"""Champion promotion: verify the job's best program and, if it passes, make it the champion.

Verification (``evaluator.champion.verify_champion``) re-runs the full evaluation plus held-out
shapes, determinism and compute-sanitizer on the job's GPU; its report is recorded as a
``verified`` evaluation (or a ``failed`` one) of the program before ``promote_champion`` stores
the cubin. A champion of the same key that already scores at least as well is left in place:
another job (or an earlier promotion) may have found a better kernel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Engine, select

from seeds.spec import PathSpec

# A champion must beat the vendor library: the loader serves it instead of cuBLAS inside its
# envelope, so a kernel with geometric-mean speedup at or below 1 would only slow callers down.
MIN_CHAMPION_SCORE = 1.0


@dataclass(frozen=True)
class PromotionOutcome:
    """What one promotion attempt did; ``reason`` is a line for the terminal."""

    promoted: bool
    reason: str
    score: float = 0.0


def promote_best(
    engine: Engine,
    *,
    spec: PathSpec,
    dtype: str,
    gpu_index: int,
    gpu_key: str,
    uid: str,
    source: str,
) -> PromotionOutcome:
    """Verify program ``uid`` (already recorded) on GPU ``gpu_index`` and promote it to champion
    of (path, dtype, ``gpu_key``, shape bucket) when it is fully verified and beats the current
    champion's score (combined score: geometric-mean speedup over cuBLAS).

    Raises:
        db.errors.RepositoryError: the program is not recorded, or the store refuses the
            promotion (e.g. the cubin differs from the verified one).
    """
    from db import repository
    from db.models import Program
    from db.repository import sha256_hex
    from db.session import session_scope
    from evaluator.champion import verify_champion
    from evaluator.compile import compile_cubin

    with session_scope(engine) as s:
        current = repository.best_champion(
            s, path=spec.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=spec.shape_bucket
        )
        same = current is not None and current.program.source_sha256 == sha256_hex(source)
    if same:
        # The same kernel under another program id (a migrant copy, or a child whose diff
        # undid itself): verifying it again would only re-measure the champion.
        return PromotionOutcome(False, f"champion kept: program {uid} is the champion's kernel")

    report = verify_champion(source, spec.path_id, dtype, gpu_index)
    data = json.loads(report.to_json())
    ok = report.status == "ok"
    gpu = report.gpu
    arch = gpu.arch if gpu is not None else (report.compile.arch if report.compile else "")
    with session_scope(engine) as s:
        program_id = s.scalar(select(Program.id).where(Program.uid == uid))
        if program_id is None:
            raise repository.NotFoundError(f"program {uid!r} is not recorded")
        evaluation = repository.record_evaluation(
            s,
            program_id=program_id,
            report_json=data,
            gpu_key=gpu.key if gpu is not None else gpu_key,
            gpu_name=gpu.name if gpu is not None else gpu_key,
            arch=arch,
            driver_version=gpu.driver_version if gpu is not None else None,
            nvrtc_version=report.compile.nvrtc_version if report.compile else None,
            score=report.combined_score if ok else 0.0,
            state="verified" if ok else "failed",
            error_kind=None if ok else report.status,
        )
        evaluation_id = evaluation.id
    if not ok:
        detail = report.failure.describe() if report.failure else report.status
        return PromotionOutcome(False, f"champion verification failed: {report.status}: {detail}")

    with session_scope(engine) as s:
        current = repository.best_champion(
            s, path=spec.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=spec.shape_bucket
        )
        current_score = float(current.metrics.get("score", 0.0)) if current is not None else 0.0
        if current is not None and current_score >= report.combined_score:
            return PromotionOutcome(
                False,
                f"champion kept: program {current.program_id} scores {current_score:.3f} "
                f">= {report.combined_score:.3f}",
                report.combined_score,
            )
        options = spec.compile_options(dtype, arch)
        compiled = compile_cubin(source, options, arch)
        if not compiled.ok:
            return PromotionOutcome(False, "champion recompile failed: " + compiled.log[:200])
        repository.promote_champion(
            s,
            evaluation_id=evaluation_id,
            path=spec.path_id,
            dtype=dtype,
            gpu_key=gpu_key,
            shape_bucket=spec.shape_bucket,
            cubin=compiled.cubin,
            launch={"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
            envelope={**spec.envelope, "verified_shapes": data.get("verified_shapes", [])},
            compile_options=options,
        )
    return PromotionOutcome(
        True, f"promoted to champion with score {report.combined_score:.3f}", report.combined_score
    )
