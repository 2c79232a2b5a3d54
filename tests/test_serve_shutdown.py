"""``kernevo serve`` stops on SIGTERM or Ctrl-C even with a request half sent, in one line.

A fresh-user trial (2026-12-02): a client that sent the headers and part of a body, then went
quiet, kept the service from stopping for good (uvicorn waits for every connection), and a second
Ctrl-C printed some 140 lines of ``CancelledError`` tracebacks. The stop now waits
``kernevo.cli.serve.SHUTDOWN_GRACE_S`` for requests in flight, then cancels them, logged once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import unused_port

from kernevo.cli.serve import SHUTDOWN_GRACE_S

HALF_SENT = (
    b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_half_sent_body_does_not_keep_the_service_from_stopping(
    tmp_path: Path, signum: signal.Signals
) -> None:
    port = unused_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernevo.cli",
            "serve",
            "--port",
            str(port),
            "--database-url",
            f"sqlite:///{tmp_path / 'k.db'}",
        ],  # fmt: skip
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = socket.socket()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and serve.poll() is None, "the service did not start"
            time.sleep(0.2)
        client.connect(("127.0.0.1", port))
        client.sendall(HALF_SENT)
        time.sleep(0.5)  # the request is in the app, reading its body
        start = time.monotonic()
        serve.send_signal(signum)
        _, err = serve.communicate(timeout=SHUTDOWN_GRACE_S + 20)
        seconds = time.monotonic() - start
    finally:
        client.close()
        if serve.poll() is None:
            serve.kill()
            serve.communicate()
    assert serve.returncode == 128 + signum, err[-3000:]
    assert seconds < SHUTDOWN_GRACE_S + 10
    assert "Traceback" not in err, err[-3000:]
    assert "a request still in flight was cancelled by the stop" in err
