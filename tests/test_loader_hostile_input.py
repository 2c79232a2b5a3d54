"""The loader's invariant against hostile input: for any service response and any disk-cache
content, ``explain()`` and the solver's call answer (kernel or cuBLAS) within the request timeout,
never raise, never hang and never read without bound.

Covers lone surrogates (valid JSON, not UTF-8), nesting past the parser's recursion limit, FIFOs,
symbolic links to ``/dev/zero`` and oversized files in the cache, and real slow or oversized
HTTP servers on 127.0.0.1; then Hypothesis feeds arbitrary bytes and JSON as the service body
and as the cache's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_loader_resolver import (
    GPU,
    TRUST,
    FakeService,
    Harness,
    champion_json,
    problem,
)

from kernevo.cache import ChampionCache
from kernevo.client import MAX_CUBIN_BYTES, MAX_RESPONSE_BYTES, ChampionKey, fetch_champion
from kernevo.resolver import Decision, Resolver

KEY = ChampionKey(GPU.key, "trsm_small", "float64", "m64n64")
SURROGATE = "\ud800"


def body_bytes(body: Any) -> bytes:
    """``body`` as the JSON a service would send: a lone surrogate becomes ``"\\ud800"``."""
    return json.dumps(body).encode()


def answers(h: Harness, m: int = 16, n: int = 8, *, within_s: float = 3.0) -> Decision:
    """Solve one problem through ``h``, checking it is answered correctly, without raising and
    within ``within_s`` (run in a thread, so that a regression fails instead of hanging)."""
    a, b, x = problem(m, n)
    result: list[Decision] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            h.solver(a, b)
            result.append(h.solver.explain(m, n))
        except BaseException as error:  # handed to the test thread below
            errors.append(error)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(within_s)
    assert not worker.is_alive(), f"the loader did not answer within {within_s} s"
    if errors:
        raise errors[0]
    np.testing.assert_allclose(b, x, rtol=1e-12)
    decision = result[0]
    assert decision.route in ("kernel", "cublas")
    assert not decision.reason.startswith("loader error"), decision.reason
    assert decision.reason.isprintable(), decision.reason
    return decision


def cached_harness(root: Path) -> Harness:
    """A harness whose disk cache holds the signed champion and whose service is down."""
    Harness(FakeService(), root).solver.explain(8, 8)
    return Harness(FakeService(down=True), root)


def entry_file(root: Path) -> Path:
    return ChampionCache(root).entry_file(KEY)


def cubin_file(root: Path) -> Path:
    record = json.loads(entry_file(root).read_text())
    return entry_file(root).parent / f"{record['payload']['cubin_sha256']}.cubin"


# --- lone surrogates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda body: {**body, "source": SURROGATE},
        lambda body: {**body, "arch": "sm_9" + SURROGATE},
        lambda body: {**body, "compile_options": ["-std=c++17", SURROGATE]},
        lambda body: {**body, "signing_key_id": SURROGATE},
        lambda body: {**body, "launch": {"kernel": SURROGATE, "config_kernel": "x"}},
        # metrics are not signed: a valid signature must not carry the surrogate into the cache
        lambda body: {**body, "metrics": {SURROGATE: 1.0}},
        lambda body: {**body, "metrics": {"note": [SURROGATE]}},
    ],
)
def test_a_lone_surrogate_from_the_service_goes_to_cublas(
    tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    h = Harness(FakeService(200, body_bytes(change(champion_json()))), tmp_path)

    decision = answers(h)

    assert decision.route == "cublas"
    assert decision.reason.startswith("bad service response: ")
    assert "not valid Unicode" in decision.reason
    assert not any(path.is_file() for path in tmp_path.rglob("*"))  # nothing was cached


# --- control characters in fields a reason quotes -----------------------------------------


@pytest.mark.parametrize("field", ["source_sha256", "cubin_sha256"])
@pytest.mark.parametrize("value", ["\x1f", "\n" * 64, "g" * 64, "ab" * 31])
def test_a_digest_that_is_not_64_hex_digits_is_a_malformed_answer(
    tmp_path: Path, field: str, value: str
) -> None:
    # CI found source_sha256 "\x1f": the digest check quoted it into an unprintable reason.
    h = Harness(FakeService(200, body_bytes({**champion_json(), field: value})), tmp_path)

    decision = answers(h)

    assert decision.route == "cublas"
    assert decision.reason.startswith("bad service response: "), decision.reason
    assert field in decision.reason
    assert not any(path.is_file() for path in tmp_path.rglob("*"))


@pytest.mark.parametrize("value", ["\x1b[2J", "key\nid", "\x00", "\u2028"])
def test_a_key_id_with_control_characters_is_refused_in_one_printable_line(
    tmp_path: Path, value: str
) -> None:
    h = Harness(
        FakeService(200, body_bytes({**champion_json(), "signing_key_id": value})), tmp_path
    )

    decision = answers(h)

    assert decision.route == "cublas"
    assert [refusal.check for refusal in decision.refusals] == ["unknown_key"]
    assert decision.reason.isprintable() and decision.refusals[0].detail.isprintable()


@pytest.mark.parametrize("field", ["source", "arch", "metrics"])
def test_a_lone_surrogate_in_the_cache_is_a_miss(tmp_path: Path, field: str) -> None:
    h = cached_harness(tmp_path)
    entry = entry_file(tmp_path)
    record = json.loads(entry.read_text())
    record["payload"][field] = SURROGATE if field != "metrics" else {"x": SURROGATE}
    entry.write_text(json.dumps(record))  # escaped as \ud800: valid JSON, not UTF-8

    decision = answers(h)

    assert decision.route == "cublas"
    assert "disk cache: corrupt entry (UnicodeEncodeError)" in decision.reason


# --- nesting past the recursion limit ---------------------------------------------------------


def test_deeply_nested_cache_entry_is_a_miss(tmp_path: Path) -> None:
    h = cached_harness(tmp_path)
    entry_file(tmp_path).write_text('{"format":1,"payload":' + "[" * 100_000)

    decision = answers(h)

    assert decision.route == "cublas"
    assert decision.reason.endswith("disk cache: corrupt entry (JSON nested too deep)")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 100_000, "bad service response: JSON nested too deep"),
        # not the service's own JSON error body: an unusable answer, not a remembered "none"
        (
            b'{"detail": ' + b"[" * 100_000,
            "bad service response: HTTP 404 that is not the service's",
        ),
        # deep enough to pass the parser, too deep to store: refused before anything recurses
        (
            body_bytes({**champion_json(), "metrics": {"m": json.loads("[" * 500 + "]" * 500)}}),
            "bad service response: metrics: nested deeper than 32 levels",
        ),
    ],
)
def test_deeply_nested_service_body_goes_to_cublas(
    tmp_path: Path, body: bytes, reason: str
) -> None:
    status = 404 if "404" in reason else 200
    decision = answers(Harness(FakeService(status, body), tmp_path))

    assert decision.route == "cublas"
    assert decision.reason.startswith(reason)


# --- files that are not what the cache writes -------------------------------------------------


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def link_to_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def oversized(limit: int) -> Callable[[Path], None]:
    def grow(path: Path) -> None:
        with path.open("r+b") as file:
            file.truncate(limit + 1)  # sparse: costs no disk

    return grow


@pytest.mark.parametrize(
    ("which", "make", "why"),
    [
        (entry_file, fifo, "is not a regular file (prw"),
        (cubin_file, fifo, "is not a regular file (prw"),
        (entry_file, link_to_dev_zero, "is a symbolic link, not followed"),
        (cubin_file, link_to_dev_zero, "is a symbolic link, not followed"),
        (entry_file, directory, "is not a regular file (d"),
        (entry_file, oversized(2**20), f"is larger than {2**20} bytes"),
        (cubin_file, oversized(MAX_CUBIN_BYTES), f"is larger than {MAX_CUBIN_BYTES} bytes"),
    ],
)
def test_a_cache_file_that_is_not_a_small_regular_file_is_a_miss(
    tmp_path: Path,
    which: Callable[[Path], Path],
    make: Callable[[Path], None],
    why: str,
) -> None:
    h = cached_harness(tmp_path)
    make(which(tmp_path))

    decision = answers(h)

    assert decision.route == "cublas"
    assert why in decision.reason


def test_a_fifo_in_place_of_the_cubin_does_not_block_storing(tmp_path: Path) -> None:
    Harness(FakeService(), tmp_path).solver.explain(8, 8)
    fifo(cubin_file(tmp_path))

    decision = answers(Harness(FakeService(), tmp_path))  # stores the fetched champion again

    assert decision.route == "kernel"
    assert cubin_file(tmp_path).is_file()


# --- slow, silent and oversized servers on 127.0.0.1 ------------------------------------------

Behaviour = Callable[[socket.socket, threading.Event], None]


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], str]]:
    """``serve(behaviour)`` starts a one-connection-at-a-time server on a free local port that
    answers each request with ``behaviour(connection, stop)``; returns its URL."""
    stop = threading.Event()
    servers: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(behaviour: Behaviour) -> str:
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.1)
        servers.append(server)

        def loop() -> None:
            while not stop.is_set():
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    continue
                with connection:
                    connection.recv(65536)  # the request; it fits one read
                    with contextlib.suppress(OSError):  # the loader hung up, as it should
                        behaviour(connection, stop)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        threads.append(thread)
        return f"http://127.0.0.1:{server.getsockname()[1]}"

    yield start
    stop.set()
    for thread in threads:
        thread.join(2)
    for server in servers:
        server.close()


HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"


def drip(data: bytes, every_s: float) -> Behaviour:
    def behaviour(connection: socket.socket, stop: threading.Event) -> None:
        for i in range(len(data)):
            if stop.wait(every_s):
                return
            connection.sendall(data[i : i + 1])

    return behaviour


def silent(connection: socket.socket, stop: threading.Event) -> None:
    stop.wait(10)


def flood(declared: bool) -> Behaviour:
    def behaviour(connection: socket.socket, stop: threading.Event) -> None:
        length = b"Content-Length: %d\r\n" % (4 * MAX_RESPONSE_BYTES) if declared else b""
        connection.sendall(b"HTTP/1.1 200 OK\r\n" + length + b"Connection: close\r\n\r\n")
        chunk = b"0" * 2**16
        while not stop.is_set():
            connection.sendall(chunk)

    return behaviour


@pytest.mark.parametrize(
    ("behaviour", "status", "detail"),
    [
        (drip(HEADERS + b"{" * 1000, 0.1), "unreachable", "no complete answer within 0.5 s"),
        (drip(HEADERS, 0.1), "unreachable", "no complete answer within 0.5 s"),
        (silent, "unreachable", "service unreachable: "),
        (flood(declared=True), "invalid", "(Content-Length"),
        (flood(declared=False), "invalid", "(stopped reading)"),
    ],
    ids=["body-drip", "header-drip", "silent", "declared-too-large", "too-large"],
)
def test_a_slow_or_oversized_server_is_a_fetch_failure_within_the_timeout(
    serve: Callable[[Behaviour], str], behaviour: Behaviour, status: str, detail: str
) -> None:
    url = serve(behaviour)
    start = time.monotonic()

    outcome = fetch_champion(url, op="trsm", key=KEY, m=16, n=8, timeout_s=0.5)

    assert time.monotonic() - start < 1.0
    assert outcome.status == status and outcome.champion is None
    assert detail in outcome.detail


def test_a_dripping_server_falls_back_to_the_cached_champion(
    tmp_path: Path, serve: Callable[[Behaviour], str]
) -> None:
    Harness(FakeService(), tmp_path).solver.explain(8, 8)
    url = serve(drip(HEADERS + b"{" * 1000, 0.1))
    resolver = Resolver(
        "trsm",
        "float64",
        gpu=GPU,
        fetch=lambda key, m, n: fetch_champion(url, op="trsm", key=key, m=m, n=n, timeout_s=0.5),
        cache=ChampionCache(tmp_path),
        trust=TRUST,
    )
    start = time.monotonic()

    decision = resolver.resolve(16, 8)

    assert time.monotonic() - start < 1.0
    assert decision.route == "kernel"
    assert decision.reason == (
        "champion program 17 from disk cache (service unreachable: no complete answer within "
        "0.5 s (KERNEVO_REQUEST_TIMEOUT_S))"
    )


# --- anything at all ------------------------------------------------------------------------

# Text that may hold lone surrogates and control characters, which JSON carries.
TEXT = st.text(st.one_of(st.characters(), st.characters(categories=["Cs", "Cc"])), max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
FIELDS = sorted(champion_json())


@st.composite
def service_bodies(draw: st.DrawFn) -> bytes:
    """Arbitrary bytes, arbitrary JSON, or the signed champion with one field replaced (metrics
    are not signed: the signature stays valid when they change)."""
    kind = draw(st.sampled_from(["bytes", "json", "field", "metrics"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "json":
        return body_bytes(draw(JSON))
    body = champion_json()
    field = draw(st.sampled_from(FIELDS)) if kind == "field" else "metrics"
    body[field] = draw(JSON)
    return body_bytes(body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status=st.sampled_from([200, 404, 500]), body=service_bodies())
def test_any_service_body_is_answered(status: int, body: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        answers(Harness(FakeService(status, body), Path(root)))


@st.composite
def cache_files(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """Contents for the entry file and the cubin file (``None``: left as stored): arbitrary
    bytes, or an entry of the right shape whose payload has one field replaced, re-hashed when
    it can be (so that it reaches the champion checks)."""
    from kernevo.cache import payload_sha256

    kind = draw(st.sampled_from(["bytes", "json", "field"]))
    cubin = draw(st.none() | st.binary(max_size=32))
    if kind == "bytes":
        return draw(st.binary(max_size=64)), cubin
    if kind == "json":
        return body_bytes({"format": 1, "payload": draw(JSON), "payload_sha256": "0" * 64}), cubin
    payload = {key: value for key, value in champion_json().items() if key != "cubin_b64"}
    payload[draw(st.sampled_from(sorted(payload)))] = draw(JSON)
    try:
        digest = payload_sha256(payload)
    except ValueError:  # a lone surrogate: no digest of it exists
        digest = "0" * 64
    return body_bytes({"format": 1, "payload": payload, "payload_sha256": digest}), cubin


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=cache_files())
def test_any_cache_content_is_answered(files: tuple[bytes | None, bytes | None]) -> None:
    entry, cubin = files
    with tempfile.TemporaryDirectory() as root:
        h = cached_harness(Path(root))
        if cubin is not None:
            cubin_file(Path(root)).write_bytes(cubin)
        if entry is not None:
            entry_file(Path(root)).write_bytes(entry)
        answers(h)
