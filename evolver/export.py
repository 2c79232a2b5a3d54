"""``kernevo export``: a champion kernel as files, for a deployment or a review without the service.

For every path serving the operation in the dtype (``seeds.registry``, in registry order; one
path with ``--path``), the champion of each of its shape buckets on the GPU (``db.repository.
best_champion``, the row ``GET /v1/kernels/best`` answers from) is written to
``<out>/<path>/`` (``<out>/<path>/<bucket>/`` for a path of several buckets, ``trsm_blocked``):

- ``kernel.cu``: the program's source (its sha256 is ``source_sha256`` in ``champion.json``);
- ``kernel.cubin``: the verified cubin, checked against its recorded sha256 before it is written;
- ``champion.json``: the key, program and evaluation ids, arch, NVRTC version and options,
  launch, envelope, metrics, both digests, promotion time;
- ``signature.json``: the Ed25519 signature and signing key id (``null`` when unsigned), with
  ``signed_payload.json``, the exact bytes signed (``evolver.champion.stored_payload``), so
  ``kernevo.signature.signature_valid(public_key, payload, signature)`` checks it offline;
- ``certificate.json``: what verification ran and did not cover (``null`` for a champion
  promoted before certificates);
- ``report.json``: the evaluator's full report of the verified evaluation.

Files are written to a temporary name and renamed into place, so a reader never sees half a
file; an earlier export of the same path is overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from evolver.errors import EvolverError


class ExportError(EvolverError, RuntimeError):
    """Nothing to export (no champion), a cubin that does not match its digest, or an output
    folder that cannot be written; one line."""


@dataclass(frozen=True)
class Exported:
    """One champion written: its path, shape bucket, program id and the folder holding it."""

    path: str
    shape_bucket: str
    program_id: int
    folder: Path


def _write(file: Path, data: bytes) -> None:
    partial = file.with_name(f".{file.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, file)


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode()


def _serving_paths(op: str, dtype: str, path: str | None) -> list[tuple[str, str]]:
    """(path id, shape bucket) of every path implementing ``op`` in ``dtype``, one per bucket
    of a path with several (``PathSpec.bucket_names``), registry order.

    Raises:
        ExportError: ``path`` does not implement ``op`` in ``dtype``, or no path does.
    """
    from seeds.registry import PATHS, get_path

    if path is not None:
        spec = get_path(path)
        if spec.op != op or dtype not in spec.dtypes:
            raise ExportError(f"path {path} does not implement {op} in {dtype}")
        return [(spec.path_id, bucket) for bucket in spec.bucket_names]
    found = [
        (spec.path_id, bucket)
        for spec in PATHS.values()
        if spec.op == op and dtype in spec.dtypes
        for bucket in spec.bucket_names
    ]
    if not found:
        raise ExportError(f"no path implements {op} in {dtype}")
    return found


def export_champions(
    s: Session, *, op: str, dtype: str, gpu_key: str, out_dir: Path, path: str | None = None
) -> list[Exported]:
    """Write the champion of every path serving ``op`` in ``dtype`` on ``gpu_key`` (only
    ``path``'s when given) under ``out_dir`` (see the module notes); returns what was written.

    Raises:
        ExportError: no champion for any of those paths on the GPU; a stored cubin whose
            sha256 differs from the recorded one; ``out_dir`` cannot be created or written.
        UnknownPathError: ``path`` is not a known path.
    """
    from db.repository import best_champion
    from evolver.champion import stored_payload
    from kernevo.signature import PAYLOAD_FORMAT

    serving = _serving_paths(op, dtype, path)
    champions = [
        (path_id, bucket, champion)
        for path_id, bucket in serving
        if (
            champion := best_champion(
                s, path=path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=bucket
            )
        )
        is not None
    ]
    if not champions:
        paths = ", ".join(dict.fromkeys(path_id for path_id, _ in serving))
        raise ExportError(f"no champion for {op} {dtype} on {gpu_key} (paths {paths})")
    written = []
    for path_id, bucket, champion in champions:
        cubin = bytes(champion.cubin)
        if hashlib.sha256(cubin).hexdigest() != champion.cubin_sha256:
            raise ExportError(
                f"champion of {path_id} {dtype} on {gpu_key}: the stored cubin's sha256 differs "
                f"from the recorded {champion.cubin_sha256[:12]}…; not exported"
            )
        program = champion.program
        several = sum(serving_path == path_id for serving_path, _ in serving) > 1
        folder = out_dir / path_id / bucket if several else out_dir / path_id
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _write(folder / "kernel.cu", program.source.encode())
            _write(folder / "kernel.cubin", cubin)
            _write(folder / "signed_payload.json", stored_payload(champion))
            _write(
                folder / "signature.json",
                _json(
                    {
                        "format": PAYLOAD_FORMAT,
                        "signature": champion.signature,
                        "signing_key_id": champion.signing_key_id,
                        "payload_file": "signed_payload.json",
                    }
                ),
            )
            _write(folder / "certificate.json", _json(champion.certificate))
            _write(folder / "report.json", _json(champion.evaluation.report))
            _write(
                folder / "champion.json",
                _json(
                    {
                        "op": op,
                        "path": path_id,
                        "dtype": dtype,
                        "gpu": gpu_key,
                        "shape_bucket": bucket,
                        "program_id": champion.program_id,
                        "program_uid": program.uid,
                        "evaluation_id": champion.evaluation_id,
                        "arch": champion.arch,
                        "nvrtc_version": champion.nvrtc_version,
                        "compile_options": champion.compile_options,
                        "launch": champion.launch,
                        "envelope": champion.envelope,
                        "metrics": champion.metrics,
                        "cubin_sha256": champion.cubin_sha256,
                        "source_sha256": program.source_sha256,
                        "promoted_at": champion.promoted_at.isoformat(),
                    }
                ),
            )
        except OSError as error:
            raise ExportError(f"cannot write {folder}: {error.strerror or error}") from None
        written.append(Exported(path_id, bucket, champion.program_id, folder))
    return written
