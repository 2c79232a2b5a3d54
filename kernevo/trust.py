"""Whether the loader may run a champion: digest, signature, lock file — and why not.

Every champion the loader is about to use, fetched or read from its disk cache, passes
:meth:`TrustPolicy.check`, in this order:

1. ``cubin_digest_mismatch``: the cubin's sha256, recomputed from the bytes that would be loaded,
   differs from the one the champion carries.
2. ``no_trusted_key``: the loader trusts no key at all (nothing configured, no local key).
3. ``unsigned``: the champion has no signature.
4. ``unknown_key``: signed by a key the loader does not trust.
5. ``bad_signature``: the signature does not verify over the champion's payload (anything
   signed was changed: cubin, launch, envelope, options, certificate, key …, or the signature
   swapped; or it was signed under an older payload format than
   ``kernevo.signature.PAYLOAD_FORMAT``).
6. ``no_certificate``: the signed champion carries no certificate, or one that does not parse
   as ``kernevo.certificate.Certificate`` (v1 or v2; the schema refuses a certificate that says
   nothing or contradicts itself, and one holding NaN or Infinity, which no JSON hashes):
   nothing says what its verification covered. (A certificate changed after signing fails
   step 5: the signature covers its sha256.)
7. ``certificate_mismatch``: the certificate parses but is about another kernel than the one it
   is served with: another GPU, architecture or NVRTC version, or shapes outside the
   champion's envelope (:func:`certificate_mismatch`). A check of its own, not
   ``no_certificate``: a signer signed both, so it is a signer's bug or a certificate moved
   between champions, and an operator should see which.
8. ``not_in_lock_file`` / ``lock_digest_differs``: with a lock file, the key is not pinned or
   pinned to another cubin or payload.

``require_same_toolkit`` (``KERNEVO_REQUIRE_SAME_TOOLKIT``) is not a check of the champion but
of where it runs: the resolver then routes to cuBLAS, rather than serving with the difference
stated, a champion whose certificate's NVIDIA driver, CUDA driver API or NVRTC version differs
from the device's or is unknown on either side.

The NVRTC option allow-list (``compile_option``) is checked by the resolver before a recompile
(:func:`kernevo.kernel.refused_option`). A refusal is a :class:`Refusal` value; the resolver
falls back to cuBLAS and ``explain()`` shows its ``detail``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from kernevo.certificate import Certificate
from kernevo.client import ChampionKernel, op_of, op_params
from kernevo.keys import KeyFileError, local_public_key, trusted_keys
from kernevo.lockfile import LockFile, LockFileError, entry_for
from kernevo.settings import LoaderSettings
from kernevo.signature import champion_payload, key_id, signature_valid
from kernevo.text import printable

RefusalCheck = Literal[
    "cubin_digest_mismatch",
    "no_trusted_key",
    "unsigned",
    "unknown_key",
    "bad_signature",
    "no_certificate",
    "certificate_mismatch",
    "not_in_lock_file",
    "lock_digest_differs",
    "compile_option",
]


@dataclass(frozen=True)
class Refusal:
    """Why a champion was not used: ``check`` names the failed check, ``detail`` is the line
    ``explain()`` shows (e.g. ``"signed by unknown key 3f9a…"``), ``source`` where the champion
    came from (``"service"`` or ``"disk cache"``; set by the resolver), or ``"settings"`` for
    the ``no_trusted_key`` refusal the resolver makes up front, before any champion is met."""

    check: RefusalCheck
    detail: str
    source: str = ""

    def __post_init__(self) -> None:
        # The detail quotes the champion's own fields (key id, digests): kept one printable line.
        object.__setattr__(self, "detail", printable(self.detail, limit=len(self.detail)))


@dataclass(frozen=True)
class TrustPolicy:
    """The keys (id → 32 raw public bytes) a loader trusts, its optional lock file, and whether
    a champion verified under another driver or toolkit is served (stated in ``explain()``) or
    routed to cuBLAS (``require_same_toolkit``).

    ``no_key_hint`` completes the ``no_trusted_key`` refusal (how to configure a key), and
    ``local_key_ignored`` (``KERNEVO_TRUST_LOCAL_KEY=false``) adds that the local key was not
    looked at (:meth:`no_trusted_key_detail`).
    """

    keys: Mapping[str, bytes]
    lock: LockFile | None = None
    no_key_hint: str = field(default="", repr=False)
    require_same_toolkit: bool = False
    local_key_ignored: bool = False

    def no_trusted_key_detail(self) -> str:
        """The ``no_trusted_key`` refusal's line: ``no trusted key configured (<hint>)``, then
        what ``KERNEVO_TRUSTED_KEYS`` takes and, when ``KERNEVO_TRUST_LOCAL_KEY=false``, that
        the local key was ignored."""
        hint = f" ({self.no_key_hint})" if self.no_key_hint else ""
        detail = (
            f"no trusted key configured{hint}; KERNEVO_TRUSTED_KEYS takes the public keys that "
            "sign your champions, comma-separated, each base64 of its 32 raw bytes or a PEM "
            "file path (`kernevo evolve` signs with <KERNEVO_KEY_DIR>/champion-signing.pub)"
        )
        if self.local_key_ignored:
            detail += "; the local key is not trusted while KERNEVO_TRUST_LOCAL_KEY=false"
        return detail

    def check(self, champion: ChampionKernel) -> Refusal | None:
        """``None`` when ``champion`` may run, else the first check it fails (see module doc)."""
        digest = hashlib.sha256(champion.cubin).hexdigest()
        if digest != champion.cubin_sha256.lower():
            return Refusal(
                "cubin_digest_mismatch",
                f"cubin digest mismatch: cubin hashes to {digest[:12]}…, "
                f"champion says {champion.cubin_sha256[:12]}…",
            )
        if not self.keys:
            return Refusal("no_trusted_key", self.no_trusted_key_detail())
        if not champion.signature or not champion.signing_key_id:
            return Refusal("unsigned", "unsigned")
        public_raw = self.keys.get(champion.signing_key_id.lower())
        if public_raw is None:
            return Refusal("unknown_key", f"signed by unknown key {champion.signing_key_id}")
        try:
            payload = champion_payload(champion)
        except ValueError:  # the certificate holds NaN or Infinity: no JSON hashes it
            return Refusal("no_certificate", "no certificate: unreadable (NaN or Infinity)")
        if not signature_valid(public_raw, payload, champion.signature):
            return Refusal("bad_signature", f"bad signature (key {champion.signing_key_id})")
        if champion.certificate is None:
            return Refusal("no_certificate", "no certificate")
        try:
            certificate = Certificate.model_validate(champion.certificate)
        except ValidationError as error:
            return Refusal("no_certificate", f"no certificate: unreadable ({_first(error)})")
        if mismatch := certificate_mismatch(certificate, champion):
            return Refusal("certificate_mismatch", f"certificate of another kernel: {mismatch}")
        if self.lock is not None:
            return self._check_lock(self.lock, champion)
        return None

    @staticmethod
    def _check_lock(lock: LockFile, champion: ChampionKernel) -> Refusal | None:
        pinned = lock.pinned(champion)
        if pinned is None:
            return Refusal("not_in_lock_file", f"not in lock file {lock.path}")
        got = entry_for(champion)
        for name in ("cubin_sha256", "payload_sha256"):
            want, have = getattr(pinned, name), getattr(got, name)
            if want != have:
                return Refusal(
                    "lock_digest_differs",
                    f"lock file digest differs: {name} {have[:12]}…, {lock.path} pins {want[:12]}…",
                )
        return None


def _first(error: ValidationError) -> str:
    """``"N problems, first at <field>: <message>"`` for a refusal's detail."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "top level"
    return f"{error.error_count()} problems, first at {where}: {first['msg'][:160]}"


