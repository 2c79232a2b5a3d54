"""The GPU lock (``evaluator.gpu_lock``): a private folder, timing alone, untimed work shared,
a waiting timer ahead of new shared holders, and nothing left held by a killed holder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # indices here are physical
    return runtime


def test_the_lock_folder_is_private_under_the_runtime_dir(runtime_dir: Path) -> None:
    from evaluator.gpu_lock import gpu_lock, gpu_lock_path

    path = gpu_lock_path(3)
    assert path == runtime_dir / "kernevo" / "locks" / "gpu3.rwlock"
    assert path.parent.stat().st_mode & 0o777 == 0o700
    with gpu_lock(3):
        pass
    with gpu_lock(3, shared=True):
        pass


def test_a_shared_runtime_dir_is_not_used(
    runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluator.gpu_lock import lock_dir

    runtime_dir.chmod(0o777)  # anyone could create files there: fall back to the cache
    assert lock_dir() == tmp_path / "cache" / "kernevo" / "locks"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert lock_dir() == tmp_path / "cache" / "kernevo" / "locks"


def test_an_opened_up_lock_folder_is_closed_again(runtime_dir: Path) -> None:
    from evaluator.gpu_lock import lock_dir

    folder = lock_dir()
    folder.chmod(0o777)
    assert lock_dir() == folder and folder.stat().st_mode & 0o777 == 0o700


def test_a_symlinked_lock_folder_is_refused(runtime_dir: Path, tmp_path: Path) -> None:
    from evaluator.gpu_lock import LockDirError, lock_dir

    (runtime_dir / "kernevo").mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runtime_dir / "kernevo" / "locks").symlink_to(elsewhere)
    with pytest.raises(LockDirError, match="is not a folder"):
        lock_dir()


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user's needs root")
def test_a_lock_folder_of_another_user_is_refused(runtime_dir: Path) -> None:
    from evaluator.gpu_lock import LockDirError, lock_dir

    folder = lock_dir()
    os.chown(folder, 4242, -1)
    with pytest.raises(LockDirError, match="belongs to uid 4242"):
        lock_dir()


# --- who waits for whom --------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from evaluator.gpu_lock import gpu_lock
    with gpu_lock(int(sys.argv[2]), shared=sys.argv[1] == "shared"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _hold_in_another_process(
    mode: str, index: int = 0, visible: str | None = None
) -> subprocess.Popen[str]:
    """A process holding its device ``index``'s lock in ``mode`` (``shared`` or ``alone``)
    until killed, under ``CUDA_VISIBLE_DEVICES=visible`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, mode, str(index)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


class _Taker:
    """A thread of this process that takes GPU 0's lock in one mode and holds it until
    :meth:`release`."""

    def __init__(self, shared: bool) -> None:
        self.got, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._take, args=(shared,), daemon=True)
        self._thread.start()

    def _take(self, shared: bool) -> None:
        from evaluator.gpu_lock import gpu_lock

        with gpu_lock(0, shared=shared):
            self.got.set()
            self._release.wait(30)

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)


@pytest.mark.parametrize(
    ("holder", "shared", "waits"),
    [
        ("alone", False, True),  # timing excludes timing
        ("alone", True, True),  # timing excludes verification
        ("shared", False, True),  # verification excludes timing
        ("shared", True, False),  # verifications run side by side
    ],
    ids=["time-time", "time-verify", "verify-time", "verify-verify"],
)
def test_timing_holds_the_gpu_alone_and_verifications_share_it(
    runtime_dir: Path, holder: str, shared: bool, waits: bool
) -> None:
    proc = _hold_in_another_process(holder)
    taker = _Taker(shared)
    try:
        assert taker.got.wait(0.5) is not waits
        proc.kill()  # SIGKILL: no cleanup runs; the kernel drops the lock
        proc.wait(10)
        assert taker.got.wait(5.0)
    finally:
        taker.release()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    ("visible", "index", "waits"),
    [
        ("4,0", 1, True),  # its device 1 is physical 0: this process's device 0
        ("0", 0, True),
        ("6", 0, False),  # its device 0 is physical 6: another GPU
        ("0,6", 1, False),
    ],
)
def test_the_lock_is_the_physical_devices_whatever_each_holder_sees(
    runtime_dir: Path, visible: str, index: int, waits: bool
) -> None:
    """A holder under ``CUDA_VISIBLE_DEVICES`` (Slurm's, a pinned worker's) and one without it
    take one lock for one GPU and two for two (``evaluator.visible_devices``): before, the lock
    was named by each process's own index, so timing on physical GPU 0 and verification on
    it under ``CUDA_VISIBLE_DEVICES=4,0`` did not exclude each other."""
    proc = _hold_in_another_process("alone", index, visible)
    taker = _Taker(shared=False)
    try:
        assert taker.got.wait(0.5) is not waits
    finally:
        proc.kill()
        proc.wait(10)
        assert taker.got.wait(5.0)
        taker.release()


def test_an_index_the_visible_devices_lack_is_one_line(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluator.gpu_lock import gpu_lock
    from evaluator.visible_devices import VisibleDevicesError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    expected = r"^--gpu 2: CUDA_VISIBLE_DEVICES='4,6' makes 2"
    with pytest.raises(VisibleDevicesError, match=expected), gpu_lock(2):
        pass


def test_a_waiting_timer_goes_before_verifications_that_come_after_it(runtime_dir: Path) -> None:
    """Verifications that keep overlapping would otherwise starve timing for good."""
    from evaluator.gpu_lock import gpu_lock

    events: list[str] = []
    first_held, timer_waiting = threading.Event(), threading.Event()

    def first_verification() -> None:
        with gpu_lock(0, shared=True):
            first_held.set()
            timer_waiting.wait(10)
            time.sleep(0.5)  # the timer is queued now; a later verification arrives
            events.append("first verification ends")

    def timer() -> None:
        first_held.wait(10)
        timer_waiting.set()
        with gpu_lock(0):
            events.append("timing")

    def later_verification() -> None:
        timer_waiting.wait(10)
        time.sleep(0.2)
        with gpu_lock(0, shared=True):
            events.append("later verification")

    threads = [threading.Thread(target=f) for f in (first_verification, timer, later_verification)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert events == ["first verification ends", "timing", "later verification"]


# --- the GPU worker takes the lock by task kind -------------------------------------------------


class _RecordingLock:
    """Stands in for ``gpu_lock``: records the mode of each hold."""

    def __init__(self) -> None:
        self.modes: list[str] = []

    def __call__(self, gpu_index: int, *, shared: bool = False) -> Any:
        from contextlib import nullcontext

        self.modes.append("shared" if shared else "alone")
        return nullcontext()


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, task: dict[str, Any]) -> None:
        self.sent.append(task)

    def poll(self, timeout: float) -> bool:
        return True

    def recv(self) -> dict[str, Any]:
        return {"ok": True, "result": {"kind": self.sent[-1]["kind"]}}


class _Alive:
    def is_alive(self) -> bool:
        return True


def test_only_the_time_task_holds_the_gpu_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from evaluator import worker as worker_module

    lock = _RecordingLock()
    monkeypatch.setattr(worker_module, "gpu_lock", lock)
    gpu = worker_module.GpuWorker(0)
    gpu._proc, gpu._conn = _Alive(), _Pipe()  # type: ignore[assignment]
    for kind in ("info", "check", "time", "champion"):
        assert gpu.run({"kind": kind}, 1.0) == {"kind": kind}
    assert lock.modes == ["shared", "shared", "alone", "shared"]
    assert frozenset({"time"}) == worker_module.EXCLUSIVE_KINDS
    assert gpu.last_lock_wait_s >= 0.0
