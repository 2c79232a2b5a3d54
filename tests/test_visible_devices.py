"""``evaluator.visible_devices``: a device index of a process under ``CUDA_VISIBLE_DEVICES``
(Slurm's, a pinned worker's) names a physical GPU, and the evaluator's children are pinned to
that one. Before, the GPU worker child and compute-sanitizer/ncu were pinned with the index as
given (``--gpu 1`` under ``CUDA_VISIBLE_DEVICES=4,6`` ran candidates on physical GPU 1, which
the job was not given, while its facts came from GPU 6). The GPU lock's side is in
``tests/test_gpu_lock.py``."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from evaluator.visible_devices import VisibleDevicesError, physical_index


@pytest.mark.parametrize(
    ("visible", "index", "physical"),
    [(None, 3, 3), ("", 1, 1), ("4,6", 0, 4), ("4,6", 1, 6), (" 2 , 5 ", 1, 5), ("7", 0, 7)],
)
def test_an_index_counts_among_the_visible_devices(visible, index, physical):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert physical_index(index, environ) == physical


@pytest.mark.parametrize(
    ("visible", "index", "message"),
    [
        ("4,6", 2, "--gpu 2: CUDA_VISIBLE_DEVICES='4,6' makes 2 device(s) visible"),
        ("GPU-1a2b", 0, "CUDA_VISIBLE_DEVICES='GPU-1a2b' names devices by UUID: give device "),
        ("0,MIG-3c", 0, "CUDA_VISIBLE_DEVICES='0,MIG-3c' names devices by UUID"),
    ],
)
def test_an_index_they_cannot_name_is_one_line(visible, index, message):
    with pytest.raises(VisibleDevicesError) as caught:
        physical_index(index, {"CUDA_VISIBLE_DEVICES": visible})
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


class _Recorded(Exception):
    """Stops a start after its arguments were recorded."""


def test_the_gpu_workers_child_is_pinned_to_the_physical_device(monkeypatch):
    from evaluator import worker

    started: list[tuple[Any, ...]] = []

    class Context:
        def Pipe(self):  # noqa: N802 -- multiprocessing's name
            return object(), object()

        def Process(self, target, args, daemon):  # noqa: N802
            started.append(args)
            raise _Recorded

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(worker.mp, "get_context", lambda method: Context())
    gpu_worker = worker.GpuWorker(1)
    assert (gpu_worker.gpu_index, gpu_worker.physical_index) == (1, 6)
    with pytest.raises(_Recorded):
        gpu_worker._start()
    assert started[0][1] == 6  # _serve sets the child's CUDA_VISIBLE_DEVICES to it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    with pytest.raises(VisibleDevicesError, match="makes 1 device"):
        worker.GpuWorker(1)


def test_a_tool_run_is_pinned_to_the_physical_device(monkeypatch):
    """``run_candidate_under`` with a stand-in tool (Python printing the variable it was
    given; the run_once arguments after it are its own argv, unused)."""
    from evaluator.tools import run_candidate_under

    show = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    done = run_candidate_under(
        [sys.executable, "-c", show], b"cubin", "trsm_small", "float64", (33, 31), 1, 60
    )
    assert done.returncode == 0 and done.stdout.strip() == "6"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    done = run_candidate_under(
        [sys.executable, "-c", show], b"cubin", "trsm_small", "float64", (33, 31), 1, 60
    )
    assert done.stdout.strip() == "1"