def certificate_mismatch(certificate: Certificate, champion: ChampionKernel) -> str:
    """What ``certificate`` says that contradicts the ``champion`` it is served with, as one
    clause (``""`` when nothing does): another op than the champion's path's (a v1 or v2
    certificate is trsm's) or, in v3, other shape parameters than the op's; another GPU
    (``gpu_key`` against the champion's ``gpu``), another architecture, another NVRTC version
    (when both record one), or a shape outside the champion's envelope (the loader dispatches
    only inside it, and verification ran only there). A certificate has no dtype field; its
    ``not_verified`` names the dtype in prose.
    """
    clauses = []
    path_op = op_of(champion.path)
    if path_op is not None and certificate.op_name != path_op:
        clauses.append(f"op {certificate.op_name}, champion of a path of {path_op}")
    params = op_params(champion.path, champion.envelope)
    if certificate.shape_params is not None and tuple(certificate.shape_params) != params:
        names = ", ".join(certificate.shape_params)
        clauses.append(f"shape parameters ({names}), the op's ({', '.join(params)})")
    if certificate.gpu_key != champion.gpu:
        clauses.append(f"GPU {certificate.gpu_key}, champion for {champion.gpu}")
    if certificate.arch != champion.arch:
        clauses.append(f"arch {certificate.arch}, champion built for {champion.arch}")
    verified, built = certificate.nvrtc_version, (champion.nvrtc_version or "").strip()
    if verified and built and verified != built:
        clauses.append(f"NVRTC {verified}, champion compiled by {built}")
    envelope = champion.envelope
    if outside := sorted({s for s in certificate.shapes() if not envelope.contains(s, params)}):
        clauses.append(f"shapes {outside[:3]} outside the envelope {envelope.describe(params)}")
    return "; ".join(clauses)


