"""The Dask backend's refusals and faults at the command line (issue 10's trial), CPU only.

Each case is an input the trial ran, with the exit status and the one line it must give:

- a scheduler lost while a job waits for workers of its key: one line, exit 1, no process left;
- ``dask worker --preload evolver.dask_preload``: a compile-only worker starts without an error
  logged and registers with its resource; a device that is not there (``--gpu 7`` of one visible
  device) closes the worker and its nanny with one line, no traceback, no restart;
- a closed port: ``connection refused`` at once from ``evolve``, ``worker`` and ``dask-worker``;
- an invalid port, and options that contradict each other: usage errors (exit 2) naming them.

The scheduler and the processes come from ``tests/test_worker_dask.py``'s helpers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import unused_port
from test_worker_dask import _process, _start_scheduler

from kernevo.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
KERNEVO = [sys.executable, "-m", "kernevo.cli"]
# A refused connection is known at once; the probe's own timeout (3 s) plus a busy machine.
REFUSED_WITHIN_S = 10.0


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float32", "--iterations", "2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*EVOLVE, "--scheduler", "tcp://127.0.0.1:99999"],
            "argument --scheduler: 'tcp://127.0.0.1:99999': the port must be an integer in "
            "1..65535, not '99999'",
        ),
        (
            ["worker", "--compile-only", "--scheduler", "tcp://127.0.0.1:0"],
            "the port must be an integer in 1..65535, not '0'",
        ),
        (
            ["dask-worker", "--compile-only", "--scheduler", "tcp://127.0.0.1:80x"],
            "the port must be an integer in 1..65535, not '80x'",
        ),
        (
            [*EVOLVE, "--compile-only", "--scheduler", "tcp://127.0.0.1:1"]
            + ["--gpu-key", "nvidia-h200"],
            "--compile-only evaluates under the key none: leave out --gpu-key",
        ),
        (
            [*EVOLVE, "--gpus", "0,1", "--gpu", "1"],
            "--gpu and --gpus exclude each other: with --gpus the job evaluates on a cluster "
            "of the devices it lists",
        ),
        (
            [*EVOLVE, "--scheduler", "tcp://127.0.0.1:1", "--gpu", "1"],
            "--gpu and --scheduler exclude each other",
        ),
        (
            ["dask-worker", "--compile-only", "--gpu-key", "nvidia-h200"]
            + ["--scheduler", "tcp://127.0.0.1:1"],
            "--compile-only evaluates under the key none: leave out --gpu-key",
        ),
    ],
)
def test_contradictions_and_invalid_ports_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    started = time.monotonic()
    assert message in _usage_error(capsys, argv)
    assert time.monotonic() - started < REFUSED_WITHIN_S


@pytest.mark.parametrize(
    "argv",
    [
        [*EVOLVE, "--compile-only"],
        ["worker", "--compile-only"],
        ["dask-worker", "--compile-only"],
    ],
)
def test_a_refused_connection_is_one_line_at_once(tmp_path: Path, argv: list[str]) -> None:
    address = f"tcp://127.0.0.1:{unused_port()}"
    database = (
        ["--database-url", f"sqlite:///{tmp_path / 'q.db'}"] if argv[0] != "dask-worker" else []
    )
    started = time.monotonic()
    done = subprocess.run(
        [*KERNEVO, *argv, "--scheduler", address, *database],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KERNEVO_WORK_DIR": str(tmp_path / "runs")},
    )
    assert time.monotonic() - started < REFUSED_WITHIN_S + 5  # the interpreter's start too
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"kernevo: Dask scheduler {address} unreachable: connection refused (no scheduler "
        "listens on that port)"
    ]


def test_a_scheduler_lost_while_waiting_for_workers_is_one_line(tmp_path: Path) -> None:
    """No worker of nvidia-h200 joins (none at all); the scheduler is SIGKILLed during the wait
    (up to 60 s): the job leaves at once with one line and 1, its process group empty."""
    scheduler, address = _start_scheduler(tmp_path)
    log = tmp_path / "evolve.log"
    argv = [
        *KERNEVO, *EVOLVE, "--scheduler", address, "--gpu-key", "nvidia-h200",
        "--lost-after-s", "2", "--database-url", f"sqlite:///{tmp_path / 'q.db'}",
        "--work-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    try:
        with _process(argv, log) as job:
            time.sleep(8)  # connected and waiting (the interpreter and Dask load first)
            assert job.poll() is None, log.read_text()
            scheduler.kill()
            assert job.wait(timeout=40) == 1, log.read_text()
            with pytest.raises(ProcessLookupError):  # nothing of the job's group left running
                os.killpg(job.pid, 0)
    finally:
        scheduler.kill()
        scheduler.wait()
    lines = log.read_text().strip().splitlines()
    assert lines[-1] == (
        f"kernevo: Dask scheduler {address} stopped answering while waiting for workers of GPU "
        "key nvidia-h200"
    ), lines
    assert not any("Traceback" in line for line in lines), lines


def _dask_worker(address: str, *preload_args: str) -> list[str]:
    """Dask's own worker command with kernevo's preload, as dask-jobqueue runs it."""
    return [
        sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
        "--no-dashboard", "--preload", "evolver.dask_preload", *preload_args,
    ]  # fmt: skip


def test_the_preload_starts_a_compile_only_worker_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import Client

    scheduler, address = _start_scheduler(tmp_path)
    log = tmp_path / "worker.log"
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__DAEMON", "False")  # _process passes it on
    try:
        with (
            _process(_dask_worker(address, "--compile-only"), log) as worker,
            Client(address, timeout=30, set_as_default=False) as client,
        ):
            deadline = time.monotonic() + 60
            resources: list[dict[str, float]] = []
            while not resources:
                assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
                workers = client.scheduler_info(n_workers=-1)["workers"]
                resources = [w["resources"] for w in workers.values()]
            assert resources == [{"gpu-none": 1.0}]
    finally:
        scheduler.kill()
        scheduler.wait()
    text = log.read_text()
    assert " - ERROR - " not in text and "Traceback" not in text, text


def test_the_preload_closes_a_worker_without_its_device_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--gpu 7`` of one visible device: the same path as a GPU that does not answer (the
    worker is refused before any device is asked, on any machine)."""
    from distributed import Client

    scheduler, address = _start_scheduler(tmp_path)
    log = tmp_path / "worker.log"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # _process passes it on
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__DAEMON", "False")
    try:
        with _process(_dask_worker(address, "--gpu", "7"), log) as worker:
            assert worker.wait(timeout=60) == 0, log.read_text()
        with Client(address, timeout=30, set_as_default=False) as client:
            assert client.scheduler_info(n_workers=-1)["workers"] == {}
    finally:
        scheduler.kill()
        scheduler.wait()
    text = log.read_text()
    line = (
        "kernevo GPU worker not started: --gpu 7: CUDA_VISIBLE_DEVICES='0' makes 1 device(s) "
        "visible; closing the worker and its nanny"
    )
    assert text.count(line) == 1, text  # one line, and one worker process: no restart
    assert "Failed to start preload" not in text, text
    # Dask's own shutdown may log "Worker process died unexpectedly" from the worker's stop-queue
    # thread (a race of its nanny's queue closing, distributed 2026.8), after the close: only
    # what comes before the worker closed is held to no traceback.
    assert "Traceback" not in text.partition("distributed.nanny - INFO - Worker closed")[0], text
