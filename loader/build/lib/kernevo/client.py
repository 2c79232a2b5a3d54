"""Fetching the champion kernel for a problem from the service (``GET /v1/kernels/best``).

Every way the fetch can go wrong (service down, 404, a body that does not parse, a cubin whose
sha256 differs from the one announced) comes back as a :class:`FetchOutcome`, never as an
exception: the resolver turns each into a reason and falls back. The announced sha256 only
catches corruption (it comes with the cubin); whether the champion may run at all is decided by
its signature (``kernevo.trust``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

FetchStatus = Literal["ok", "not_found", "unreachable", "invalid", "sha256_mismatch"]


class _EnvelopeModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    m_max: int
    n_max: int
    verified_shapes: list[tuple[int, int]] = []


class _LaunchModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kernel: str
    config_kernel: str


class _ChampionModel(BaseModel):
    """The champion's metadata as the service sends it, less ``cubin_b64``.

    Extra fields are ignored so that a newer service does not break an older loader.
    """

    model_config = ConfigDict(extra="ignore")

    path: str
    dtype: str
    gpu: str
    shape_bucket: str
    program_id: int
    arch: str
    nvrtc_version: str | None = None
    cubin_sha256: str
    source: str
    source_sha256: str
    compile_options: list[str]
    launch: _LaunchModel
    envelope: _EnvelopeModel
    metrics: dict[str, Any] = {}
    promoted_at: str | None = None
    signature: str | None = None
    signing_key_id: str | None = None

    @field_validator("nvrtc_version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return ".".join(str(part) for part in value)
        if isinstance(value, int | float):
            return str(value)
        return value

    @field_validator("promoted_at", mode="before")
    @classmethod
    def _time_text(cls, value: object) -> object:
        return value if value is None or isinstance(value, str) else str(value)


class Sha256MismatchError(ValueError):
    """A cubin or source whose sha256 differs from the one that came with it."""


@dataclass(frozen=True)
class Envelope:
    """The shapes a champion was verified on: it is dispatched only for m ≤ m_max, n ≤ n_max."""

    m_max: int
    n_max: int
    verified_shapes: tuple[tuple[int, int], ...] = ()

    def contains(self, m: int, n: int) -> bool:
        """Whether the problem (m, n) lies inside the envelope (1 ≤ m ≤ m_max, 1 ≤ n ≤ n_max)."""
        return 1 <= m <= self.m_max and 1 <= n <= self.n_max


@dataclass(frozen=True)
class ChampionKernel:
    """A verified kernel for one (path, dtype, GPU, shape bucket), with its cubin.

    ``cubin`` is the compiled module for ``arch`` (e.g. ``"sm_90"``); its sha256 equals
    ``cubin_sha256`` (checked by :func:`fetch_champion` and by the disk cache on every read).
    ``launch`` names the solve kernel and the launch-configuration kernel in the module.
    ``signature`` (base64 Ed25519 over ``kernevo.signature.champion_payload``) and
    ``signing_key_id`` (sha256 of the signer's raw public key) are ``None`` when unsigned.
    """

    path: str
    dtype: str
    gpu: str
    shape_bucket: str
    program_id: int
    arch: str
    nvrtc_version: str | None
    cubin_sha256: str
    source_sha256: str
    compile_options: tuple[str, ...]
    kernel_name: str
    config_kernel_name: str
    envelope: Envelope
    promoted_at: str | None
    metrics: Mapping[str, Any] = field(default_factory=dict, repr=False)
    source: str = field(default="", repr=False)
    cubin: bytes = field(default=b"", repr=False)
    signature: str | None = field(default=None, repr=False)
    signing_key_id: str | None = None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], cubin: bytes) -> ChampionKernel:
        """Build from the service's JSON fields (``cubin_b64`` is ignored) and the cubin bytes.

        Raises:
            pydantic.ValidationError: a field is missing or mistyped (a ``ValueError``).
            Sha256MismatchError: ``cubin`` or the source does not hash to ``cubin_sha256`` or
                ``source_sha256`` (a ``ValueError``).
        """
        meta = _ChampionModel.model_validate(payload)
        cubin_digest = hashlib.sha256(cubin).hexdigest()
        if cubin_digest != meta.cubin_sha256.lower():
            raise Sha256MismatchError(
                f"cubin digest mismatch: cubin hashes to {cubin_digest[:12]}…, "
                f"expected {meta.cubin_sha256[:12]}…"
            )
        source_digest = hashlib.sha256(meta.source.encode()).hexdigest()
        if source_digest != meta.source_sha256.lower():
            raise Sha256MismatchError(
                f"source digest mismatch: source hashes to {source_digest[:12]}…, "
                f"expected {meta.source_sha256[:12]}…"
            )
        return cls(
            path=meta.path,
            dtype=meta.dtype,
            gpu=meta.gpu,
            shape_bucket=meta.shape_bucket,
            program_id=meta.program_id,
            arch=meta.arch,
            nvrtc_version=meta.nvrtc_version,
            cubin_sha256=cubin_digest,
            source_sha256=source_digest,
            compile_options=tuple(meta.compile_options),
            kernel_name=meta.launch.kernel,
            config_kernel_name=meta.launch.config_kernel,
            envelope=Envelope(
                m_max=meta.envelope.m_max,
                n_max=meta.envelope.n_max,
                verified_shapes=tuple(meta.envelope.verified_shapes),
            ),
            promoted_at=meta.promoted_at,
            metrics=dict(meta.metrics),
            source=meta.source,
            cubin=cubin,
            signature=meta.signature,
            signing_key_id=meta.signing_key_id,
        )

    def to_payload(self) -> dict[str, Any]:
        """The JSON-ready metadata in the service's field names, without the cubin."""
        return {
            "path": self.path,
            "dtype": self.dtype,
            "gpu": self.gpu,
            "shape_bucket": self.shape_bucket,
            "program_id": self.program_id,
            "arch": self.arch,
            "nvrtc_version": self.nvrtc_version,
            "cubin_sha256": self.cubin_sha256,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "compile_options": list(self.compile_options),
            "launch": {"kernel": self.kernel_name, "config_kernel": self.config_kernel_name},
            "envelope": {
                "m_max": self.envelope.m_max,
                "n_max": self.envelope.n_max,
                "verified_shapes": [list(shape) for shape in self.envelope.verified_shapes],
            },
            "metrics": dict(self.metrics),
            "promoted_at": self.promoted_at,
            "signature": self.signature,
            "signing_key_id": self.signing_key_id,
        }


@dataclass(frozen=True)
class ChampionKey:
    """What a champion is stored under: GPU key, path, dtype and shape bucket."""

    gpu: str
    path: str
    dtype: str
    shape_bucket: str


@dataclass(frozen=True)
class FetchOutcome:
    """The result of one fetch: a verified champion (``status == "ok"``) or why there is none."""

    status: FetchStatus
    detail: str
    champion: ChampionKernel | None = None


def parse_champion(body: object, key: ChampionKey) -> FetchOutcome:
    """Check a ``/v1/kernels/best`` JSON body against ``key`` and the announced sha256.

    Returns a :class:`FetchOutcome` with ``status`` ``ok``, ``invalid`` (not an object, missing
    or mistyped fields, bad base64, a champion for another key) or ``sha256_mismatch``.
    """
    if not isinstance(body, dict):
        return FetchOutcome("invalid", f"bad service response: not an object: {body!r:.80}")
    encoded = body.get("cubin_b64")
    if not isinstance(encoded, str):
        return FetchOutcome("invalid", "bad service response: no cubin_b64")
    try:
        cubin = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        return FetchOutcome("invalid", f"bad service response: cubin_b64 is not base64 ({error})")
    try:
        champion = ChampionKernel.from_payload(body, cubin)
    except Sha256MismatchError as error:
        return FetchOutcome("sha256_mismatch", str(error))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return FetchOutcome("invalid", f"bad service response: {where}: {first['msg']}")
    got = ChampionKey(champion.gpu, champion.path, champion.dtype, champion.shape_bucket)
    if got != key:
        return FetchOutcome(
            "invalid",
            f"bad service response: champion for {got.gpu}/{got.path}/{got.dtype}/"
            f"{got.shape_bucket}, asked for {key.gpu}/{key.path}/{key.dtype}/{key.shape_bucket}",
        )
    return FetchOutcome("ok", f"champion program {champion.program_id} from service", champion)


def fetch_champion(
    api_url: str,
    *,
    op: str,
    key: ChampionKey,
    m: int,
    n: int,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> FetchOutcome:
    """Ask the service for the best verified kernel for ``op`` at (m, n) on ``key.gpu``.

    Sends ``GET {api_url}/v1/kernels/best?op=&dtype=&gpu=&m=&n=`` with a ``timeout_s`` second
    timeout (connect, read and write each). ``transport`` replaces the network (tests pass an
    ``httpx.MockTransport``). Never raises for a network or service failure: returns
    ``unreachable`` (transport error), ``not_found`` (404), ``invalid`` (another status, a body
    that is not JSON or not a champion for ``key``) or ``sha256_mismatch``.
    """
    params = {"op": op, "dtype": key.dtype, "gpu": key.gpu, "m": m, "n": n}
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            response = client.get(f"{api_url.rstrip('/')}/v1/kernels/best", params=params)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return FetchOutcome("unreachable", f"service unreachable: {type(error).__name__}: {error}")
    if response.status_code == 404:
        return FetchOutcome("not_found", f"no champion on service (404: {_detail(response)})")
    if response.status_code != 200:
        return FetchOutcome(
            "invalid", f"bad service response: HTTP {response.status_code}: {_detail(response)}"
        )
    try:
        body = response.json()
    except ValueError as error:
        return FetchOutcome("invalid", f"bad service response: not JSON ({error})")
    return parse_champion(body, key)


def _detail(response: httpx.Response) -> str:
    """The ``detail`` of a FastAPI error body, else the start of the body text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:200]
    return str(body)[:200]


def service_fetcher(
    api_url: str,
    *,
    op: str,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> Callable[[ChampionKey, int, int], FetchOutcome]:
    """A fetch function ``(key, m, n) -> FetchOutcome`` bound to one service and op."""

    def fetch(key: ChampionKey, m: int, n: int) -> FetchOutcome:
        return fetch_champion(
            api_url, op=op, key=key, m=m, n=n, timeout_s=timeout_s, transport=transport
        )

    return fetch
