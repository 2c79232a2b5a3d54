"""A job's process stopped while its OpenEvolve pool's feeder is blocked (for
``tests/test_stop_robustness.py``).

One pool worker busy for a minute, a second iteration of 1 MiB (a large database snapshot) in
the call queue's pipe, and a forked holder of the pipe's read end (as a grandchild of a pool
worker would be) that never reads: the feeder thread blocks on the full pipe for good. Then it
prints the holder's pid and waits for SIGTERM, on which it stops the pool as OpenEvolve's
``stop`` does, inside ``evolver.openevolve_host.pool_ends_without_waiting`` unless ``bare`` is
the first argument, and exits 143 through the interpreter's ordinary exit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext

import openevolve.process_parallel as parallel

from evolver import openevolve_host as host

PAYLOAD_BYTES = 1 << 20  # far above a pipe's 64 KiB buffer


def _busy(payload: bytes) -> int:
    time.sleep(60)
    return len(payload)


def main() -> None:
    executor = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("fork"))
    for _ in range(3):
        executor.submit(_busy, b"x" * PAYLOAD_BYTES)
    time.sleep(1.0)  # the worker took the first; the feeder is writing the second
    holder = os.fork()
    if holder == 0:
        time.sleep(60)
        os._exit(0)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    print(holder, flush=True)
    stopped.wait(60)
    with nullcontext() if sys.argv[1:] == ["bare"] else host.pool_ends_without_waiting():
        parallel._terminate_process_pool(executor)
    sys.exit(143)


if __name__ == "__main__":
    main()
