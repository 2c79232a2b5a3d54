"""A job's process stopped while a pipe of its OpenEvolve pool is jammed (for
``tests/test_stop_robustness.py``).

One pool worker busy for a minute, then one of two faults, named by the first argument:

- ``feeder``: a second iteration of 1 MiB (a large database snapshot) in the call queue's
  pipe, and a forked holder of the pipe's read end (as a grandchild of a pool worker would be)
  that never reads: the feeder thread blocks on the full pipe for good.
- ``half-result``: the length header of a 1 MiB result in the result queue's pipe and no body,
  as a worker killed between the two writes of a large result leaves it: the executor's manager
  thread blocks reading the body.

Then it prints the pid to kill afterwards (the holder; 0 for ``half-result``) and waits
for SIGTERM, on which it stops the pool as OpenEvolve's ``stop`` does, inside
``evolver.openevolve_host.pool_ends_without_waiting`` unless ``bare`` is the second argument,
and exits 143 through the interpreter's ordinary exit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import struct
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


def _jam_feeder(executor: ProcessPoolExecutor) -> int:
    """The call queue's feeder blocked writing; the pid of the forked reader that never reads."""
    for _ in range(2):
        executor.submit(_busy, b"x" * PAYLOAD_BYTES)
    time.sleep(1.0)  # the worker took the first; the feeder is writing the second
    holder = os.fork()
    if holder == 0:
        time.sleep(60)
        os._exit(0)
    return holder


def _jam_result_reader(executor: ProcessPoolExecutor) -> int:
    """The manager thread blocked reading a result's body; 0: no process to kill later."""
    time.sleep(1.0)  # the worker took its iteration
    writer = executor._result_queue._writer  # type: ignore[attr-defined]
    os.write(writer.fileno(), struct.pack("!i", PAYLOAD_BYTES))  # Connection's length header
    return 0


def main() -> None:
    fault, bare = sys.argv[1], sys.argv[2:] == ["bare"]
    executor = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("fork"))
    executor.submit(_busy, b"")
    to_kill = _jam_feeder(executor) if fault == "feeder" else _jam_result_reader(executor)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    print(to_kill, flush=True)
    stopped.wait(60)
    with nullcontext() if bare else host.pool_ends_without_waiting():
        parallel._terminate_process_pool(executor)
    sys.exit(143)


if __name__ == "__main__":
    main()