def policy_from_settings(
    settings: LoaderSettings, arguments: Mapping[str, Any] | None = None
) -> TrustPolicy:
    """The policy ``settings`` describe: the keys of ``KERNEVO_TRUSTED_KEYS``; the local public
    key in ``KERNEVO_KEY_DIR`` when ``KERNEVO_TRUST_LOCAL_KEY`` (default on) and the key is
    private to this user (see :func:`kernevo.keys.local_public_key`); ``KERNEVO_LOCK_FILE``;
    ``KERNEVO_REQUIRE_SAME_TOOLKIT``. ``arguments`` are :func:`kernevo.load`'s keyword
    arguments the settings were built with: an error names the argument (``trusted_keys``,
    ``lock_file``) given there, else the variable, and quotes the value as written.

    Raises:
        kernevo.keys.KeyFileError: a configured trusted key cannot be read or parsed (one line:
            ``KERNEVO_TRUSTED_KEYS: trusted key <entry>: …``).
        kernevo.lockfile.LockFileError: the configured lock file cannot be read or parsed (one
            line: ``KERNEVO_LOCK_FILE: lock file <value>: …``).
    """
    arguments = {} if arguments is None else arguments
    try:
        keys = trusted_keys(settings.trusted_keys)
    except KeyFileError as error:
        raise KeyFileError(f"{_source('trusted_keys', arguments)}: {error}") from None
    hint = "set KERNEVO_TRUSTED_KEYS"
    if settings.trust_local_key:
        local, note = local_public_key(settings.key_dir)
        if local is not None:
            keys[key_id(local)] = local
        else:
            hint += f"; {note}"
    lock = None
    if settings.lock_file is not None:
        given = _given("lock_file", arguments, settings.lock_file)
        try:
            lock = LockFile.load(settings.lock_file, given=given)
        except LockFileError as error:
            raise LockFileError(f"{_source('lock_file', arguments)}: {error}") from None
    return TrustPolicy(
        keys=keys,
        lock=lock,
        no_key_hint=hint,
        require_same_toolkit=settings.require_same_toolkit,
        local_key_ignored=not settings.trust_local_key,
    )


def _source(field: str, arguments: Mapping[str, Any]) -> str:
    """Where ``field`` came from: the argument of ``kernevo.load``, else its variable."""
    return f"{field} argument" if field in arguments else f"KERNEVO_{field.upper()}"


def _given(field: str, arguments: Mapping[str, Any], parsed: Path) -> str:
    """``field``'s value as written: the argument, else the variable (any case, as
    pydantic-settings reads it), else ``parsed`` (the settings' own)."""
    if field in arguments:
        return str(arguments[field])
    name = f"KERNEVO_{field.upper()}"
    for variable, value in os.environ.items():
        if variable.upper() == name:
            return value
    return str(parsed)
