"""The API on a database, served by uvicorn in a thread, for tests that load champions through
the service as ``kernevo.load`` does (``tests/test_ops_registered.py``, ``_gpu.py``)."""

from __future__ import annotations

import socket
import threading
import time


class Service:
    """``api.app.create_app(database_url)`` on a free local port until :meth:`stop`."""

    def __init__(self, database_url: str) -> None:
        import uvicorn

        from api.app import create_app

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(database_url), log_level="warning"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "uvicorn did not stop"
