"""The evaluation pipeline, cheap rejections first: screen → compile → contract check of the
cubin → quick check → full verification → timing against cuBLAS → re-check (docs/DESIGN.md
"Evaluation pipeline").

Pure: a candidate source in, an :class:`EvaluationReport` out. Compilation happens in this
process (NVRTC needs no GPU); everything that touches the GPU runs in the :class:`GpuWorker`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any

from evaluator.checks.accuracy import added_check_names
from evaluator.checks.device_state import device_state_failure
from evaluator.compile import CompileResult, compile_cubin
from evaluator.compile_sandbox import CompilerUnavailable, shared_compiler
from evaluator.op_suites import TrsmSuite, suite_for
from evaluator.report import (
    CheckFailure,
    CompileInfo,
    EvaluationReport,
    GpuInfo,
    RivalTiming,
    ShapeTiming,
)
from evaluator.score import combined_score, score_interval
from evaluator.screen import screen
from evaluator.worker import GpuWorker, TaskError, WorkerFault, WorkerTimeout
from seeds.hardware import no_gpu_reason
from seeds.registry import get_path
from seeds.spec import check_dtype

# What trsm's full verification (verify with growth, evaluator.gpu_tasks) runs on top of the
# per-problem checks; a passing report lists them in ``checks_run`` (the certificate's source).
# Another op's are its suite's ``added_checks`` (evaluator.op_suites).
NUMERIC_CHECKS = TrsmSuite.added_checks
QUICK_TIMEOUT_S = 60.0
FULL_TIMEOUT_S = 240.0
# The report phase of seconds spent waiting for the GPU lock (``evaluator.gpu_lock``): other
# jobs' timing, or their verification while this one waits to time.
LOCK_WAIT = "gpu_lock_wait"
VERIFY_SEED_COUNT = 3


def fresh_seeds(count: int) -> list[int]:
    """Input seeds no candidate can know in advance (recorded in the report to reproduce)."""
    return [secrets.randbelow(2**31) for _ in range(count)]


def compile_info(result: CompileResult, kernel_name: str) -> CompileInfo:
    """The compile facts of ``result`` for the solve entry ``kernel_name``."""
    res = result.resources.get(kernel_name)
    return CompileInfo(
        ok=result.ok,
        log=result.log,
        options=result.options,
        arch=result.arch,
        nvrtc_version=result.nvrtc_version,
        seconds=result.seconds,
        cubin_sha256=result.cubin_sha256,
        registers=res.registers if res else 0,
        spill_bytes=(res.spill_store_bytes + res.spill_load_bytes) if res else 0,
        stack_bytes=res.stack_bytes if res else 0,
        static_shared_bytes=res.static_shared_bytes if res else 0,
        limit=result.limit,
    )


def compile_failure(result: CompileResult) -> CheckFailure:
    """The check a failed compile broke: a sandbox limit (``compile_time_limit``: value and
    bound in seconds, of CPU time or, past the wall-clock backstop, of wall clock;
    ``compile_memory_limit``: bound in bytes of address space), the compiler child dying
    (``compiler_crash``), or NVRTC's own errors (``compile``, first error line). Limits are
    those of this process's compiler child (``evaluator.compile_sandbox``)."""
    sandbox = shared_compiler()
    if result.limit == "time":
        return CheckFailure(
            "compile_time_limit", None, result.cpu_seconds, sandbox.cpu_limit_s,
            result.log.splitlines()[0],
        )  # fmt: skip
    if result.limit == "wall":
        return CheckFailure(
            "compile_time_limit", None, result.seconds, sandbox.wall_limit_s,
            result.log.splitlines()[0],
        )  # fmt: skip
    if result.limit == "memory":
        return CheckFailure(
            "compile_memory_limit", None, None, float(sandbox.address_space_bytes),
            result.log.splitlines()[0],
        )  # fmt: skip
    if result.limit == "crash":
        return CheckFailure("compiler_crash", detail=result.log.splitlines()[0][:500])
    first = next((ln for ln in result.log.splitlines() if "error" in ln), "")
    return CheckFailure("compile", detail=first)


