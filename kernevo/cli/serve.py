"""``kernevo serve``: the REST service (``api.app``) under uvicorn."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from kernevo.cli.errors import CliError
from kernevo.cli.store import _store_url

# Seconds a stop (SIGTERM, Ctrl-C) waits for requests in flight before cancelling them. Without a
# bound uvicorn waits for every connection: a client that sent half a body and went quiet kept
# the service from stopping for good (a fresh-user trial, 2026-12-02). Any request the service
# answers takes well under this, except a write queued behind another process's SQLite lock,
# which the stop then cuts short.
SHUTDOWN_GRACE_S = 5


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from evolver.store import open_store

    url = _store_url(args)
    # Bind first, so a port in use or a host that is not this machine's is one line (uvicorn
    # would log it and exit 3) and leaves nothing behind: no database created or migrated.
    sock = _listen(args.host, args.port)
    try:
        # Migrate to the head before serving (the service never alters the schema); another
        # application's database is refused here, nothing written (db.migrate.schema_problem).
        open_store(url).dispose()
        config = uvicorn.Config(
            create_app(url),
            host=args.host,
            port=args.port,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
        logging.getLogger("uvicorn.error").addFilter(_cancelled_in_one_line)
        server = uvicorn.Server(config)
        scheme_host = f"[{args.host}]" if ":" in args.host else args.host
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", scheme_host, args.port
        )
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise CliError(f"the service on {args.host}:{args.port} did not start")
    return 0


def _cancelled_in_one_line(record: logging.LogRecord) -> bool:
    """A request cancelled by the stop is logged as one line, not as uvicorn's "Exception in
    ASGI application" with the ``CancelledError`` traceback (some 140 lines per request)."""
    import asyncio

    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, asyncio.CancelledError):
        record.msg, record.args, record.exc_info, record.exc_text = (
            "a request still in flight was cancelled by the stop",
            (),
            None,
            None,
        )
    return True


def _listen(host: str, port: int) -> Any:
    """A socket bound to ``host``:``port`` as uvicorn binds one (IPv6 when the host has a
    colon, ``SO_REUSEADDR``).

    Raises:
        CliError: one line: the port is in use, or the host is not an address of this machine.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock
