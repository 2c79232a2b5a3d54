"""Every registered path can be evolved, evaluated, certified and served (issue 8: solve_tri and
band_bidiag registered beside trsm's paths), without a GPU:

- the registry and the evaluator's suites agree: each path's op has a suite holding the checks a
  v3 certificate needs, its reference check resolves, its shapes lie in its envelope and each
  bucket's timed shapes in that bucket;
- each path's tunables move (the offline mutator has something to do) and its seed compiles with
  NVRTC at both ends of their ranges (all lowest, all highest; for the new paths each tunable
  alone too), in every dtype, passing the screen and leaving no device state;
- ``kernevo evolve`` of a new path without a GPU is one line, its unsupported dtype a usage
  error, and a compile-only job runs end to end (offline mutator, pipeline, lineage);
- a champion of a new path gets a v3 certificate from its suite, the service answers the op's
  query with it and the loader admits and routes to it (a shape outside the envelope goes to
  the op's fallback), and the loader's call of solve_tri solves in place through
  ``solve(a, b, out=b)``.

On a GPU: ``tests/test_ops_registered_gpu.py``.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ops_service import Service
from sqlalchemy import select

from db.models import Evaluation, Job, Program
from db.session import make_engine, session_scope
from evaluator.certificate import build_certificate
from evaluator.champion import ChampionReport
from evaluator.checks import accuracy
from evaluator.checks.device_state import device_state_failure
from evaluator.compile import compile_cubin
from evaluator.op_suites import SUITES, suite_for
from evaluator.report import CompileInfo, GpuInfo, ShapeTiming
from evaluator.screen import screen
from evolver.job_config import JobConfig
from evolver.offline_mutator import movable_tunables
from evolver.runner import start_job
from evolver.settings import EvolverSettings
from kernevo.cache import ChampionCache
from kernevo.certificate import CERTIFICATE_V3, REQUIRED_CHECKS, Certificate, certificate_sha256
from kernevo.client import service_fetcher
from kernevo.device import GpuInfo as DeviceGpu
from kernevo.keys import public_raw_of
from kernevo.resolver import Resolver
from kernevo.signature import key_id, sign, signed_payload
from kernevo.trust import TrustPolicy
from seeds import ops, registry
from seeds.ops.solve_tri import SolveTriCall
from seeds.spec import PathSpec
from seeds.tunables import Tunable, parse_tunables

NEW_PATHS = {"solve_tri": "float32", "band_bidiag": "float64"}
ARCH = "sm_90"
# What a v3 certificate requires that the pipeline and the champion checks add around a suite.
PIPELINE_OWN = {"screen", "compile", "device_global_state", "recheck_after_timing",
                "held_out_shapes", "determinism"}  # fmt: skip


def every_bucket(spec: PathSpec) -> list[PathSpec]:
    return [spec.for_bucket(name) for name in spec.bucket_names]


@pytest.mark.parametrize("path_id", list(registry.PATHS))
def test_every_registered_path_has_a_suite_and_shapes_it_serves(path_id):
    spec = registry.get_path(path_id)
    assert set(SUITES) >= {s.op for s in registry.PATHS.values()}
    suite = suite_for(spec.op)
    required = set(REQUIRED_CHECKS[CERTIFICATE_V3]) - PIPELINE_OWN
    assert required <= set(suite.problem_checks), "a suite without the memory checks"
    assert callable(accuracy.solution_check(spec.reference_check))
    assert set(spec.dtypes) <= set(ops.get_op(spec.op).dtypes)
    assert registry.buckets(path_id) == spec.bucket_names and spec.bucket_names
    for bucket in every_bucket(spec):
        shape_sets = (bucket.quick_shapes, bucket.verify_shapes, bucket.timed_shapes,
                      bucket.held_out_shapes, (bucket.sanitizer_shape,))  # fmt: skip
        assert all(spec.serves(*shape) for shapes in shape_sets for shape in shapes), bucket
        # A champion's time at a shape is read where the shape is routed: its own bucket.
        assert {spec.bucket_of(*shape) for shape in bucket.timed_shapes} == {bucket.shape_bucket}


def test_the_new_paths_route_and_their_ops_name_their_parameters():
    assert registry.route("solve_tri", "float32", 64, 6, 4, 2) == [
        registry.Route("solve_tri", "n256_k128")
    ]
    assert registry.route("band_bidiag", "float32", 8192, 32) == [
        registry.Route("band_bidiag", "n2049_16384")
    ]
    assert registry.route("band_bidiag", "float64", 1024, 32) == [
        registry.Route("band_bidiag", "n1_2048")
    ]
    assert registry.route("solve_tri", "float32", 300, 6, 4, 2) == []
    assert registry.get_path("solve_tri").params == ("n", "k", "b2", "b3")
    assert registry.get_path("band_bidiag").params == ("n", "bandwidth")


# --- tunables ---------------------------------------------------------------------------------


def with_values(source: str, values: dict[str, str]) -> str:
    """``source`` with the named tunables' declaring lines moved to ``values``."""
    lines = source.splitlines(keepends=True)
    for tunable in parse_tunables(source):
        if tunable.name in values:
            lines[tunable.line_no] = tunable.with_value(values[tunable.name]) + "\n"
    return "".join(lines)