class Evaluator:
    """Evaluates candidates of one path and dtype on one GPU (``gpu_index`` None: compile only),
    at the path's shape bucket ``bucket`` (its shape sets; ``None``: the path's first bucket).
    What depends on the path's op (inputs, checks, timing) is the op's suite's
    (``evaluator.op_suites``).

    Raises:
        UnknownPathError, UnknownBucketError, UnknownDtypeError: at construction, for a bad job.
        evaluator.op_suites.UnknownSuiteError: the path's op has no evaluation suite.
    """

    def __init__(
        self,
        path_id: str,
        dtype: str,
        gpu_index: int | None,
        compile_arch: str = "sm_90",
        bucket: str | None = None,
    ) -> None:
        self.spec = get_path(path_id, bucket)
        self.dtype = check_dtype(dtype, self.spec.dtypes)
        self.suite = suite_for(self.spec.op)
        self.gpu_index = gpu_index
        self.worker = GpuWorker(gpu_index) if gpu_index is not None else None
        self._gpu: GpuInfo | None = None
        self._compile_arch = compile_arch

    def gpu(self) -> GpuInfo | None:
        """The worker GPU's identity (asked once); None in compile-only mode."""
        if self.worker is None:
            return None
        if self._gpu is None:
            self._gpu = GpuInfo(**self.worker.run({"kind": "info"}, QUICK_TIMEOUT_S)["gpu"])
        return self._gpu

    def close(self) -> None:
        """Stop the GPU worker process."""
        if self.worker is not None:
            self.worker.stop()

    # -- stages -------------------------------------------------------------------------------

    def stage1(self, source: str) -> tuple[EvaluationReport, bytes]:
        """Screen, compile, check the cubin against the contract (``contract_error``), and check
        the two quick shapes. Returns the report and the cubin (empty when refused)."""
        report = EvaluationReport(self.spec.path_id, self.dtype)
        if failure := screen(source, self.spec.seed_source()):
            return report.fail("screen_error", failure), b""
        try:
            gpu = self.gpu()
        except (WorkerTimeout, WorkerFault, TaskError) as exc:
            detail = str(exc).splitlines()[0]
            if "CUDARuntimeError" in detail:  # no driver, an old one, or no device: say which
                detail = no_gpu_reason(detail)
            failure = CheckFailure("gpu_unavailable", detail=detail)
            return report.fail("infra_error", failure), b""
        report.gpu = gpu
        arch = gpu.arch if gpu else self._compile_arch
        t0 = time.perf_counter()
        try:
            result = compile_cubin(source, self.spec.compile_options(self.dtype, arch), arch)
        except CompilerUnavailable as exc:
            return report.fail(
                "infra_error", CheckFailure("compiler_unavailable", detail=str(exc))
            ), b""
        report.compile = compile_info(result, self.spec.kernel_name)
        report.stage = "compile"
        report.phase_seconds["compile"] = time.perf_counter() - t0
        if not result.ok:
            return report.fail("compile_error", compile_failure(result)), b""
        # The binary itself against the contract, before any GPU work and in compile-only mode
        # too: nothing may survive from one launch to the next (evaluator.checks.device_state).
        if failure := device_state_failure(result.cubin):
            return report.fail("contract_error", failure), b""
        if self.worker is None:
            report.status = "compiled"
            report.notes.append("compile-only evaluation: no GPU assigned, not run")
            return report, result.cubin
        task = {
            "kind": "check",
            "cubin": result.cubin,
            "path_id": self.spec.path_id,
            "dtype": self.dtype,
            "shapes": list(self.spec.quick_shapes),
            "seeds": self._seeds(report, 1),
            "growth": False,
        }
        report.stage = "quick"
        return self._run_checks(report, task, QUICK_TIMEOUT_S, "verify"), result.cubin

    def stage2(
        self,
        report: EvaluationReport,
        cubin: bytes,
        rival_cubin: bytes | None = None,
        rival_name: str = "champion",
    ) -> EvaluationReport:
        """Full verification, timing against cuBLAS and re-check, continuing ``report``.

        ``rival_cubin`` (the champion's or the parent's, same path and dtype; ``rival_name``
        says which) is timed in the same rounds as the candidate; the worker returns the
        comparison, one ``RivalTiming`` per shape, under ``rival_timings``. The score and its
        interval follow ``evaluator.score``.
        """
        seeds = self._seeds(report, VERIFY_SEED_COUNT)
        verify: dict[str, Any] = {
            "kind": "check",
            "cubin": cubin,
            "path_id": self.spec.path_id,
            "dtype": self.dtype,
            "shapes": list(self.spec.verify_shapes),
            "seeds": seeds,
            "growth": True,
        }
        report.stage = "verify"
        report = self._run_checks(report, verify, FULL_TIMEOUT_S, "verify")
        if not report.passed:
            return report
        # Two tasks, so that the verification shares the GPU with other jobs' work and only
        # the timing (and the re-check of the module it timed) holds it alone
        # (evaluator.worker.EXCLUSIVE_KINDS).
        timed: dict[str, Any] = {
            "kind": "time",
            "cubin": cubin,
            "path_id": self.spec.path_id,
            "dtype": self.dtype,
            "seeds": seeds,
            "timing": {"seed": self._seeds(report, 1)[0]},
            "timed_shapes": list(self.spec.timed_shapes),
            "recheck_shapes": list(self.spec.timed_shapes) + list(self.spec.quick_shapes),
        }
        if rival_cubin:
            timed["rival_cubin"], timed["rival_name"] = rival_cubin, rival_name
        report = self._run_checks(report, timed, FULL_TIMEOUT_S, "time")
        if report.passed:
            # The path's reference check's own names (trsm_blocked: lapack_ratio), then the op's
            # (trsm: issue 6's).
            added = added_check_names(self.spec.reference_check)
            report.checks_run += [*added, *self.suite.added_checks]
            # Every scale the verification checked (trsm: the extremes at each shape and the
            # sweep once), drawn from the first seed as the worker drew them.
            report.input_scales = self.suite.input_scales(self.dtype, seeds[0])
            report.stage = "time"
            report.combined_score = combined_score(report.timings)
            report.combined_score_low, report.combined_score_high = score_interval(report.timings)
        return report

    def compile_rival(self, source: str, report: EvaluationReport) -> bytes | None:
        """The cubin of ``source``, a program evaluated before (a parent, which passed the
        screen and the contract then), for the architecture ``report`` compiled for; None when
        it does not compile now (the compile cache usually holds it)."""
        arch = report.compile.arch if report.compile else self._compile_arch
        result = compile_cubin(source, self.spec.compile_options(self.dtype, arch), arch)
        return result.cubin if result.ok else None

    def evaluate_with_cubin(self, source: str) -> tuple[EvaluationReport, bytes]:
        """The whole pipeline on one candidate source; also the cubin it evaluated (empty when
        compilation never produced one), for callers that profile or sanitize that cubin."""
        report, cubin = self.stage1(source)
        if report.passed:
            report = self.stage2(report, cubin)
        return report, cubin

    def evaluate(self, source: str) -> EvaluationReport:
        """The whole pipeline on one candidate source."""
        return self.evaluate_with_cubin(source)[0]

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _seeds(report: EvaluationReport, count: int) -> list[int]:
        seeds = fresh_seeds(count)
        report.input_seeds.extend(seeds)
        return seeds

    def _run_checks(
        self, report: EvaluationReport, task: dict[str, Any], timeout_s: float, phase: str
    ) -> EvaluationReport:
        assert self.worker is not None
        t0 = time.perf_counter()
        try:
            result = self.worker.run(task, timeout_s)
            for name, seconds in result["phase_seconds"].items():
                report.phase_seconds[name] = report.phase_seconds.get(name, 0.0) + seconds
            waited = getattr(self.worker, "last_lock_wait_s", 0.0)
            report.phase_seconds[LOCK_WAIT] = report.phase_seconds.get(LOCK_WAIT, 0.0) + waited
        except WorkerTimeout as exc:
            return report.fail("timeout", CheckFailure("hard_timeout", detail=str(exc)))
        except WorkerFault as exc:
            return report.fail("fault", CheckFailure("cuda_error", detail=str(exc)))
        except TaskError as exc:
            return report.fail("fault", CheckFailure("worker_exception", detail=str(exc)[:2000]))
        finally:
            # Wall time of the round trip, worker start and IPC included.
            key = f"{phase}_wall"
            report.phase_seconds[key] = report.phase_seconds.get(key, 0.0) + (
                time.perf_counter() - t0
            )
        # A ``time`` task verifies nothing new and a ``check`` task times nothing: each result
        # sets only the fields its kind returns.
        if "verified_shapes" in result:
            report.verified_shapes = [tuple(s) for s in result["verified_shapes"]]
        if "timings" in result:
            # Worker results cross the process boundary by pickling: a shape is a tuple already.
            report.timings = [ShapeTiming(**t) for t in result["timings"]]
            report.rival_timings = [RivalTiming(**r) for r in result.get("rival_timings", [])]
        if result["failure"]:
            f = result["failure"]
            failure = replace(CheckFailure(**f), shape=tuple(f["shape"]) if f["shape"] else None)
            return report.fail("wrong", failure)
        return report
