"""The Dask evaluation backend (issue 10) on clusters the tests start, CPU only.

GPU workers are simulated: Dask workers advertising ``GPU=1`` and the compile-only key's
resource (``gpu-none``) hold ``GpuEvaluationPlugin`` without a device, so every candidate is
compiled (NVRTC, no GPU) on a Dask worker, as a GPU worker would before its quick check. Shown:
a compile-only job through a two-worker cluster records every program exactly once; a worker
SIGKILLed while it evaluates a candidate: the scheduler runs that task again on another worker,
and the job completes without a lost or duplicated program; the scheduler SIGKILLed mid-job:
the job fails with one line naming it and the resume command, and resumes on another cluster
to completion, while ``kernevo dask-worker`` on that scheduler leaves by itself (on a live one
SIGTERM stops it with 143), and the watchdog's process-wide abandon signal ends with the
job's watch; tasks run only on workers of the job's GPU key (a job for key A never on a
worker of key B; a task forced onto the wrong worker is refused by the plugin); Dask's own
worker command with kernevo's preload joins and evaluates; a passing candidate that beats the
job's best runs memcheck, then the profile, on the worker's device (GPU functions stood in for);
the local path imports no Dask.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from db.models import Evaluation, Program
from evaluator import dask_client
from evaluator.dask_plugin import (
    EvaluationRequest,
    GpuEvaluationPlugin,
    JobContext,
    WrongWorkerError,
    gpu_resource,
    run_evaluation,
)
from evolver.cluster import ClusterOptions, EvaluationCluster, keys_of
from evolver.dask_worker import nanny_options, physical_gpu
from evolver.errors import ClusterError
from evolver.job_config import JobConfig
from evolver.runner import resume_job, start_job
from evolver.settings import EvolverSettings
from seeds.registry import get_path

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ITERATIONS = 6


def _settings(tmp_path: Path) -> EvolverSettings:
    return EvolverSettings(work_dir=tmp_path / "runs")


def _job(path: str, dtype: str, iterations: int) -> JobConfig:
    return JobConfig(
        path=path, dtype=dtype, compile_only=True, iterations=iterations, checkpoint_interval=2
    )


def _programs(url: str, job_id: int) -> list[tuple[str, str, int, bool, list[dict[str, Any]]]]:
    """(uid, source sha256, iteration, rerun, evaluation reports) of every program of the job."""
    with Session(create_engine(url)) as s:
        rows = s.scalars(select(Program).where(Program.job_id == job_id)).all()
        out = []
        for p in rows:
            reports = list(
                s.scalars(select(Evaluation.report).where(Evaluation.program_id == p.id))
            )
            out.append((p.uid, p.source_sha256, p.iteration, p.rerun, reports))
        return out


def _assert_each_once(url: str, job_id: int, iterations: int) -> None:
    """Every iteration's program recorded once, each with exactly one evaluation."""
    programs = _programs(url, job_id)
    uids = [p[0] for p in programs]
    assert len(uids) == len(set(uids))
    first_run = [p for p in programs if not p[3]]
    assert sorted(p[2] for p in first_run if p[2] > 0) == list(range(1, len(first_run)))
    covered = {p[2] for p in programs}
    assert covered == set(range(iterations + 1)), covered
    for uid, _, _, _, reports in programs:
        assert len(reports) == 1, (uid, len(reports))


def _worker_of(report: dict[str, Any]) -> str:
    """The Dask worker address the report's note names."""
    notes = [n for n in report["notes"] if n.startswith("evaluated on Dask worker")]
    assert len(notes) == 1, report["notes"]
    found = re.search(r"\((tcp://[^)]+)\)$", notes[0])
    assert found is not None, notes[0]
    return found.group(1)