def ends(tunables: list[Tunable], path_id: str) -> list[tuple[str, dict[str, str]]]:
    """Settings to compile: every tunable at its lowest choice, every one at its highest, and,
    for the new paths, each alone at each end."""
    settings = [
        ("all lowest", {t.name: t.choices[0] for t in tunables}),
        ("all highest", {t.name: t.choices[-1] for t in tunables}),
    ]
    if path_id in NEW_PATHS:
        settings += [
            (f"{t.name}={value}", {t.name: value})
            for t in tunables
            for value in (t.choices[0], t.choices[-1])
            if value != t.value
        ]
    return settings


@pytest.mark.parametrize("path_id", list(registry.PATHS))
def test_tunables_compile_at_both_ends_of_their_ranges(path_id, tmp_path):
    spec = registry.get_path(path_id)
    seed = spec.seed_source()
    tunables = parse_tunables(seed)
    assert movable_tunables(seed), "the offline mutator would have nothing to move"
    for label, values in ends(tunables, path_id):
        source = with_values(seed, values)
        assert screen(source, seed) is None, label
        # The narrowest and the widest scalar (float32 and complex128 where a path has four):
        # the dtype only sets the scalar type, and a corner that compiles at both compiles between.
        # A tunable moved alone is compiled at the widest only, where shared memory and registers
        # are tightest: both scalars there doubled the CI's longest test (67 s, trsm_small_batched).
        widest = (spec.dtypes[-1],)
        corners = (spec.dtypes[0], spec.dtypes[-1])
        for dtype in dict.fromkeys(corners if label.startswith("all ") else widest):
            result = compile_cubin(
                source, spec.compile_options(dtype, ARCH), ARCH, cache_dir=tmp_path
            )
            assert result.ok, f"{label} {dtype}: {result.log[:500]}"
            assert spec.kernel_name in result.resources, label
            assert device_state_failure(result.cubin) is None, label


# --- the command line and a compile-only job ----------------------------------------------------


def has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def kernevo(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["KERNEVO_DATABASE_URL"] = f"sqlite:///{tmp_path / 'lineage.db'}"
    env["KERNEVO_WORK_DIR"] = str(tmp_path / "runs")
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args], env=env, capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.skipif(has_driver(), reason="an NVIDIA driver is installed")
@pytest.mark.parametrize(("path_id", "dtype"), list(NEW_PATHS.items()))
def test_evolving_a_new_path_without_a_gpu_is_one_line(path_id, dtype, tmp_path):
    line = one_line(kernevo("evolve", "--path", path_id, "--dtype", dtype, tmp_path=tmp_path))
    assert line.startswith("kernevo: no CUDA GPU found: no NVIDIA driver (libcuda.so.1")
    assert not (tmp_path / "lineage.db").exists()  # nothing was created


def test_a_dtype_the_path_lacks_is_a_usage_error(tmp_path):
    done = kernevo("evolve", "--path", "solve_tri", "--dtype", "float64", tmp_path=tmp_path)
    assert done.returncode == 2
    assert one_line(done) == (
        "kernevo evolve: error: argument --dtype: path solve_tri has no float64 kernel; it "
        "implements float32 (see kernevo evolve --help)"
    )


def tunable_lines(seed: str, child: str) -> list[str]:
    """The lines a child changed from the seed (both sides)."""
    diff = difflib.unified_diff(seed.splitlines(), child.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


@pytest.mark.parametrize(
    ("path_id", "dtype", "bucket"),
    [("solve_tri", "float32", None), ("band_bidiag", "float64", None),
     ("band_bidiag", "float32", "n2049_16384")],
)  # fmt: skip
def test_a_compile_only_job_of_a_new_path_runs_end_to_end(path_id, dtype, bucket, tmp_path):
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    job = JobConfig(path=path_id, dtype=dtype, bucket=bucket, compile_only=True, iterations=2)
    outcome = start_job(
        job, settings=EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None),
        database_url=url, write=lambda line: None,
    )  # fmt: skip
    assert (outcome.state, outcome.iteration) == ("complete", 2)
    spec = registry.get_path(path_id, bucket)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            row = s.get(Job, outcome.job_id)
            assert (row.path, row.shape_bucket, row.gpu_key) == (path_id, spec.shape_bucket, "none")
            programs = list(s.scalars(select(Program).where(Program.job_id == outcome.job_id)))
            (seed,) = [p for p in programs if p.parent_id is None]
            assert seed.source == spec.seed_source()
            children = [p for p in programs if p.backend == "offline"]
            assert {p.iteration for p in children} == {1, 2}
            names = {t.name for t in parse_tunables(spec.seed_source())}
            for child in children:  # the offline mutator moved declared tunables, nothing else
                changed = tunable_lines(seed.source, child.source)
                assert changed and all(line.split()[1] in names for line in changed), changed
            evaluations = list(s.scalars(select(Evaluation)))
            assert {(e.state, e.score, e.report["status"]) for e in evaluations} == {
                ("scored", 0.0, "compiled")
            }
    finally:
        engine.dispose()


# --- certificates and the loader's call ---------------------------------------------------------


def champion_report(spec: PathSpec, dtype: str, nvrtc_version: str = "13.0") -> ChampionReport:
    """A verify_champion report of ``spec``'s seed that passed everything, as the suite's full
    verification leaves it (compiled by NVRTC ``nvrtc_version``)."""
    suite = suite_for(spec.op)
    timed = [
        ShapeTiming(0, 0, 7.5, 0.1, 30.0, 0.5, 9.0, 40.0, 7.6, 0.02, 3.6, 4.4, True, 0.9, shape)
        for shape in spec.timed_shapes
    ]
    return ChampionReport(
        path_id=spec.path_id, dtype=dtype, status="ok", stage="time", combined_score=4.0,
        compile=CompileInfo(True, "", ("-arch=sm_90",), "sm_90", nvrtc_version, 0.04, "a" * 64),
        gpu=GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "12.8"),
        timings=timed, verified_shapes=list(spec.verify_shapes), input_seeds=[1, 2, 3],
        held_out_seeds=[4, 5, 6], checks_run=list(suite.added_checks),
        champion_checks=["held_out_shapes", "determinism", "sanitizer_memcheck",
                         "sanitizer_racecheck", "sanitizer_synccheck", "sanitizer_initcheck"],
        sanitizer_shapes={"memcheck": [spec.sanitizer_shape, spec.timed_shapes[0]],
                          "racecheck": [spec.sanitizer_shape]},
        sanitizer_version="2025.3.1.0", nvidia_driver_version="580.95.05",
    )  # fmt: skip


@pytest.mark.parametrize(("path_id", "dtype"), list(NEW_PATHS.items()))
def test_a_champion_of_a_new_path_gets_a_v3_certificate_from_its_suite(path_id, dtype):
    spec = registry.get_path(path_id)
    suite = suite_for(spec.op)
    certificate = build_certificate(champion_report(spec, dtype), spec)
    assert (certificate.format, certificate.op, certificate.shape_params) == (
        CERTIFICATE_V3, spec.op, list(spec.params),
    )  # fmt: skip
    checks = certificate.checks_passed
    assert set(REQUIRED_CHECKS[CERTIFICATE_V3]) <= set(checks)
    assert [c for c in checks if c in suite.problem_checks] == list(suite.problem_checks)
    assert set(suite.added_checks) <= set(checks)
    assert [t.shape for t in certificate.timings] == [list(s) for s in spec.timed_shapes]
    assert certificate.not_verified[-len(suite.not_verified(None, spec)) :] == (
        suite.not_verified(None, spec)
    )
    assert "m=" not in " ".join(certificate.not_verified)
    # band_bidiag verifies bandwidth 0 (a diagonal): a v3 shape may hold an op's 0.
    assert set(spec.verify_shapes) <= set(certificate.verified_shapes)
    assert Certificate.model_validate(certificate.to_json_dict()) == certificate


