"""A path owns its parts (issue 7, "Paths own their parts"): the driver, the baseline and the
reference check are named by the path's spec and reached through it by the evaluator and the
loader, so a new path is one folder plus one registry entry. A fake second path, registered
here, whose factories record their calls, runs through the evaluator's pipeline and the loader;
and no module outside ``seeds/trsm_small/`` names trsm_small's driver or baseline."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import evaluator.gpu_tasks as gpu_tasks
from evaluator.checks import accuracy
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport, GpuInfo, ShapeTiming
from kernevo.kernel import path_driver
from seeds import registry
from seeds.spec import ShapeBucket, UnknownBucketError, resolve
from seeds.trsm_small.baseline import CublasTrsm
from seeds.trsm_small.driver import TrsmSmallDriver
from seeds.trsm_small.spec import TRSM_SMALL

ROOT = Path(__file__).resolve().parents[1]
TIMING = ShapeTiming(16, 16, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0, 2.01, 0.02, 2.8, 3.1, True, 0.4)


def test_trsm_small_spec_names_its_driver_baseline_and_check():
    assert resolve(TRSM_SMALL.driver_factory) is TrsmSmallDriver
    assert resolve(TRSM_SMALL.baseline_factory) is CublasTrsm
    assert accuracy.solution_check(TRSM_SMALL.reference_check) is accuracy.check_solution


@pytest.mark.parametrize("path_id", sorted(registry.PATHS))
def test_every_registered_path_names_parts_that_exist(path_id):
    spec = registry.get_path(path_id)
    assert callable(resolve(spec.driver_factory)) and callable(resolve(spec.baseline_factory))
    assert callable(accuracy.solution_check(spec.reference_check))


@pytest.mark.parametrize("name", ["trsm_small.driver", ":TrsmSmallDriver", "trsm_small.driver:"])
def test_a_part_name_without_module_and_attribute_is_refused(name):
    with pytest.raises(ValueError, match="module:attribute"):
        resolve(name)


def test_an_unknown_reference_check_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="host_reference"):
        accuracy.solution_check("lapack_on_the_moon")


def test_importing_the_registry_imports_no_part_and_nothing_of_cuda():
    """The loader and the API import the registry on every route: the parts load on first use."""
    probe = (
        "import sys, seeds.registry; "
        "print(sorted(m for m in sys.modules if m.startswith(('cupy', 'seeds.trsm_small.driver', "
        "'seeds.trsm_small.baseline', 'seeds.driver', 'evaluator'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


class Calls:
    """What the fake path's parts were asked to do, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []


class FakeDriver:
    """Stands in for a path driver: records its construction and solves on the host."""

    calls: Calls

    def __init__(self, cubin: bytes, dtype: str, spec: Any) -> None:
        self.calls.log.append(("driver", cubin, dtype, spec.path_id))
        self.cubin = cubin

    def solve_host(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Forward substitution in the inputs' dtype, one column of A at a time, reading only
        the lower triangle (a non-finite entry reaches only the rows that depend on it)."""
        self.calls.log.append(("solve", self.cubin, b.shape))
        x = b.copy(order="F")
        with np.errstate(all="ignore"):
            for k in range(a.shape[0]):
                x[k] /= a[k, k]
                x[k + 1 :] -= np.outer(a[k + 1 :, k], x[k])
        return x

    def solve_raw(self, *args: Any) -> None:
        raise AssertionError("the fake pipeline never launches on device pointers")

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
        raise AssertionError("the fake pipeline never launches on device arrays")

    def close(self) -> None:
        self.calls.log.append(("driver_closed", self.cubin))


class FakeBaseline:
    """Stands in for the vendor baseline: records its construction and its closing."""

    calls: Calls

    def __init__(self, dtype: str) -> None:
        self.calls.log.append(("baseline", dtype))

    def close(self) -> None:
        self.calls.log.append(("baseline_closed",))


@pytest.fixture
def fake_path(monkeypatch: pytest.MonkeyPatch) -> tuple[Calls, Any]:
    """A second path, ``fake_path``: its parts in a module of the path package (as a folder
    ``seeds/_fake_path/`` would provide them), its reference check registered by name, its spec
    in the registry. Returns the call log and the spec."""
    calls = Calls()
    module = types.ModuleType(f"{registry.__package__}._fake_path")
    module.Driver = type("Driver", (FakeDriver,), {"calls": calls})  # type: ignore[attr-defined]
    module.Baseline = type("Baseline", (FakeBaseline,), {"calls": calls})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def check(problem: Any, x: np.ndarray) -> Any:
        calls.log.append(("check", problem.shape))
        return accuracy.check_solution(problem, x)

    monkeypatch.setitem(accuracy.SOLUTION_CHECKS, "fake_check", check)
    spec = dataclasses.replace(
        TRSM_SMALL,
        path_id="fake_path",
        quick_shapes=((7, 5),),
        verify_shapes=((16, 16), (33, 31)),
        timed_shapes=((16, 16),),
        driver_factory="_fake_path:Driver",
        baseline_factory="_fake_path:Baseline",
        reference_check="fake_check",
    )
    monkeypatch.setitem(registry.PATHS, "fake_path", spec)
    return calls, spec


class InProcessWorker:
    """The GPU worker's task loop in this process: ``evaluator.gpu_tasks.run`` itself, with the
    candidate run on the host (``run_candidate``: the fake driver's host solve) and the timing
    recorded instead of measured (``time_shape``)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if task["kind"] == "info":
            return {"gpu": asdict(GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "13.0"))}
        return gpu_tasks.run(task)


def _run_on_host(driver: FakeDriver, problem: Any) -> tuple[None, np.ndarray]:
    return None, driver.solve_host(problem.a, problem.b)


def test_the_evaluator_reaches_a_path_only_through_its_spec(fake_path, monkeypatch):
    calls, spec = fake_path
    timed: list[tuple[Any, ...]] = []

    def time_shape(m, n, dtype, candidate, baseline, check, *, rivals, **timing):
        timed.append((m, n, dtype, candidate, baseline, check, dict(rivals)))
        return TIMING, [], None

    monkeypatch.setattr(gpu_tasks, "run_candidate", _run_on_host)
    monkeypatch.setattr(gpu_tasks, "time_shape", time_shape)
    evaluator = Evaluator("fake_path", "float64", gpu_index=None)
    evaluator.worker = InProcessWorker(calls)  # type: ignore[assignment]
    report = evaluator.stage2(EvaluationReport("fake_path", "float64"), b"cubin", b"rival")

    assert report.passed, report.failure
    log = calls.log
    # The candidate's driver for the verification, again for the timing task, then the
    # rival's, each from the spec, for the task's dtype.
    drivers = [entry for entry in log if entry[0] == "driver"]
    assert drivers == [
        ("driver", b"cubin", "float64", "fake_path"),
        ("driver", b"cubin", "float64", "fake_path"),
        ("driver", b"rival", "float64", "fake_path"),
    ]
    # Every output the verification produced went through the spec's check (the metamorphic
    # relations, the scaled inputs and the containment cases judge theirs by relation, scale
    # and row: their own checks), and only the candidate was solved outside the timing.
    assert {entry[1] for entry in log if entry[0] == "solve"} == {b"cubin"}
    assert sum(entry[0] == "check" for entry in log) >= len(spec.verify_shapes) * 3
    # The baseline of the spec, built once after the verification and closed after timing.
    kinds = [entry[0] for entry in log]
    assert kinds.count("baseline") == 1 and log[kinds.index("baseline")] == ("baseline", "float64")
    assert kinds.index("baseline") < kinds.index("baseline_closed")
    [(m, n, dtype, candidate, baseline, check, rivals)] = timed
    assert (m, n, dtype) == (16, 16, "float64")
    assert isinstance(baseline, FakeBaseline) and check is accuracy.SOLUTION_CHECKS["fake_check"]
    assert candidate.__self__.cubin == b"cubin" and rivals["champion"].__self__.cubin == b"rival"
    # Every driver is closed when the task that loaded it ends, after its last solve (a
    # driver that calls cuBLAS holds a handle and a workspace; the worker loads one per task).
    closed = [entry for entry in log if entry[0] == "driver_closed"]
    assert sorted(closed) == [("driver_closed", b"cubin")] * 2 + [("driver_closed", b"rival")]
    candidate = [e[0] for e in log if e[0] in ("driver", "driver_closed") and e[1] == b"cubin"]
    assert candidate == ["driver", "driver_closed", "driver", "driver_closed"]
    last_close = max(i for i, e in enumerate(log) if e[0] == "driver_closed")
    assert max(i for i, e in enumerate(log) if e[0] == "solve") < last_close


def test_a_bucket_gives_the_evaluator_its_shapes_and_the_path_its_kinds(fake_path, monkeypatch):
    """A path of two shape buckets: an evaluator for the second checks and times that
    bucket's shapes; the verification draws the path's ``verify_kinds``; the report names the
    reference check's own checks (``ADDED_CHECK_NAMES``) first in ``checks_run``."""
    calls, spec = fake_path
    first = ShapeBucket(
        "first", {"m_max": 64, "n_max": 32}, spec.quick_shapes, spec.verify_shapes,
        spec.timed_shapes, spec.held_out_shapes, spec.sanitizer_shape,
    )  # fmt: skip
    second = ShapeBucket(
        "second", {"m_max": 64, "n_min": 33, "n_max": 64}, ((9, 40),), ((20, 40), (33, 50)),
        ((32, 48),), ((40, 60),), (33, 40),
    )  # fmt: skip
    bucketed = dataclasses.replace(
        spec, shape_bucket="first", buckets=(first, second),
        verify_kinds=("growth", "trap", "ill_conditioned"),
    )  # fmt: skip
    monkeypatch.setitem(registry.PATHS, "fake_path", bucketed)
    monkeypatch.setitem(accuracy.ADDED_CHECK_NAMES, "fake_check", ("fake_ratio",))
    kinds: list[str] = []

    def check(problem: Any, x: np.ndarray) -> Any:
        kinds.append(problem.kind)
        return accuracy.check_solution(problem, x)

    monkeypatch.setitem(accuracy.SOLUTION_CHECKS, "fake_check", check)
    timed: list[tuple[int, int]] = []

    def time_shape(m, n, dtype, candidate, baseline, check, *, rivals, **timing):
        timed.append((m, n))
        return TIMING, [], None

    monkeypatch.setattr(gpu_tasks, "run_candidate", _run_on_host)
    monkeypatch.setattr(gpu_tasks, "time_shape", time_shape)
    with pytest.raises(UnknownBucketError, match="its buckets: first, second"):
        Evaluator("fake_path", "float64", gpu_index=None, bucket="third")
    evaluator = Evaluator("fake_path", "float64", gpu_index=None, bucket="second")
    evaluator.worker = InProcessWorker(calls)  # type: ignore[assignment]
    report = evaluator.stage2(EvaluationReport("fake_path", "float64"), b"cubin")

    assert report.passed, report.failure
    assert evaluator.spec.shape_bucket == "second" and evaluator.spec.envelope == spec.envelope
    assert report.verified_shapes == [(20, 40), (33, 50)] and timed == [(32, 48)]
    assert {"growth", "trap", "ill_conditioned"} <= set(kinds) and "graded" not in kinds
    assert report.checks_run[0] == "fake_ratio"
    assert Evaluator("fake_path", "float64", gpu_index=None).spec.verify_shapes == (
        (16, 16), (33, 31),
    )  # fmt: skip


def test_a_task_that_raises_still_closes_its_driver(fake_path, monkeypatch):
    calls, _ = fake_path

    def broken(driver, problem):
        raise RuntimeError("cudaErrorIllegalAddress")

    monkeypatch.setattr(gpu_tasks, "run_candidate", broken)
    task = {"kind": "check", "cubin": b"cubin", "path_id": "fake_path", "dtype": "float64",
            "shapes": [(7, 5)], "seeds": [1], "growth": False}  # fmt: skip
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        gpu_tasks.run(task)
    assert ("driver_closed", b"cubin") in calls.log


def test_the_loader_launches_a_path_through_the_driver_its_spec_names(fake_path):
    calls, _ = fake_path
    driver = path_driver("fake_path", b"champion cubin", "complex64")
    assert isinstance(driver, FakeDriver)
    assert calls.log == [("driver", b"champion cubin", "complex64", "fake_path")]


def test_an_unknown_path_has_no_driver():
    with pytest.raises(registry.UnknownPathError, match="known paths"):
        path_driver("trsm_nowhere", b"", "float64")


# trsm_small's parts by name, and where naming them is allowed: the path's own folder. Tests
# may name them (they test the parts themselves); the service and the loader reach them through
# the spec.
PART_NAMES = re.compile(r"TrsmSmallDriver|CublasTrsm|trsm_small[./](?:driver|baseline)\b")
SOURCE_FOLDERS = ("api", "db", "evaluator", "evolver", "kernevo", "loader", "scripts", "seeds")
# A path's spec may name another path's parts to reuse them: trsm_small_z64 launches through
# trsm_small's driver and is timed against its cuBLAS binding (same signature and launch config).
ALLOWED = ("seeds/trsm_small/", "seeds/trsm_small_z64/spec.py")


def test_no_module_outside_the_path_folder_names_its_driver_or_baseline():
    offenders = []
    for folder in SOURCE_FOLDERS:
        for file in sorted((ROOT / folder).rglob("*")):
            relative = file.relative_to(ROOT).as_posix()
            if file.suffix not in {".py", ".sh", ".toml"} or relative.startswith(ALLOWED):
                continue
            for number, line in enumerate(file.read_text().splitlines(), 1):
                if PART_NAMES.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_the_part_pattern_sees_each_way_of_naming_a_part():
    named = [
        "from seeds.trsm_small.driver import X",
        "from seeds.trsm_small.baseline import X",
        "module('trsm_small/driver')",
        "TrsmSmallDriver(cubin, dtype)",
        "CublasTrsm(dtype)",
    ]
    assert all(PART_NAMES.search(line) for line in named)
    assert not PART_NAMES.search('get_path("trsm_small").driver(cubin, dtype)')