@contextmanager
def _environment_restored() -> Iterator[None]:
    """This process's environment as it was once the block ends: a Dask nanny sets the
    variables of ``distributed.nanny.pre-spawn-environ`` (``OMP_NUM_THREADS=1``,
    ``PYTHONHASHSEED`` …) in the process that starts it, before each spawn."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _leaves_no_process_state() -> Iterator[None]:
    """Each test leaves this process as it found it: its environment (every later test and
    process of the run inherits it) and the watchdog's abandon signal (left set by a failing
    test, it failed every later evaluation of the process at once: two more tests here)."""

    def environ() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's

    before = environ()
    yield
    assert not dask_client.ABANDONED.is_set(), "evaluator.dask_client.ABANDONED left set"
    assert environ() == before


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two simulated GPU workers in processes (nannies restart a killed one), compile-only.
    Worker processes may start processes (``allow_worker_children``'s setting) for this
    module only, and what the nannies set in this process's environment is taken out again
    at the end (the rest of the run inherits it otherwise)."""
    import logging

    import dask
    from distributed import Client, LocalCluster

    with _environment_restored(), dask.config.set({"distributed.worker.daemon": False}):
        local = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            resources={"GPU": 1, gpu_resource("none"): 1},
            silence_logs=logging.ERROR,
        )
        client = Client(local)
        client.register_plugin(GpuEvaluationPlugin(None, "none"))
        try:
            yield client
        finally:
            client.close()
            local.close()


