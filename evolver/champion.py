"""Champion promotion: verify the job's best program and, if it passes, make it the champion.

Verification (``evaluator.champion.verify_champion``) re-runs the full evaluation plus held-out
shapes, determinism and compute-sanitizer on the job's GPU; its report is recorded as a
``verified`` evaluation (or a ``failed`` one) of the program before ``promote_champion`` stores
the cubin. A champion of the same key that already scores at least as well is left in place:
another job (or an earlier promotion) may have found a better kernel.

Every champion gets a certificate built from its verified report
(``evaluator.certificate.build_certificate``: checks passed, seeds, shapes, GPU, versions,
timings, what was not verified), stored with it, and is signed here (Ed25519,
``kernevo.signature.signed_payload``: the key, arch, cubin and source digests, launch, envelope,
compile options, NVRTC version and the certificate's sha256) with
``KERNEVO_SIGNING_KEY``, or by default the local key pair in ``KERNEVO_KEY_DIR`` (created on the
first promotion, private key mode 0600), so that a loader trusting that key runs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

# The store enforces the threshold (db.repository.promote_champion); the runner imports it from
# here to skip verifying a program that could not be promoted anyway.
from db.repository import MIN_CHAMPION_SCORE as MIN_CHAMPION_SCORE
from evaluator.score import beats_rival
from evolver.settings import EvolverSettings
from kernevo.certificate import certificate_sha256
from kernevo.keys import SigningKey, generate_key_pair, load_signing_key
from kernevo.signature import sign, signed_payload
from seeds.spec import PathSpec

if TYPE_CHECKING:
    from db.models import Champion
    from evaluator.champion import ChampionReport


# A champion verification ending so may have been cut by the job's own stop, not by the kernel.
INTERRUPTIBLE = frozenset({"fault", "timeout"})


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
    signing_key: SigningKey | None = None,
    verify: Callable[[str, bytes | None], ChampionReport] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> PromotionOutcome:
    """Verify program ``uid`` (already recorded) on GPU ``gpu_index`` and promote it to champion
    of (path, dtype, ``gpu_key``, shape bucket) when it is fully verified and beats the current
    champion's score (combined score: geometric-mean speedup over the path's baseline), signed with
    ``signing_key`` (default: :func:`configured_signing_key`, read before verification starts).
    ``verify(source, rival_cubin)`` replaces the local ``evaluator.champion.verify_champion``
    (a job on a Dask cluster verifies on a worker of its GPU key: ``evolver.cluster``).
    ``stopping()`` true after a verification that ended in a ``fault`` or ``timeout``: the
    job's stop cut it (SIGTERM or Ctrl-C reach the GPU worker, which is in the job's process
    group: RESULTS section 21), so nothing is recorded against the program and the outcome
    says so; the resumed job promotes its best again.

    Raises:
        db.errors.RepositoryError: the program is not recorded, or the store refuses the
            promotion (e.g. the cubin differs from the verified one).
        kernevo.keys.KeyFileError: the configured signing key cannot be used.
        OSError: the local key pair cannot be created.
    """
    from db import repository
    from db.models import Program
    from db.repository import sha256_hex
    from db.session import session_scope
    from evaluator.certificate import build_certificate
    from evaluator.champion import verify_champion
    from evaluator.compile import compile_cubin

    with session_scope(engine) as s:
        current = repository.best_champion(
            s, path=spec.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=spec.shape_bucket
        )
        same = current is not None and current.program.source_sha256 == sha256_hex(source)
        rival_cubin = bytes(current.cubin) if current is not None else None
    if same:
        # The same kernel under another program id (a migrant copy, or a child whose diff
        # undid itself): verifying it again would only re-measure the champion.
        return PromotionOutcome(False, f"champion kept: program {uid} is the champion's kernel")

    key = signing_key if signing_key is not None else configured_signing_key()
    # The bucket's shapes are verified and timed (a path of one bucket has only its own).
    at_bucket = {"bucket": spec.shape_bucket} if len(spec.bucket_names) > 1 else {}
    if verify is not None:
        report = verify(source, rival_cubin)
    else:
        report = verify_champion(source, spec.path_id, dtype, gpu_index, rival_cubin, **at_bucket)
    if report.status in INTERRUPTIBLE and stopping is not None and stopping():
        return PromotionOutcome(
            False,
            f"champion verification cut by the job's stop ({report.status}); not recorded, "
            "the resumed job verifies its best again",
        )
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
    if rival_cubin is not None and not beats_rival(report.rival_timings):
        # Timed against the champion in the same rounds, the candidate is not faster beyond
        # this evaluation's noise floor: scores from two evaluations differ by more than that
        # (issue 6: one kernel read 2.26 and 2.43 us at 16x16 in two evaluations).
        shapes = ", ".join(
            f"{'x'.join(str(v) for v in t.shape or (t.m, t.n))} {t.speedup:.3f}x "
            f"[{t.speedup_low:.3f}, {t.speedup_high:.3f}], "
            f"floor {t.noise_floor:.3f}"
            for t in report.rival_timings
        )
        return PromotionOutcome(
            False,
            "champion kept: beats_champion: not faster than the champion beyond noise when "
            f"timed in the same rounds ({shapes or 'no comparison measured'})",
            report.combined_score,
        )

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
        launch = {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name}
        envelope = {**spec.envelope, "verified_shapes": data.get("verified_shapes", [])}
        try:
            certificate = build_certificate(report, spec).to_json_dict()
        except ValueError as exc:  # pydantic's ValidationError too: our bug, never a champion
            reason = str(exc).splitlines()[0]
            return PromotionOutcome(False, f"champion kept: certificate: {reason}")
        payload = signed_payload(
            path=spec.path_id,
            dtype=dtype,
            gpu=gpu_key,
            shape_bucket=spec.shape_bucket,
            program_id=program_id,
            arch=arch,
            cubin_sha256=sha256_hex(compiled.cubin),
            source_sha256=sha256_hex(source),
            launch=launch,
            envelope=envelope,
            compile_options=options,
            nvrtc_version=report.compile.nvrtc_version if report.compile else None,
            certificate_sha256=certificate_sha256(certificate),
        )
        try:
            champion = repository.promote_champion(
                s,
                evaluation_id=evaluation_id,
                path=spec.path_id,
                dtype=dtype,
                gpu_key=gpu_key,
                shape_bucket=spec.shape_bucket,
                cubin=compiled.cubin,
                launch=launch,
                envelope=envelope,
                compile_options=options,
                signature=sign(key.private_key, payload),
                signing_key_id=key.key_id,
                certificate=certificate,
            )
        except repository.PromotionRefusedError as refusal:
            # The store decides under the champion row's lock: another job's promotion may have
            # won since the check above. Nothing was written; the job keeps evolving.
            return PromotionOutcome(
                False, f"champion kept: {refusal.check}: {refusal}", report.combined_score
            )
        if stored_payload(champion) != payload:
            # Our own bug (signer and store disagree on a field): raising rolls the promotion
            # back rather than publish a champion every loader would refuse.
            raise RuntimeError("the signed payload differs from the stored champion")
    return PromotionOutcome(
        True, f"promoted to champion with score {report.combined_score:.3f}", report.combined_score
    )


def configured_signing_key(settings: EvolverSettings | None = None) -> SigningKey:
    """The key promotions sign with under ``settings`` (default: read from the environment):
    ``signing_key`` (``KERNEVO_SIGNING_KEY``) when set, else the local key pair in ``key_dir``
    (``KERNEVO_KEY_DIR``, default ``~/.config/kernevo/keys``), created when missing.

    Raises:
        kernevo.keys.KeyFileError: ``KERNEVO_SIGNING_KEY`` names a file that is not a usable
            Ed25519 PEM private key.
        OSError: the local key folder cannot be created or written.
    """
    settings = settings if settings is not None else EvolverSettings()
    if settings.signing_key is not None:
        return load_signing_key(settings.signing_key)
    return generate_key_pair(settings.key_dir)


def stored_payload(champion: Champion) -> bytes:
    """:func:`kernevo.signature.signed_payload` of a stored champion row (what a loader will
    recompute from the service's response)."""
    fields: dict[str, Any] = {
        "path": champion.path,
        "dtype": champion.dtype,
        "gpu": champion.gpu_key,
        "shape_bucket": champion.shape_bucket,
        "program_id": champion.program_id,
        "arch": champion.arch,
        "cubin_sha256": champion.cubin_sha256,
        "source_sha256": champion.program.source_sha256,
        "launch": champion.launch,
        "envelope": champion.envelope,
        "compile_options": champion.compile_options,
        "nvrtc_version": champion.nvrtc_version,
        "certificate_sha256": certificate_sha256(champion.certificate),
    }
    return signed_payload(**fields)
