"""Fetching the champion kernel for a problem from the service (``GET /v1/kernels/best``).

Every way the fetch can go wrong (service down, slow or silent past the timeout, 404, a body
that is too large, does not parse or nests too deep, text that is not valid Unicode, a cubin
whose sha256 differs from the one announced) comes back as a :class:`FetchOutcome`, never as an
exception and never later than the timeout: the resolver turns each into a reason and falls
back. The announced sha256 only catches corruption (it comes with the cubin); whether the
champion may run at all is decided by its signature (``kernevo.trust``).

httpx is imported by the first fetch, not with this module: a loader served from its disk cache
(``KERNEVO_CACHE_MAX_AGE_S``) needs the champion's classes here but never the HTTP client,
whose import (its CLI's click and rich included) measured ~110 ms on the CI machine
(``python -X importtime``). Its TLS context is built once per process (:func:`tls_context`), not
by every ``httpx.Client``: loading certifi's CA bundle cost ~60 ms per client here, and a plain
``http://`` service reached without a proxy never negotiates TLS, so it loads none.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernevo import http_get
from kernevo.paths import ops
from kernevo.paths import ops_spec as _op_spec
from kernevo.text import printable

if TYPE_CHECKING:
    # ssl too is imported by the first fetch (with httpx): with urllib.request, ~18 ms of
    # import a loader served from its disk cache never needs (python -X importtime).
    import ssl

    import httpx

FetchStatus = Literal["ok", "not_found", "unreachable", "invalid", "sha256_mismatch"]

MAX_CUBIN_BYTES = 16 * 2**20
"""The largest cubin the loader accepts, from the service or its disk cache. The module of the
largest path (a solve kernel and its launch-configuration kernel for one arch) is well under
this; the cap only stops a hostile response or cache file from filling memory."""

MAX_METADATA_BYTES = 2**20
"""The largest champion metadata (a disk-cache entry file; the service body less its cubin).
Its bulk is the source, which the evaluator caps at 64 KiB (``evaluator.screen.MAX_SOURCE_BYTES``;
at most 6 bytes each once JSON-escaped), then a few KiB of fields and metrics."""

MAX_RESPONSE_BYTES = (MAX_CUBIN_BYTES + 2) // 3 * 4 + MAX_METADATA_BYTES
"""The largest ``/v1/kernels/best`` body read: the base64 of a cubin of the cap, plus metadata."""

MAX_NESTING = 32
"""The deepest nesting of lists and objects a champion's metadata may have (the service's has 2;
``metrics`` is free-form): deeper is refused before anything recurses into it."""


MAX_BOUNDS = 32
"""The most ``<param>_min``/``<param>_max`` bounds an envelope may carry (an op has a few
parameters: trsm 2, solve_tri 4)."""

MAX_SHAPE_VALUES = 8
"""The most values a shape may have (solve_tri's have 4)."""


class _EnvelopeModel(BaseModel):
    """An envelope as the service sends it: its ``<param>_min``/``<param>_max`` keys
    (``seeds.ops.BOUND_KEY``) gathered into ``bounds`` (other keys dropped), at least one
    ``<param>_max``, and the verified shapes."""

    model_config = ConfigDict(extra="ignore")

    bounds: Annotated[dict[str, int | None], Field(max_length=MAX_BOUNDS)]
    verified_shapes: list[Annotated[list[int], Field(max_length=MAX_SHAPE_VALUES)]] = []

    @model_validator(mode="before")
    @classmethod
    def _gather_bounds(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        bounds = {
            key: bound
            for key, bound in value.items()
            if isinstance(key, str) and ops.BOUND_KEY.match(key)
        }
        return {"bounds": bounds, "verified_shapes": value.get("verified_shapes", [])}

    @model_validator(mode="after")
    def _bounded(self) -> _EnvelopeModel:
        if not any(key.endswith("_max") and v is not None for key, v in self.bounds.items()):
            raise ValueError("an envelope needs an integer <param>_max (trsm: m_max, n_max)")
        if any(key.endswith("_max") and v is None for key, v in self.bounds.items()):
            raise ValueError("an envelope's <param>_max must be an integer, not null")
        return self


class _LaunchModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kernel: str
    config_kernel: str


# A SHA-256 digest as hex: anything else is a malformed answer, refused before it is compared.
_SHA256_HEX = r"^[0-9a-fA-F]{64}$"


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
    cubin_sha256: str = Field(pattern=_SHA256_HEX)
    source: str
    source_sha256: str = Field(pattern=_SHA256_HEX)
    compile_options: list[str]
    launch: _LaunchModel
    envelope: _EnvelopeModel
    metrics: dict[str, Any] = {}
    promoted_at: str | None = None
    signature: str | None = None
    signing_key_id: str | None = None
    certificate: dict[str, Any] | None = None

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


class UnusableMetadataError(ValueError):
    """Champion metadata that cannot be hashed, signed or stored as it is: a text that is not
    valid Unicode (a lone surrogate such as ``"\\ud800"``, which JSON can carry but UTF-8
    cannot), nesting deeper than :data:`MAX_NESTING`, or a value that is not JSON."""


@dataclass(frozen=True)
class Envelope:
    """The shapes a champion was verified on: it is dispatched only for shapes whose every
    value lies between its parameter's ``<param>_min`` (1 when absent or ``None``) and
    ``<param>_max`` in ``bounds`` (trsm: ``{"m_max": 64, "n_max": 64}``, with ``m_min`` where
    the path has one). ``verified_shapes``: the shapes verification ran, each in the op's
    parameter order."""

    bounds: Mapping[str, int | None]
    verified_shapes: tuple[tuple[int, ...], ...] = ()

    def contains(self, shape: Sequence[int], params: Sequence[str]) -> bool:
        """Whether ``shape`` (values of ``params``, the op's parameters in order) lies inside
        the envelope; a parameter without a ``<param>_max`` admits nothing."""
        return _op_spec.serves(self.bounds, params, shape)

    def describe(self, params: Sequence[str] | None = None) -> str:
        """:func:`describe_envelope` of this envelope."""
        return describe_envelope(self.bounds, params)

    def to_json(self) -> dict[str, Any]:
        """The envelope as the service sends it: every bound that is set, and the verified
        shapes as lists."""
        return {
            **{key: bound for key, bound in self.bounds.items() if bound is not None},
            "verified_shapes": [list(shape) for shape in self.verified_shapes],
        }


def describe_envelope(envelope: Mapping[str, Any], params: Sequence[str] | None = None) -> str:
    """An envelope (``<param>_max`` and optional ``<param>_min`` per shape parameter, as a
    path's spec, the service and a certificate state it) in words: ``m <= 64, n <= 64``, or
    ``64 <= m <= 64, n <= 64`` with a lower bound; a bound missing or None is left out.
    ``params``: the op's parameters in order; ``None``: those the envelope's keys name, in the
    order they first appear (``seeds.ops.spec.describe_envelope``)."""
    return str(_op_spec.describe_envelope(envelope, params))


def op_of(path: str) -> str | None:
    """The op of ``path`` (``seeds.registry``), ``None`` for a path the registry does not
    hold."""
    from kernevo.paths import registry

    spec = registry.PATHS.get(path)
    return None if spec is None else str(spec.op)


def op_params(path: str, envelope: Envelope | None = None) -> tuple[str, ...]:
    """The shape parameter names of the op of ``path`` (``seeds.registry``), in order; for a
    path the registry does not hold, those ``envelope`` bounds in the order its keys first
    appear (empty without one)."""
    from kernevo.paths import registry

    spec = registry.PATHS.get(path)
    if spec is not None:
        return tuple(spec.params)
    return () if envelope is None else tuple(_op_spec.envelope_params(envelope.bounds))


@dataclass(frozen=True)
class ChampionKernel:
    """A verified kernel for one (path, dtype, GPU, shape bucket), with its cubin.

    ``cubin`` is the compiled module for ``arch`` (e.g. ``"sm_90"``); its sha256 equals
    ``cubin_sha256`` (checked by :func:`fetch_champion` and by the disk cache on every read).
    ``launch`` names the solve kernel and the launch-configuration kernel in the module.
    ``signature`` (base64 Ed25519 over ``kernevo.signature.champion_payload``) and
    ``signing_key_id`` (sha256 of the signer's raw public key) are ``None`` when unsigned.
    ``certificate`` is the JSON document served (``kernevo.certificate``), kept as it came: the
    signature covers its sha256.
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
    certificate: Mapping[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], cubin: bytes) -> ChampionKernel:
        """Build from the service's JSON fields (``cubin_b64`` is ignored) and the cubin bytes.

        Raises:
            UnusableMetadataError: a field the loader uses holds a lone surrogate, nests too
                deep or is not JSON (a ``ValueError``).
            pydantic.ValidationError: a field is missing or mistyped (a ``ValueError``).
            Sha256MismatchError: ``cubin`` or the source does not hash to ``cubin_sha256`` or
                ``source_sha256`` (a ``ValueError``).
        """
        problem = metadata_problem(payload)
        if problem is not None:
            raise UnusableMetadataError(problem)
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
                bounds=dict(meta.envelope.bounds),
                verified_shapes=tuple(tuple(shape) for shape in meta.envelope.verified_shapes),
            ),
            promoted_at=meta.promoted_at,
            metrics=dict(meta.metrics),
            source=meta.source,
            cubin=cubin,
            signature=meta.signature,
            signing_key_id=meta.signing_key_id,
            certificate=meta.certificate,
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
            "envelope": self.envelope.to_json(),
            "metrics": dict(self.metrics),
            "promoted_at": self.promoted_at,
            "signature": self.signature,
            "signing_key_id": self.signing_key_id,
            "certificate": None if self.certificate is None else dict(self.certificate),
        }


def metadata_problem(payload: Mapping[str, Any]) -> str | None:
    """Why the fields of ``payload`` a champion is built from cannot be used as they are, or
    ``None``: a string (key or value) that does not encode to UTF-8, lists or objects nested
    deeper than :data:`MAX_NESTING`, or a value of a type JSON does not have.

    Other fields (``cubin_b64``, anything a newer service adds) are not looked at: the first is
    checked as base64, the others are dropped. The walk keeps one iterator per open container,
    so no nesting makes it recurse and no length makes it copy.
    """
    for name in _ChampionModel.model_fields:
        if name not in payload:
            continue
        stack: list[Iterator[object]] = [iter((payload[name],))]
        while stack:
            value = next(stack[-1], _END)
            if value is _END:
                stack.pop()
            elif isinstance(value, str):
                if not _utf8(value):
                    return f"{name}: text that is not valid Unicode (a lone surrogate)"
            elif isinstance(value, dict | list):
                if len(stack) > MAX_NESTING:
                    return f"{name}: nested deeper than {MAX_NESTING} levels"
                if isinstance(value, dict):
                    if not all(isinstance(key, str) and _utf8(key) for key in value):
                        return f"{name}: a key that is not valid Unicode text"
                    stack.append(iter(value.values()))
                else:
                    stack.append(iter(value))
            elif not (value is None or isinstance(value, bool | int | float)):
                return f"{name}: {type(value).__name__} is not a JSON value"
    return None


_END = object()


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (it does unless it holds a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    or mistyped fields, bad base64, a cubin over :data:`MAX_CUBIN_BYTES`, metadata that is not
    usable as is (:class:`UnusableMetadataError`), a champion for another key) or
    ``sha256_mismatch``. Never raises, whatever ``body`` holds.
    """
    if not isinstance(body, dict):
        return FetchOutcome(
            "invalid", f"bad service response: not an object ({type(body).__name__})"
        )
    encoded = body.get("cubin_b64")
    if not isinstance(encoded, str):
        return FetchOutcome("invalid", "bad service response: no cubin_b64")
    try:
        cubin = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        return FetchOutcome("invalid", f"bad service response: cubin_b64 is not base64 ({error})")
    if len(cubin) > MAX_CUBIN_BYTES:
        return FetchOutcome(
            "invalid",
            f"bad service response: a cubin of {len(cubin)} bytes (cap {MAX_CUBIN_BYTES})",
        )
    try:
        champion = ChampionKernel.from_payload(body, cubin)
    except Sha256MismatchError as error:
        return FetchOutcome("sha256_mismatch", str(error))
    except UnusableMetadataError as error:
        return FetchOutcome("invalid", f"bad service response: {error}")
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return FetchOutcome(
            "invalid", f"bad service response: {printable(where, 80)}: {printable(first['msg'])}"
        )
    got = ChampionKey(champion.gpu, champion.path, champion.dtype, champion.shape_bucket)
    if got != key:
        named = printable(f"{got.gpu}/{got.path}/{got.dtype}/{got.shape_bucket}")
        return FetchOutcome(
            "invalid",
            f"bad service response: champion for {named}, "
            f"asked for {key.gpu}/{key.path}/{key.dtype}/{key.shape_bucket}",
        )
    return FetchOutcome("ok", f"champion program {champion.program_id} from service", champion)


def fetch_champion(
    api_url: str,
    *,
    op: str,
    key: ChampionKey,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
    token: str | None = None,
    **shape: int,
) -> FetchOutcome:
    """Ask the service for the verified kernel of ``key.path`` for ``op`` at the shape given by
    the op's parameters as keywords (trsm: ``m=, n=``; solve_tri: ``n=, k=, b2=, b3=``) on
    ``key.gpu``.

    Sends ``GET {api_url}/v1/kernels/best?op=&dtype=&gpu=&<shape parameters>&path=`` (trsm:
    ``…&m=&n=&path=``) through :func:`kernevo.http_get.request` and returns within
    ``timeout_s`` seconds (``KERNEVO_REQUEST_TIMEOUT_S``) for the whole fetch: connecting,
    sending, the headers and the body (that module says how a trickling server is cut off).
    The body is streamed and refused past :data:`MAX_RESPONSE_BYTES`. ``transport`` replaces
    the network (tests pass an ``httpx.MockTransport``). ``token``: sent as ``Authorization:
    Bearer <token>`` (a service with ``KERNEVO_API_KERNELS_REQUIRE_READ=true`` answers 401
    without a read token).

    Never raises for a network or service failure: returns ``unreachable`` (transport error, or
    no complete answer within ``timeout_s``), ``not_found`` (a 404 with the service's own JSON
    error body, :func:`service_error`), ``invalid`` (another 404 or status, a body over the
    cap, not JSON, nested too deep, or not a champion for ``key``) or ``sha256_mismatch``.
    """
    # Built before the deadline starts (http_get.request imports httpx before it too): neither
    # is the service's delay.
    verify = tls_context(needs_ca=_may_use_tls(api_url))
    url = f"{api_url.rstrip('/')}/v1/kernels/best"
    # ``path``: this path's champion, not the service's pick among the paths serving (m, n):
    # the resolver compares the paths itself, among the champions it trusts.
    params = {"op": op, "dtype": key.dtype, "gpu": key.gpu, **shape, "path": key.path}
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        answer = http_get.request(
            "GET",
            url,
            timeout_s=timeout_s,
            max_bytes=MAX_RESPONSE_BYTES,
            params=params,
            headers=headers,
            transport=transport,
            verify=verify,
        )
    except http_get.TooLateError:
        return FetchOutcome("unreachable", _late(timeout_s))
    except http_get.TooLargeError as error:
        return FetchOutcome("invalid", _too_large(error.how))
    except http_get.EncodedBodyError as error:
        return FetchOutcome("invalid", f"bad service response: {error}")
    except http_get.UnreachableError as error:
        return FetchOutcome("unreachable", f"service unreachable: {printable(str(error))}")
    except Exception as error:
        # A bug, or a value httpx refuses: still a failed fetch the resolver falls back from,
        # never an exception in the caller's solve.
        detail = printable(f"{type(error).__name__}: {error}")
        return FetchOutcome("invalid", f"fetch failed: {detail}")
    return _outcome(answer, key)


def _http() -> ModuleType:
    """httpx, imported on first use (module doc), with httpcore (``kernevo.http_get._http``)."""
    return http_get._http()  # type: ignore[no-any-return]


@functools.cache
def tls_context(*, needs_ca: bool) -> ssl.SSLContext:
    """The TLS context of every fetch of this process, built on first use.

    ``needs_ca``: httpx's own default (``httpx.create_ssl_context()``: certifi's CA bundle, or
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as read at that first use). Otherwise a client context
    that trusts no CA (``ssl.PROTOCOL_TLS_CLIENT``: hostname checked, certificate required), for
    a connection that is never meant to negotiate TLS: should one try, it fails closed.
    """
    import ssl

    if needs_ca:
        return _http().create_ssl_context()  # type: ignore[no-any-return]
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _may_use_tls(api_url: str) -> bool:
    """Whether a fetch from ``api_url`` may negotiate TLS: an ``https://`` URL, or any proxy
    configured in the environment (``HTTP_PROXY`` and the like, which httpx follows and which
    may be an ``https://`` proxy)."""
    import urllib.request

    return api_url.lower().startswith("https:") or bool(urllib.request.getproxies())


# How the service's "no champion" 404 begins (api.routes.kernels._no_champion): the one 404 the
# loader remembers. Starlette's "Not Found" (a kernevo service under another base URL) and any
# other application's error are not it.
_NO_CHAMPION = "no champion yet for path"


def service_error(body: bytes) -> str | None:
    """The ``detail`` text of the service's own "no champion" answer (``{"detail": "no champion
    yet for …"}``, as ``api.routes.kernels._no_champion`` words it for a key without a
    champion), or ``None`` for any other body: empty, not JSON, another shape, Starlette's
    ``"Not Found"`` for an unknown URL, or another application's JSON error ("Item not found"
    must not be remembered for an hour as "no champion")."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("detail"), str):
        return None
    detail = document["detail"]
    return detail if detail.startswith(_NO_CHAMPION) else None


def _outcome(answer: http_get.Answer, key: ChampionKey) -> FetchOutcome:
    """The :class:`FetchOutcome` of a complete answer (``kernevo.http_get.Answer``). A 404 is
    "no champion" (remembered by the loader's disk cache) only with the service's own error
    body (:func:`service_error`): another server's 404, or a kernevo service under another base
    URL, is an unusable answer, asked again next time."""
    body = answer.body
    if answer.status_code == 404:
        if service_error(body) is not None:
            return FetchOutcome("not_found", f"no champion on service (404: {_detail(body)})")
        # Say what came instead (an empty body: nothing, not a dangling ": ").
        came = f"; it sent {_detail(body)!r}" if body.strip() else "; its body was empty"
        return FetchOutcome(
            "invalid",
            "bad service response: HTTP 404 that is not the service's 'no champion' answer (is "
            f"KERNEVO_API_URL a kernevo service?){came}",
        )
    if answer.status_code != 200:
        return FetchOutcome(
            "invalid", f"bad service response: HTTP {answer.status_code}: {_detail(body)}"
        )
    try:
        document = json.loads(body)
    except ValueError as error:
        return FetchOutcome("invalid", f"bad service response: not JSON ({error})")
    except RecursionError:
        return FetchOutcome("invalid", "bad service response: JSON nested too deep")
    return parse_champion(document, key)


def _too_large(how: str) -> str:
    return f"bad service response: body over the {MAX_RESPONSE_BYTES}-byte cap ({how})"


def _late(timeout_s: float) -> str:
    return (
        f"service unreachable: no complete answer within {timeout_s:g} s "
        "(KERNEVO_REQUEST_TIMEOUT_S)"
    )


def _detail(body: bytes) -> str:
    """The ``detail`` of a FastAPI error body, else the start of the body text; one printable
    line of at most 200 characters, whatever the body holds."""
    try:
        document = json.loads(body)
        if isinstance(document, dict) and "detail" in document:
            document = document["detail"]
        text = document if isinstance(document, str) else json.dumps(document)[:200]
    except (ValueError, RecursionError):
        text = body[:200].decode("utf-8", "replace")
    return printable(text)


def service_fetcher(
    api_url: str,
    *,
    op: str,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
    token: str | None = None,
) -> Callable[..., FetchOutcome]:
    """A fetch function ``(key, *shape) -> FetchOutcome`` bound to one service and op, the
    shape's values in the op's parameter order (trsm: ``fetch(key, m, n)``); ``token`` as
    :func:`fetch_champion` sends it.

    Raises:
        seeds.ops.UnknownOpError: ``op`` is not an op of the registry.
    """
    names = ops.get_op(op).param_names

    def fetch(key: ChampionKey, *shape: int) -> FetchOutcome:
        return fetch_champion(
            api_url,
            op=op,
            key=key,
            timeout_s=timeout_s,
            transport=transport,
            token=token,
            **dict(zip(names, shape, strict=True)),
        )

    return fetch