def _kill_a_worker_mid_evaluation(client: Any, killed: list[tuple[str, str]]) -> None:
    """SIGKILL the process of the first worker seen evaluating a candidate (its task key and
    address go to ``killed``)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for address, keys in client.processing().items():
            evaluating = [str(k) for k in keys if str(k).startswith("kernevo-evaluate-")]
            if evaluating:
                pid = client.run(os.getpid, workers=[address])[address]
                os.kill(pid, signal.SIGKILL)
                killed.append((address, evaluating[0]))
                return
        time.sleep(0.01)


def test_job_records_every_program_once_with_a_worker_killed_mid_evaluation(
    cluster: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    killed: list[tuple[str, str]] = []
    # trsm_blocked in complex128 compiles in about 0.75 s here: a wide window for the kill.
    killer = threading.Thread(target=_kill_a_worker_mid_evaluation, args=(cluster, killed))
    killer.start()
    lines: list[str] = []
    try:
        outcome = start_job(
            _job("trsm_blocked", "complex128", ITERATIONS),
            settings=_settings(tmp_path),
            database_url=url,
            write=lines.append,
            cluster=ClusterOptions(scheduler=cluster.scheduler.address, in_flight=2),
        )
    finally:
        killer.join()
    assert outcome.state == "complete", lines
    text = "\n".join(lines)
    assert f"evaluating on Dask scheduler {cluster.scheduler.address}" in text
    assert "2 worker(s) of none, 2 candidates in flight" in text
    _assert_each_once(url, outcome.job_id, ITERATIONS)
    programs = _programs(url, outcome.job_id)
    assert all(p[4][0]["status"] == "compiled" for p in programs)
    assert killed, "no evaluation was seen running"
    address, key = killed[0]
    # The scheduler gave that task to a worker twice: the killed one, then another.
    story = cluster.run_on_scheduler(lambda dask_scheduler: dask_scheduler.story(key))
    assert sum(1 for t in story if t[2] == "processing") >= 2, story
    sha = key.removeprefix("kernevo-evaluate-")[:16]
    matching = [p for p in programs if p[1].startswith(sha)]
    assert matching, f"no program of source {sha}"
    assert all(_worker_of(p[4][0]) != address for p in matching)


def _start_scheduler(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not file.exists() or not file.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, "the scheduler did not start"
        time.sleep(0.1)

    time.sleep(0.1)  # written in one go, but read it whole
    return proc, json.loads(file.read_text())["address"]


def _kill_when_recorded(url: str, count: int, proc: subprocess.Popen[bytes]) -> None:
    engine = create_engine(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with Session(engine) as s:
                if (s.scalar(select(func.count(Program.id))) or 0) >= count:
                    break
        except Exception:
            pass  # the job has not created the schema yet
        time.sleep(0.05)
    proc.kill()


def test_scheduler_gone_fails_in_one_line_and_resumes(
    cluster: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    scheduler, address = _start_scheduler(tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", "dask-worker", "--compile-only", "--scheduler",
         address, "--name", "cpu-a"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    killer = threading.Thread(target=_kill_when_recorded, args=(url, 4, scheduler))
    killer.start()
    lines: list[str] = []
    try:
        outcome = start_job(
            _job("trsm_small", "float64", ITERATIONS + 2),
            settings=_settings(tmp_path),
            database_url=url,
            write=lines.append,
            cluster=ClusterOptions(scheduler=address, in_flight=2, lost_after_s=2),
        )
    finally:
        killer.join()
        scheduler.kill()
        # Its scheduler gone, the worker leaves by itself: Dask closes a worker whose scheduler
        # connection broke, and the nanny with it (about 3 s). A SIGTERM sent once the job has
        # returned raced that close (the job needs lost_after_s and its shutdown first): under
        # load the worker had already said "closed" and exited 0.
        try:
            worker_output = worker.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            worker.kill()
            worker_output = worker.communicate()[0]
    assert outcome.state == "failed"
    failed = [line for line in lines if "failed" in line]
    assert failed == [lines[-1]]
    assert re.fullmatch(
        rf"job {outcome.job_id} failed: the Dask scheduler {re.escape(address)} stopped "
        rf"answering \(unreachable for 2 s\); resume with 'kernevo evolve --resume "
        rf"{outcome.job_id} --scheduler {re.escape(address)}': best score 0\.000 "
        r"\(speedup n/a\), \d+ programs recorded",
        lines[-1],
    ), lines[-1]
    assert "Traceback" not in capfd.readouterr().err
    assert "dask worker cpu-a | no GPU, key none" in worker_output, worker_output
    assert "dask worker cpu-a | closed" in worker_output, worker_output
    assert worker.returncode == 0, worker_output
    # The lost scheduler was that job's: evaluations of this process wait again (left set, the
    # watchdog's signal failed every later one at once with scheduler_lost).
    assert not dask_client.ABANDONED.is_set()
    before = _programs(url, outcome.job_id)

    resumed = resume_job(
        outcome.job_id,
        overrides={},
        settings=_settings(tmp_path),
        database_url=url,
        write=lines.append,
        cluster=ClusterOptions(scheduler=cluster.scheduler.address, in_flight=2),
    )
    assert resumed.state == "complete", lines
    assert resumed.iteration == ITERATIONS + 2
    after = _programs(url, outcome.job_id)
    uids = [p[0] for p in after]
    assert len(uids) == len(set(uids))
    assert {p[0] for p in before} <= set(uids)  # nothing recorded before the loss is gone
    assert all(len(p[4]) == 1 for p in after)
    # The seed too was compiled as this job's path (the job's process evaluates it).
    assert all(p[4][0]["status"] == "compiled" for p in after), [p[4][0]["status"] for p in after]
    # Every iteration after the stopped run's newest recorded one ran in the resumed run.
    # (With candidates in flight, a checkpoint at iteration N can precede an older iteration
    # still in flight: stopped there, that iteration is neither recorded nor run again.)
    newest = max(p[2] for p in before)
    assert set(range(newest + 1, ITERATIONS + 3)) <= {p[2] for p in after}
    first = [p[2] for p in after if not p[3]]
    assert len(first) == len(set(first)), "an iteration recorded twice without the re-run mark"


def test_the_dask_worker_command_stops_on_sigterm_with_143() -> None:
    """``kernevo dask-worker`` on a live scheduler: SIGTERM closes it with its line and 143
    (with its scheduler gone it leaves by itself instead, exit 0: the test above)."""
    from distributed import Scheduler, SpecCluster

    options = {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"}
    with SpecCluster(workers={}, scheduler={"cls": Scheduler, "options": options}) as spec:
        worker = subprocess.Popen(
            [sys.executable, "-m", "kernevo.cli", "dask-worker", "--compile-only",
             "--scheduler", spec.scheduler_address, "--name", "cpu-t"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert worker.stdout is not None
        output: list[str] = []
        started = threading.Event()

        def read(stream: Any) -> None:
            for line in stream:
                output.append(line)
                if line.startswith("dask worker cpu-t | no GPU, key none"):
                    started.set()

        reader = threading.Thread(target=read, args=(worker.stdout,), daemon=True)
        reader.start()
        try:
            assert started.wait(60), "".join(output)  # its signal handlers are in place
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 143, "".join(output)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            reader.join(timeout=10)
    assert "dask worker cpu-t | stopped by SIGTERM" in "".join(output), "".join(output)


def test_a_lost_scheduler_abandons_the_waits_of_its_process_only_while_watched() -> None:
    """The watchdog's process-wide signal (``dask_client.ABANDONED``) ends with the watch: a
    scheduler lost by one job fails no later evaluation of the same process."""
    address = "tcp://127.0.0.1:9"
    gone = SimpleNamespace(status="connecting", scheduler=SimpleNamespace(address=address))
    options = ClusterOptions(scheduler=address, lost_after_s=0.0)
    evaluation = EvaluationCluster(gone, options, "none", [], None)
    stopped = threading.Event()
    with evaluation.watching(stopped.set):
        assert stopped.wait(10), "the watchdog did not stop the job"
        assert dask_client.ABANDONED.is_set()  # the seed's wait, if any, ends now
    assert evaluation.lost == (
        f"the Dask scheduler {address} stopped answering (unreachable for 0 s)"
    )
    assert not dask_client.ABANDONED.is_set()
    # A watch that ends without a loss leaves it clear too, whatever set it before.
    dask_client.ABANDONED.set()
    running = SimpleNamespace(status="running", scheduler=gone.scheduler)
    live = EvaluationCluster(running, options, "none", [], None)
    with live.watching(stopped.set):
        assert not dask_client.ABANDONED.is_set()
    assert live.lost is None and not dask_client.ABANDONED.is_set()


def test_tasks_run_only_on_workers_of_their_gpu_key(tmp_path: Path) -> None:
    from distributed import Client, Scheduler, SpecCluster, Worker

    from evaluator.dask_client import RemoteEvaluations
    from evaluator.new_best import JobBest

    workers = {
        key: {"cls": Worker, "options": nanny_options(GpuEvaluationPlugin(None, key), key)}
        for key in ("sim-a", "sim-b")
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}}
    with SpecCluster(workers=workers, scheduler=scheduler) as spec, Client(spec) as client:
        info = client.scheduler_info(n_workers=-1)["workers"]
        by_key = keys_of(info)
        assert {k: len(v) for k, v in by_key.items()} == {"sim-a": 1, "sim-b": 1}
        source = get_path("trsm_small").seed_source()
        for key in ("sim-a", "sim-b"):
            context = JobContext("trsm_small", None, "float32", "sm_90", key)
            remote = RemoteEvaluations(spec.scheduler_address, context, wait_s=60)
            try:
                for _ in range(3):
                    report = remote.evaluate(source, None, JobBest(None))
                    assert report.status == "compiled"
                    assert _worker_of(json.loads(report.to_json())) == by_key[key][0]
            finally:
                remote.close()
        # No worker of the key: the task waits, and the evaluation gives up at its deadline.
        lonely = RemoteEvaluations(
            spec.scheduler_address,
            JobContext("trsm_small", None, "float32", "sm_90", "sim-c"),
            wait_s=1,
        )
        try:
            report = lonely.evaluate(source, None, JobBest(None))
        finally:
            lonely.close()
        assert report.status == "infra_error"
        assert report.failure is not None and report.failure.check == "evaluation_deadline"
        assert report.metrics()["combined_score"] == 0.0
        # The job's watchdog gave the scheduler up: a wait in its process ends at once.
        waiting = RemoteEvaluations(
            spec.scheduler_address,
            JobContext("trsm_small", None, "float32", "sm_90", "sim-c"),
            wait_s=120,
        )
        threading.Timer(1.0, dask_client.ABANDONED.set).start()
        t0 = time.monotonic()
        try:
            report = waiting.evaluate(source, None, JobBest(None))
        finally:
            dask_client.ABANDONED.clear()
            waiting.close()
        assert time.monotonic() - t0 < 10
        assert report.failure is not None and report.failure.check == "scheduler_lost"
        # Dask's own worker command with kernevo's preload (dask-jobqueue's way): it joins
        # under the key the preload found (compile-only here) and evaluates.
        preloaded = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", spec.scheduler_address,
             "--nthreads", "1", "--no-dashboard", "--name", "preloaded",
             "--preload", "evolver.dask_preload", "--compile-only"],
            env={**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            context = JobContext("trsm_small", None, "float32", "sm_90", "none")
            remote = RemoteEvaluations(spec.scheduler_address, context, wait_s=60)
            try:
                report = remote.evaluate(source, None, JobBest(None))
            finally:
                remote.close()
            assert report.status == "compiled"
            (address,) = keys_of(client.scheduler_info(n_workers=-1)["workers"])["none"]
            assert _worker_of(json.loads(report.to_json())) == address
        finally:
            preloaded.terminate()
            preloaded.wait(timeout=30)
        # A task forced onto a worker of another key is refused there, not evaluated.
        request = EvaluationRequest(
            JobContext("trsm_small", None, "float32", "sm_90", "sim-a"), source
        )
        future = client.submit(run_evaluation, request, workers=by_key["sim-b"], pure=False)
        with pytest.raises(WrongWorkerError, match="'sim-a' on worker 'sim-b'"):
            future.result(timeout=60)


def test_options_and_device_indices() -> None:
    assert ClusterOptions(scheduler="tcp://a:1", gpus=(0,)).problem() is not None
    assert ClusterOptions().problem() is not None
    assert "twice" in (ClusterOptions(gpus=(0, 0)).problem() or "")
    assert ClusterOptions(gpus=(0, 1)).resume_options() == " --gpus 0,1"
    assert physical_gpu(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == 6
    assert physical_gpu(1, {}) == 1
    with pytest.raises(ClusterError, match="makes 2 device"):
        physical_gpu(2, {"CUDA_VISIBLE_DEVICES": "4,6"})
    with pytest.raises(ClusterError, match="UUID"):
        physical_gpu(0, {"CUDA_VISIBLE_DEVICES": "GPU-1a2b"})
    info = {
        "tcp://a": {"resources": {"GPU": 1, "gpu-nvidia-h200": 1}},
        "tcp://b": {"resources": {"GPU": 1, "gpu-nvidia-a100": 1}},
        "tcp://c": {"resources": {}},
    }
    assert keys_of(info) == {"nvidia-h200": ["tcp://a"], "nvidia-a100": ["tcp://b"]}


def test_no_cluster_means_no_dask_import() -> None:
    code = (
        "import sys, evolver.runner, evaluator.openevolve_entry\n"
        "import kernevo.cli, kernevo.cli.cluster, kernevo.cli.evolve, kernevo.cli.queue\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_new_best_runs_memcheck_and_the_profile_on_a_worker_of_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU branch of ``RemoteEvaluations.evaluate`` on CPU: an in-process worker holds a
    plugin with a device index (its GPU worker process never starts), and the GPU functions
    the tasks call are replaced by stand-ins that say what they were given."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    import evaluator.dask_plugin as plugin_module
    from evaluator.dask_client import RemoteEvaluations
    from evaluator.new_best import JobBest, MemcheckOutcome
    from evaluator.report import CheckFailure, EvaluationReport

    scores = iter([1.5, 1.2, 2.0])  # a new best, not one, a new best whose memcheck finds a write
    findings = iter([None, CheckFailure("sanitizer_memcheck", (33, 31), detail="write past B")])
    ran: list[str] = []

    def fake_candidate(evaluator: Any, source: str, parent: Any) -> tuple[Any, bytes]:
        report = EvaluationReport(evaluator.spec.path_id, evaluator.dtype, stage="time")
        report.combined_score = next(scores)
        return report, b"cubin of " + source.removeprefix("// ").encode()

    def fake_memcheck(cubin: bytes, spec: Any, dtype: str, gpu_index: int) -> MemcheckOutcome:
        ran.append(f"memcheck {cubin!r} on GPU {gpu_index}")
        failure = next(findings)
        return MemcheckOutcome(failure, ran=True, shapes=() if failure else ((33, 31),))

    def fake_profile(evaluator: Any, cubin: bytes, report: Any) -> None:
        ran.append(f"profile on GPU {evaluator.gpu_index}")
        report.profile = {"sm__throughput": 42.0}

    monkeypatch.setattr(plugin_module, "evaluate_candidate", fake_candidate)
    monkeypatch.setattr(plugin_module, "memcheck", fake_memcheck)
    monkeypatch.setattr(plugin_module, "attach_profile", fake_profile)
    plugin = GpuEvaluationPlugin(3, "sim-gpu")
    workers = {"gpu3": {"cls": Worker, "options": nanny_options(plugin, "gpu3")}}
    scheduler = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}}
    with SpecCluster(workers=workers, scheduler=scheduler) as spec, Client(spec):
        context = JobContext("trsm_small", None, "float32", "sm_90", "sim-gpu")
        remote = RemoteEvaluations(spec.scheduler_address, context, wait_s=60)
        best = JobBest(None)
        try:
            first = remote.evaluate("// seed", None, best)
            second = remote.evaluate("// lower", None, best)
            third = remote.evaluate("// faster", None, best)
        finally:
            remote.close()
    assert first.passed and first.profile == {"sm__throughput": 42.0}
    assert any(n.startswith("memcheck before becoming the job's best: clean") for n in first.notes)
    assert second.passed and second.profile == {} and "memcheck" not in second.phase_seconds
    assert third.status == "wrong" and third.failure is not None
    assert third.failure.check == "sanitizer_memcheck" and third.combined_score == 0.0
    assert best.score() == 1.5
    assert ran == ["memcheck b'cubin of seed' on GPU 3", "profile on GPU 3",
                   "memcheck b'cubin of faster' on GPU 3"]  # fmt: skip


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie awaiting its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gpu_child_pid(dask_worker: Any) -> int | None:
    """The pid of the worker plugin's GPU worker process (run through ``Client.run``)."""
    gpu = dask_worker.plugins["kernevo-gpu"]._gpu_worker
    return gpu._proc.pid if gpu is not None and gpu._proc is not None else None


