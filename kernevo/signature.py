"""The champion signature: one canonical payload, signed at promotion, checked by the loader.

A champion's Ed25519 signature covers everything the loader acts on: the key it is served under
(path, dtype, GPU key, shape bucket), the architecture its cubin was built for, the sha256 of the
cubin and of the source (the source is what a loader recompiles for another architecture), the
kernel names it launches, the envelope it is dispatched in, the NVRTC options and version, and
the program id that ``explain()`` names. :func:`signed_payload` is the one function that turns
those into bytes; the promotion (``evolver.champion``) signs its output and the loader verifies
it, so the two cannot drift apart.

``cryptography`` is imported inside the functions that need it, so ``import kernevo`` does not
load it (it costs about 15 ms; the loader needs it only once a champion arrives).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernevo.certificate import certificate_sha256 as certificate_digest
from kernevo.paths import ops

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from kernevo.client import ChampionKernel

# Names the payload's layout; a loader refuses a signature over any other (domain separation:
# these bytes can never be mistaken for another message signed with the same key). v2 added
# ``certificate_sha256``: a champion signed under v1 fails the check as ``bad_signature``.
PAYLOAD_FORMAT = "kernevo.champion-signature.v2"


def signed_payload(
    *,
    path: str,
    dtype: str,
    gpu: str,
    shape_bucket: str,
    program_id: int,
    arch: str,
    cubin_sha256: str,
    source_sha256: str,
    launch: Mapping[str, Any],
    envelope: Mapping[str, Any],
    compile_options: Sequence[str],
    nvrtc_version: str | None,
    certificate_sha256: str | None = None,
) -> bytes:
    """The bytes a champion's signature covers: canonical JSON (sorted keys, no spaces, UTF-8).

    ``launch`` contributes its ``kernel`` and ``config_kernel`` names; ``envelope`` its bounds,
    every key ``<param>_max`` (an integer) and ``<param>_min`` (an integer; ``None`` is left
    out) of the path's op's shape parameters (``seeds.ops.BOUND_KEY``: trsm's ``m_max``,
    ``n_max``, and ``m_min``, ``n_min`` where a path has them), and its ``verified_shapes``
    (``[[m, n], …]`` for trsm, a list of the op's parameters per shape, in the given order);
    other keys of either are not used by the loader and are not signed. trsm's payloads are
    byte for byte what they were when only ``m``/``n`` bounds were signed. Digests are
    lower-case hex; ``certificate_sha256`` is ``None`` only for a champion without a
    certificate.

    Raises:
        KeyError: ``launch`` lacks one of those keys, or ``envelope`` has no ``<param>_max``.
        TypeError, ValueError: a value of the wrong type (e.g. ``m_max`` not an integer).
    """
    document = {
        "format": PAYLOAD_FORMAT,
        "path": str(path),
        "dtype": str(dtype),
        "gpu": str(gpu),
        "shape_bucket": str(shape_bucket),
        "program_id": int(program_id),
        "arch": str(arch),
        "cubin_sha256": str(cubin_sha256).lower(),
        "source_sha256": str(source_sha256).lower(),
        "launch": {
            "kernel": str(launch["kernel"]),
            "config_kernel": str(launch["config_kernel"]),
        },
        "envelope": _signed_envelope(envelope),
        "compile_options": [str(option) for option in compile_options],
        "nvrtc_version": None if nvrtc_version is None else str(nvrtc_version),
        "certificate_sha256": (
            None if certificate_sha256 is None else str(certificate_sha256).lower()
        ),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def _signed_envelope(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope's signed part: every ``<param>_max`` (an integer), every ``<param>_min``
    that is not ``None`` (an integer; lower bounds only where a path has them, trsm_small_z64's
    m = 64, so the payloads of champions without them are byte for byte what they were), and
    the verified shapes as lists of integers.

    Raises:
        KeyError: no ``<param>_max`` (trsm: ``m_max``).
        TypeError: a bound or a shape value that is not an integer.
    """
    bounds: dict[str, int] = {}
    for key, value in envelope.items():
        match = ops.BOUND_KEY.match(key) if isinstance(key, str) else None
        if match is None or (match.group(2) == "min" and value is None):
            continue
        bounds[key] = _integer(value)
    if not any(key.endswith("_max") for key in bounds):
        raise KeyError("envelope has no <param>_max bound")
    shapes = [[_integer(value) for value in shape] for shape in envelope.get("verified_shapes", [])]
    return {**bounds, "verified_shapes": shapes}


def champion_payload(champion: ChampionKernel) -> bytes:
    """:func:`signed_payload` of a champion the loader holds, with both digests recomputed from
    the cubin and source bytes it would load (never taken from the response or cache entry)."""
    return signed_payload(
        path=champion.path,
        dtype=champion.dtype,
        gpu=champion.gpu,
        shape_bucket=champion.shape_bucket,
        program_id=champion.program_id,
        arch=champion.arch,
        cubin_sha256=hashlib.sha256(champion.cubin).hexdigest(),
        source_sha256=hashlib.sha256(champion.source.encode("utf-8")).hexdigest(),
        launch={"kernel": champion.kernel_name, "config_kernel": champion.config_kernel_name},
        envelope={**champion.envelope.bounds, "verified_shapes": champion.envelope.verified_shapes},
        compile_options=champion.compile_options,
        nvrtc_version=champion.nvrtc_version,
        certificate_sha256=certificate_digest(champion.certificate),
    )


def key_id(public_raw: bytes) -> str:
    """The id of an Ed25519 public key: sha256 (hex, 64 characters) of its 32 raw bytes."""
    return hashlib.sha256(public_raw).hexdigest()


def sign(private_key: Ed25519PrivateKey, payload: bytes) -> str:
    """The Ed25519 signature of ``payload`` by ``private_key``, base64 (88 characters)."""
    return base64.b64encode(private_key.sign(payload)).decode("ascii")


def signature_valid(public_raw: bytes, payload: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` (base64) is a valid Ed25519 signature of ``payload`` by the
    public key ``public_raw`` (32 raw bytes). Malformed base64 or lengths are simply invalid.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        signature = base64.b64decode(signature_b64, validate=True)
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, payload)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def _integer(value: Any) -> int:
    """``value`` as an int; a bool or a non-integral number is a ``TypeError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value