class OutRecorder:
    """A solve_tri path driver that records how it was called and writes X (2·B) to ``out``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def solve(self, a: Any, b: Any, out: Any = None, stream: Any = None) -> Any:
        self.calls.append({"b": b, "out": out})
        out[...] = 2 * b
        return out


def test_the_loaders_solve_tri_call_solves_in_place_through_out_b():
    """ggml's SOLVE_TRI writes X over B here (docs/CONTRACTS.md: solve_tri's ``solver(a, b)``, X
    in b): the driver, out of place by default, is called with ``out=b``."""
    a = np.eye(3, dtype=np.float32).reshape(1, 1, 3, 3)
    b = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2)
    driver = OutRecorder()
    result = SolveTriCall().run(driver, a, b)
    assert result is b and driver.calls[0]["out"] is b and driver.calls[0]["b"] is b
    assert b.ravel().tolist() == [0, 2, 4, 6, 8, 10]


# --- served: the service answers for the registered paths, the loader routes to them ----------

H200 = DeviceGpu(index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90")
# Made in memory for this run: never written anywhere, never committed.
SIGNER = Ed25519PrivateKey.generate()


def promote_seed(url: str, spec: PathSpec, dtype: str, workdir: Path) -> int:
    """Promote ``spec``'s seed, compiled for sm_90, as the champion of (path, dtype,
    nvidia-h200, its first bucket) on the database at ``url``, with the v3 certificate its
    suite gives a report that passed (:func:`champion_report`), signed as ``evolver.champion``
    signs; returns the program id."""
    from db import repository as repo
    from db.migrate import upgrade

    upgrade(url)
    source, options = spec.seed_source(), spec.compile_options(dtype, ARCH)
    compiled = compile_cubin(source, options, ARCH, cache_dir=workdir / "cubin")
    assert compiled.ok, compiled.log
    certificate = build_certificate(
        champion_report(spec, dtype, compiled.nvrtc_version), spec
    ).to_json_dict()
    verified = [list(shape) for shape in spec.verify_shapes]
    report = {"status": "ok", "verified_shapes": verified, "compile": compiled.summary()}
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.create_job(
                s, path=spec.path_id, dtype=dtype, gpu=H200.key, shape_bucket=spec.shape_bucket,
                config={}, backend="offline", model=None,
            )  # fmt: skip
            program, _ = repo.record_program(
                s, job_id=job.id, uid="seed", source=source, parent_uid=None, island=0,
                generation=0, iteration=0, diff=None, backend="offline", model=None,
            )  # fmt: skip
            evaluation = repo.record_evaluation(
                s, program_id=program.id, report_json=report, gpu_key=H200.key,
                gpu_name=H200.name, arch=ARCH, driver_version=None,
                nvrtc_version=compiled.nvrtc_version, score=4.0, state="verified",
                error_kind=None,
            )  # fmt: skip
            launch = {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name}
            envelope = {**spec.envelope, "verified_shapes": verified}
            payload = signed_payload(
                path=spec.path_id, dtype=dtype, gpu=H200.key, shape_bucket=spec.shape_bucket,
                program_id=program.id, arch=ARCH, cubin_sha256=repo.sha256_hex(compiled.cubin),
                source_sha256=repo.sha256_hex(source), launch=launch, envelope=envelope,
                compile_options=options, nvrtc_version=compiled.nvrtc_version,
                certificate_sha256=certificate_sha256(certificate),
            )  # fmt: skip
            repo.promote_champion(
                s, evaluation_id=evaluation.id, path=spec.path_id, dtype=dtype,
                gpu_key=H200.key, shape_bucket=spec.shape_bucket, cubin=compiled.cubin,
                launch=launch, envelope=envelope, compile_options=options,
                signature=sign(SIGNER, payload), signing_key_id=key_id(public_raw_of(SIGNER)),
                certificate=certificate,
            )  # fmt: skip
            return program.id
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("path_id", "dtype", "inside", "outside", "fallback"),
    [("solve_tri", "float32", (64, 6, 4, 2), (300, 6, 4, 2), "cublas"),
     ("band_bidiag", "float64", (1024, 32), (4096, 1024), "lapack")],
)  # fmt: skip
def test_the_loader_routes_a_new_paths_champion_from_the_service(
    path_id, dtype, inside, outside, fallback, tmp_path
):
    """Routing only (nothing is launched): the service answers the op's query for the
    registered path, and the loader admits its signed champion and v3 certificate."""
    spec = registry.get_path(path_id)
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    program_id = promote_seed(url, spec, dtype, tmp_path)
    service = Service(url)
    try:
        trust = TrustPolicy({key_id(public_raw_of(SIGNER)): public_raw_of(SIGNER)})
        resolver = Resolver(
            spec.op, dtype, gpu=H200, trust=trust, cache=ChampionCache(tmp_path / "cache"),
            fetch=service_fetcher(service.url, op=spec.op, timeout_s=5.0),
        )  # fmt: skip
        decision = resolver.resolve(*inside)
        assert (decision.route, decision.path) == ("kernel", path_id), decision.reason
        assert decision.reason.startswith(f"champion program {program_id} from service")
        assert decision.champion is not None and decision.champion.certificate["op"] == spec.op
        pairs = zip(spec.params, outside, strict=True)
        words = " ".join(f"{name}={value}" for name, value in pairs)
        far = resolver.resolve(*outside)
        assert (far.route, far.reason) == (fallback, f"no path serves {words}")
    finally:
        service.stop()