@pytest.mark.gpu
def test_the_seed_on_a_gpu_worker_and_its_gpu_process_dies_with_it() -> None:
    """On the GPU: a local cluster of one GPU worker (``--gpus 0``'s) evaluates the seed in
    full (quick check, verification, timing, memcheck and profile as the job's first best);
    SIGKILLing the Dask worker process takes its GPU worker process with it, and the nanny's
    new worker evaluates again."""
    from distributed import Client

    from evaluator.dask_client import RemoteEvaluations
    from evaluator.new_best import JobBest
    from evolver.cluster import start_local_cluster

    source = get_path("trsm_small").seed_source()
    # start_local_cluster drops CUDA_VISIBLE_DEVICES, its nanny adds Dask's variables.
    with _environment_restored():
        cluster = start_local_cluster((0,), compile_only=False)
        try:
            with Client(cluster) as client:
                (key,) = keys_of(client.scheduler_info(n_workers=-1)["workers"])
                context = JobContext("trsm_small", None, "float64", "sm_90", key)
                remote = RemoteEvaluations(cluster.scheduler_address, context, wait_s=600)
                try:
                    report = remote.evaluate(source, None, JobBest(None))
                    assert report.status == "ok", report.failure
                    assert report.gpu is not None and report.gpu.key == key
                    assert report.combined_score > 0 and report.timings
                    (address,) = client.scheduler_info(n_workers=-1)["workers"]
                    child = client.run(_gpu_child_pid, workers=[address])[address]
                    worker_pid = client.run(os.getpid, workers=[address])[address]
                    assert child is not None
                    os.kill(worker_pid, signal.SIGKILL)
                    deadline = time.monotonic() + 10
                    while _alive(child) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    assert not _alive(child), "the GPU worker process outlived the Dask worker"
                    client.wait_for_workers(1, timeout=120)
                    again = remote.evaluate(source, None, JobBest(None))
                    assert again.status == "ok", again.failure
                finally:
                    remote.close()
        finally:
            cluster.close()
