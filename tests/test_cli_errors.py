"""Bad input and missing infrastructure end the ``kernevo`` command with one line on stderr and
a non-zero exit, never a traceback."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import repo_pythonpath, unused_port
from http_stub import JSON, StubServer, reply

from evolver.errors import NoGpuError
from evolver.gpu import GpuNotFoundError, absence_message, query_gpu
from kernevo.cli import main
from seeds.registry import PATHS

# What an unknown-path message lists (seeds.registry.get_path: sorted ids).
KNOWN_PATHS = ", ".join(sorted(PATHS))


def _kernevo(
    *args: str, tmp_path: Path, timeout: float = 120, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["KERNEVO_DATABASE_URL"] = f"sqlite:///{tmp_path / 'lineage.db'}"
    env["KERNEVO_WORK_DIR"] = str(tmp_path / "runs")
    env["KERNEVO_API_URL"] = f"http://127.0.0.1:{unused_port()}"
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _has_gpu() -> bool:
    try:
        query_gpu(0)
    except NoGpuError:
        return False
    return True


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_gpu(), reason="a CUDA GPU is present")
def test_no_gpu_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo("evolve", "--path", "trsm_small", "--dtype", "float64", tmp_path=tmp_path)
    )
    assert line.startswith("kernevo: no CUDA GPU found")
    if not _has_driver():
        assert line.startswith("kernevo: no CUDA GPU found: no NVIDIA driver (libcuda.so.1")
    assert not (tmp_path / "lineage.db").exists()  # nothing was created


@pytest.mark.skipif(_has_driver(), reason="an NVIDIA driver is installed")
def test_without_a_driver_the_probe_says_no_nvidia_driver() -> None:
    for index in (0, 97):
        with pytest.raises(GpuNotFoundError) as caught:
            query_gpu(index)
        assert caught.value.kind == "no_driver"
        assert str(caught.value).startswith("no CUDA GPU found: no NVIDIA driver (")


@pytest.mark.skipif(_has_driver(), reason="an NVIDIA driver is installed")
def test_without_a_driver_bench_says_no_nvidia_driver(tmp_path: Path) -> None:
    """The evaluator's worker reports CUDA's "insufficient driver"; the report says what it is."""
    done = subprocess.run(
        [sys.executable, "-m", "evaluator.bench", "--dtype", "float64"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 1
    assert "FAILED: gpu_unavailable. no CUDA GPU found: no NVIDIA driver (" in done.stdout


@pytest.mark.gpu
def test_an_index_past_the_devices_is_out_of_range() -> None:
    assert query_gpu(0).index == 0  # the GPU answers
    with pytest.raises(GpuNotFoundError) as caught:
        query_gpu(1023)
    assert caught.value.kind == "index_out_of_range"
    assert "no CUDA GPU found: device index 1023 out of range (" in str(caught.value)


@pytest.mark.parametrize(
    ("data", "kind_text"),
    [
        ({"kind": "no_driver", "reason": "libcuda.so.1 cannot be loaded"}, ": no NVIDIA driver ("),
        (
            {"kind": "old_driver", "reason": "", "driver": 12020, "runtime": 13000},
            ": the NVIDIA driver (CUDA 12.2) is older than the CUDA runtime (13.0)",
        ),
        ({"kind": "no_device", "reason": "cudaErrorNoDevice"}, ": no CUDA device ("),
        (
            {"kind": "index_out_of_range", "count": 2},
            ": device index 5 out of range (2 devices: 0..1)",
        ),
        ({"kind": "query_failed", "reason": "boom"}, ": the device query failed (boom)"),
    ],
)
def test_each_absence_of_a_gpu_has_its_own_message(
    monkeypatch: pytest.MonkeyPatch, data: dict, kind_text: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    message = absence_message(5, data)
    assert message.startswith(f"no CUDA GPU found{kind_text}")
    if data["kind"] == "no_device":
        assert message.endswith("CUDA_VISIBLE_DEVICES='')")


def test_missing_device_index_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo(
            "evolve",
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--gpu",
            "97",
            tmp_path=tmp_path,
        )
    )
    assert line.startswith("kernevo: no CUDA GPU found")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--path", "trsm_tiny", "--dtype", "float64"],
         "argument --path: unknown path 'trsm_tiny'; known paths: " + KNOWN_PATHS),
        (["--path", "../../etc", "--dtype", "float32", "--compile-only", "--iterations", "1"],
         "argument --path: unknown path '../../etc'; known paths: " + KNOWN_PATHS),
        (["--path", "trsm_small", "--dtype", "int8", "--compile-only"],
         "argument --dtype: unknown dtype 'int8'; expected one of float32, float64, complex64, "
         "complex128"),
        (["--resume", "--path", "trsm_tiny", "--dtype", "float64"],
         "argument --path: unknown path 'trsm_tiny'; known paths: " + KNOWN_PATHS),
    ],
)  # fmt: skip
def test_an_unknown_path_or_dtype_on_the_command_line_is_a_usage_error(
    tmp_path: Path, args: list[str], line: str
) -> None:
    done = _kernevo("evolve", *args, tmp_path=tmp_path)
    assert done.returncode == 2
    assert _one_line_error(done) == f"kernevo evolve: error: {line} (see kernevo evolve --help)"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing ran


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("path: ../../etc\ndtype: float32\n",
         "path: unknown path '../../etc'; known paths: " + KNOWN_PATHS),
        ("path: trsm_small\ndtype: int8\n", "dtype: unknown dtype 'int8'; expected one of "),
        ("path: trsm_small\ndtype: float32\nislands: 65\n",
         "islands: Input should be less than or equal to 64"),
    ],
)  # fmt: skip
def test_the_same_bad_value_in_a_job_file_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, line: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(content)
    # The job file is configuration: exit 2, as for the same value on the command line.
    assert main(["evolve", "--config", str(job), "--work-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernevo: {job}: {line}") and len(err.splitlines()) == 1


def test_a_command_line_value_the_job_file_path_refuses_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dtype is a known dtype but not one of the file's path: the option is at fault."""
    import dataclasses

    from seeds import registry

    spec = registry.PATHS["trsm_small"]
    monkeypatch.setitem(
        registry.PATHS, "trsm_small", dataclasses.replace(spec, dtypes=("float64",))
    )
    job = tmp_path / "job.yaml"
    job.write_text("path: trsm_small\ncompile_only: true\n")
    line = _usage_error(capsys, ["evolve", "--config", str(job), "--dtype", "float32"])
    assert line == (
        "kernevo evolve: error: argument --dtype: path trsm_small has no float32 kernel; it "
        "implements float64 (see kernevo evolve --help)"
    )
    assert not (tmp_path / "runs").exists()


def _job_option_cases() -> list[tuple[str, str, int, int]]:
    from evolver.job_config import int_range

    names = ["iterations", "gpu", "checkpoint_interval", "islands", "population", "seed"]
    return [(f"--{n.replace('_', '-')}", n, *int_range(n)) for n in [*names, "promote_every"]]


@pytest.mark.parametrize(("option", "name", "low", "high"), _job_option_cases())
def test_job_options_take_their_ranges_from_the_job_configuration(
    capsys: pytest.CaptureFixture[str], option: str, name: str, low: int, high: int
) -> None:
    from kernevo.cli.parser import _parser

    for value in (low, high):
        args = _parser().parse_args([*_EVOLVE, option, str(value)])
        assert getattr(args, name) == value
    for value in (low - 1, high + 1, 10**20):
        line = _usage_error(capsys, [*_EVOLVE, option, str(value)])
        assert line.startswith(f"kernevo evolve: error: argument {option}: ")
        assert f"must be {low}..{high}, not {value}" in line
    with pytest.raises(SystemExit):
        main(["evolve", "--help"])
    assert f"{low}..{high}" in capsys.readouterr().out  # the help says the range


def test_a_job_file_asking_for_10_to_the_20_islands_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    job = tmp_path / "big.yaml"
    job.write_text(
        "path: trsm_small\ndtype: float32\ncompile_only: true\niterations: 1\n"
        "islands: 100000000000000000000\n"
    )
    start = time.monotonic()
    done = _kernevo("evolve", "--config", str(job), tmp_path=tmp_path)
    assert time.monotonic() - start < 60
    assert done.returncode == 2
    assert _one_line_error(done) == (
        f"kernevo: {job}: islands: Input should be less than or equal to 64"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]  # no database, no job


def test_misspelt_config_key_is_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("path: trsm_small\ndtype: float32\nislandz: 4\n")
    line = _one_line_error(_kernevo("evolve", "--config", str(job), tmp_path=tmp_path))
    assert line == f"kernevo: {job}: unknown key 'islandz'; did you mean 'islands'?"


def test_unreachable_llm_endpoint_is_one_line_and_fast(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{unused_port()}/v1"
    start = time.monotonic()
    line = _one_line_error(
        _kernevo(
            "evolve",
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--compile-only",
            "--llm-base-url",
            base,
            "--llm-model",
            "some-model",
            tmp_path=tmp_path,
        )
    )
    assert time.monotonic() - start < 60
    assert line.startswith(f"kernevo: LLM endpoint {base} is unreachable (ConnectError")


def test_llm_endpoint_without_model_or_key_is_one_line(tmp_path: Path) -> None:
    args = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
    done = _kernevo(*args, "--llm-base-url", "http://127.0.0.1:9/v1", tmp_path=tmp_path)
    assert done.returncode == 2  # decided before anything runs: a usage error
    assert _one_line_error(done) == (
        "kernevo evolve: error: argument --llm-base-url: an LLM endpoint needs a model "
        "(--llm-model, llm.model in the --config file or KERNEVO_LLM_MODEL) (see kernevo "
        "evolve --help)"
    )
    done = _kernevo(
        *args,
        "--llm-base-url",
        "http://127.0.0.1:9/v1",
        "--llm-model",
        "m",
        "--llm-api-key-env",
        "KERNEVO_TEST_UNSET_KEY",
        tmp_path=tmp_path,
    )
    assert done.returncode == 2  # a configuration error too (tests/test_llm_key_variable.py)
    assert _one_line_error(done) == (
        "kernevo evolve: error: argument --llm-api-key-env: the LLM API key variable "
        "KERNEVO_TEST_UNSET_KEY is not set in the environment (see kernevo evolve --help)"
    )


def test_wrong_database_url_is_one_line(tmp_path: Path) -> None:
    done = _kernevo(
        "evolve",
        "--path",
        "trsm_small",
        "--dtype",
        "float64",
        "--compile-only",
        "--database-url",
        "nosuchdb://localhost/x",
        tmp_path=tmp_path,
    )
    assert done.returncode == 2  # an unknown dialect is configuration (test_cli_exit_codes.py)
    assert _one_line_error(done).startswith(
        "kernevo evolve: error: argument --database-url: 'nosuchdb://localhost/x': unknown "
        "database kind 'nosuchdb'"
    )
    # A database that does not answer is infrastructure: exit 1.
    done = _kernevo(
        "jobs", "--database-url", "postgresql+psycopg://u@127.0.0.1:1/x", tmp_path=tmp_path
    )
    assert done.returncode == 1
    line = _one_line_error(done)
    assert line.startswith("kernevo: database postgresql+psycopg://u@127.0.0.1:1/x:")


def test_resume_of_an_unknown_job_is_one_line(tmp_path: Path) -> None:
    """A resume against a database file that does not exist says so and creates nothing (it
    created and migrated the file, then said "job 41 not found"): caught by the CLI's
    ``open_store(create=False)`` before ``resume_job``. In a database that exists, the job's
    absence is the line."""
    from evolver.store import open_store

    database = tmp_path / "lineage.db"
    for resume in (["41"], ["--path", "trsm_small", "--dtype", "float64"]):
        done = _kernevo("evolve", "--resume", *resume, tmp_path=tmp_path)
        assert done.returncode == 1
        assert _one_line_error(done) == (
            f"kernevo: database sqlite:///{database}: no such file {database} (run 'kernevo "
            "evolve' without --resume to start a new job, or point --database-url (or "
            "KERNEVO_DATABASE_URL) at the job's database)"
        )
        assert not database.exists()
    open_store(f"sqlite:///{database}").dispose()
    line = _one_line_error(_kernevo("evolve", "--resume", "41", tmp_path=tmp_path))
    assert line == "kernevo: job 41 not found; 'kernevo jobs' lists the jobs"
    line = _one_line_error(
        _kernevo(
            "evolve", "--resume", "--path", "trsm_small", "--dtype", "float64", tmp_path=tmp_path
        )
    )
    assert line == "kernevo: no unfinished trsm_small float64 job to resume"


def test_usage_errors_and_unreachable_service_are_one_line(tmp_path: Path) -> None:
    line = _one_line_error(_kernevo("evolve", "--iterations", "many", tmp_path=tmp_path))
    assert line.startswith("kernevo evolve: error: argument --iterations")
    line = _one_line_error(
        _kernevo(
            "best",
            "--dtype",
            "float64",
            "--m",
            "64",
            "--n",
            "64",
            "--gpu",
            "NVIDIA H200",
            tmp_path=tmp_path,
        )
    )
    assert line.startswith("kernevo: service at http://127.0.0.1:") and "unreachable" in line


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--resume", "99999999999999999999"),  # past a 32-bit database id
        ("--resume", "0"),
        ("--seed", "-1"),
        ("--seed", "99999999999999999999999"),  # past OpenEvolve's 32-bit seed
        ("--iterations", "0"),
        ("--islands", "0"),
    ],
)
def test_out_of_range_numbers_are_usage_errors_before_any_job(
    tmp_path: Path, option: str, value: str
) -> None:
    done = _kernevo(
        "evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
        option, value, tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert _one_line_error(done).startswith(f"kernevo evolve: error: argument {option}: ")
    assert not list(tmp_path.glob("*.db"))


def test_jobs_lists_a_finished_compile_only_job(tmp_path: Path) -> None:
    done = _kernevo(
        "evolve",
        "--path",
        "trsm_small",
        "--dtype",
        "complex64",
        "--compile-only",
        "--iterations",
        "2",
        tmp_path=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    listing = _kernevo("jobs", tmp_path=tmp_path)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split()[:3] == ["id", "path/bucket", "dtype"]
    assert row.split()[:5] == ["1", "trsm_small/m64n64", "complex64", "none", "complete"]
    assert row.split()[5].endswith(("s", "m")) and row.split()[6] == "2/2"  # heartbeat age, iter
    assert row.split()[-1] == "offline/offline-mutator"


def test_an_unwritable_work_folder_is_one_line_and_leaves_no_job(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
    for _ in range(2):
        done = _kernevo(*args, "--work-dir", str(blocker / "runs"), tmp_path=tmp_path)
        assert done.returncode == 1
        line = _one_line_error(done)
        assert line == (
            f"kernevo: work folder {blocker / 'runs'} cannot be created: {blocker} is a file, "
            "not a folder"
        )
    assert not (tmp_path / "lineage.db").exists()  # no job row, not even a database


def test_serve_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    for port in ("99999", "0", "http"):
        done = _kernevo("serve", "--port", port, tmp_path=tmp_path)
        assert done.returncode == 2
        assert _one_line_error(done).startswith("kernevo serve: error: argument --port: ")
    assert not (tmp_path / "lineage.db").exists()


def test_serve_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _kernevo("serve", "--port", str(port), tmp_path=tmp_path)
    assert done.returncode == 1
    assert (
        _one_line_error(done)
        == f"kernevo: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_a_yaml_syntax_error_names_its_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("path: trsm_small\ndtype: [float32\nislands: 4\n")
    done = _kernevo("evolve", "--config", str(job), tmp_path=tmp_path)
    assert done.returncode == 2
    assert _one_line_error(done) == (
        f"kernevo: {job}: invalid YAML at line 3, column 8: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 2, column 8)"
    )


def test_read_only_commands_create_no_database_or_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    done = _kernevo("jobs", "--database-url", f"sqlite:///{missing}", tmp_path=tmp_path)
    assert done.returncode == 1
    assert _one_line_error(done) == (
        f"kernevo: database sqlite:///{missing}: no such file {missing} "
        "('kernevo evolve' or 'kernevo serve' creates and migrates it)"
    )
    assert not (tmp_path / "no").exists()
    done = _kernevo("jobs", tmp_path=tmp_path)  # KERNEVO_DATABASE_URL: tmp_path/lineage.db
    assert "no such file" in _one_line_error(done)
    done = _kernevo(
        "best",
        "--dtype",
        "float64",
        "--m",
        "8",
        "--n",
        "8",
        "--gpu",
        "nvidia-h200",
        tmp_path=tmp_path,
    )
    assert "unreachable" in _one_line_error(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ctrl_c_stops_a_job_cleanly_and_exits_130(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, func, select, text
    from sqlalchemy.orm import Session

    from db.models import Job, Program

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    job = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small"]
        + ["--dtype", "float32", "--compile-only", "--iterations", "1000"]
        + ["--database-url", url, "--work-dir", str(tmp_path / "runs")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    engine = create_engine(url)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert job.poll() is None, job.communicate()
            try:
                with Session(engine) as s:
                    s.execute(text("SELECT 1 FROM alembic_version"))
                    if (s.scalar(select(func.count(Program.id))) or 0) >= 5:
                        break
            except Exception:  # not created or migrated yet
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the job recorded too few programs in time")
        os.killpg(job.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 130, out[-2000:] + err
    assert err == ""  # no traceback, neither from the job nor from its pool workers
    last = out.splitlines()[-1]
    assert last.startswith("job 1 stopped by SIGINT at iteration ")
    assert "resume with 'kernevo evolve --resume 1'" in last
    with Session(engine) as s:
        row = s.get(Job, 1)
        assert row is not None
        assert (row.state, row.last_failure_kind) == ("failed", "interrupted")
        assert 1 <= row.iteration < 1000
    engine.dispose()


# --- the environment: unknown, empty or unparsable KERNEVO_* variables (usage errors) ---------

_SUBCOMMANDS = [
    ("evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"),
    ("serve", "--port", "1"),
    ("best", "--dtype", "float64", "--m", "8", "--n", "8", "--gpu", "nvidia-h200"),
    ("jobs",),
]


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "KERNEVO_GPUS",
            "1",
            "unknown environment variable KERNEVO_GPUS; did you mean KERNEVO_GPU?",
        ),
        (
            "KERNEVO_REQUEST_TIMEOUT_S",
            "abc",
            "KERNEVO_REQUEST_TIMEOUT_S='abc': expected seconds, a number > 0 and <= 600 (input "
            "should be a valid number, unable to parse string as a number)",
        ),
        (
            "KERNEVO_GPU",
            "-1",
            "KERNEVO_GPU='-1': expected a CUDA device index 0..1023 (input should be greater "
            "than or equal to 0)",
        ),
        ("KERNEVO_CACHE_DIR", "", "KERNEVO_CACHE_DIR is set but empty; unset it for the default"),
        ("KERNEVO_API_TOKEN", " ", "KERNEVO_API_TOKEN is set but empty"),
        ("KERNEVO_API_URL", "localhost:8000", "KERNEVO_API_URL='localhost:8000': not an http://"),
        ("KERNEVO_GPU", "9" * 100_000, "KERNEVO_GPU='999999999999999999999999999999…(100000"),
    ],
)
def test_environment_problems_are_one_line_usage_errors_in_every_subcommand(
    tmp_path: Path,
    variable: str,
    value: str,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In process (28 interpreter starts took 60 s of CI on 2 cores); the test below runs one
    # case as a real process.
    for name in [k for k in os.environ if k.startswith("KERNEVO_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KERNEVO_DATABASE_URL", f"sqlite:///{tmp_path / 'lineage.db'}")
    monkeypatch.setenv("KERNEVO_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("KERNEVO_API_URL", f"http://127.0.0.1:{unused_port()}")
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    for args in _SUBCOMMANDS:
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert "Traceback" not in err and len(err.splitlines()) == 1, (args, err)
        assert err.startswith(f"kernevo: {line}"), args
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no database, no work folder


def test_an_environment_problem_is_a_usage_error_of_the_real_process(tmp_path: Path) -> None:
    done = _kernevo("jobs", tmp_path=tmp_path, env_extra={"KERNEVO_GPUS": "1"})
    assert done.returncode == 2, done.stderr
    assert _one_line_error(done).startswith("kernevo: unknown environment variable KERNEVO_GPUS")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_variable_named_for_the_llm_key_is_not_unknown(tmp_path: Path) -> None:
    done = _kernevo(
        "evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
        "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m",
        "--llm-api-key-env", "KERNEVO_TEST_KEY", tmp_path=tmp_path,
        env_extra={"KERNEVO_TEST_KEY": "secret"},
    )  # fmt: skip
    assert done.returncode == 1
    assert "unknown environment variable" not in _one_line_error(done)


# --- absurd arguments (usage errors, in process: a 10^6-character argument exceeds exec's limit)


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert len(lines[0]) < 300, lines[0][:300]
    return lines[0]


_EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64"]
_BEST = ["best", "--dtype", "float64", "--m", "8", "--n", "8"]


@pytest.mark.parametrize(
    ("argv", "option", "says"),
    [
        ([*_EVOLVE, "--gpu", "9" * 1_000_000], "--gpu", "must be 0..1023, not a 1000000-digit"),
        ([*_EVOLVE, "--gpu", "-1"], "--gpu", "must be 0..1023, not -1"),
        ([*_EVOLVE, "--path", "p" * 1_000_000], "--path", "of at most 256 characters"),
        ([*_EVOLVE, "--path", ""], "--path", "not an empty string"),
        ([*_EVOLVE, "--work-dir", ""], "--work-dir", "not an empty string"),
        ([*_EVOLVE, "--config", "x" * 5000], "--config", "of at most 4096 characters"),
        ([*_EVOLVE, "--database-url", " "], "--database-url", "not an empty string"),
        ([*_EVOLVE, "--llm-base-url", "localhost:11434"], "--llm-base-url", "http:// or https://"),
        ([*_EVOLVE, "--llm-api-key-env", "MY KEY"], "--llm-api-key-env", "variable name"),
        ([*_EVOLVE, "--llm-model", "a\nb"], "--llm-model", "on one line"),
        (
            [*_EVOLVE, "--llm-model", "m\udcff"],
            "--llm-model",
            "a model name in UTF-8, not 'm\\udcff'",
        ),
        ([*_EVOLVE, "--islands", "2147483647"], "--islands", "must be 1..64, not 2147483647"),
        ([*_BEST[:2], "int8", *_BEST[3:]], "--dtype", "unknown dtype 'int8'; expected one of"),
        ([*_BEST, "--op", "gemm"], "--op", "unknown op 'gemm'; known ops: trsm"),
        ([*_BEST, "--gpu", "x" * 1_000_000], "--gpu", "of at most 256 characters"),
        ([*_BEST[:4], "8.5", "--n", "8"], "--m", "expected an integer value of m, not '8.5'"),
        ([*_BEST, "--api-url", "ftp://x"], "--api-url", "http:// or https://"),
        ([*_BEST, "--api-url", "http://[::1"], "--api-url", "not a URL"),
        (["jobs", "--api-url", "x" * 1_000_000], "--api-url", "of at most 4096 characters"),
        (["jobs", "--limit", "9" * 1_000_000], "--limit", "not a 1000000-digit number"),
        (["jobs", "--state", "s" * 1_000_000], "--state", "invalid choice: 'ssssss"),
        (["serve", "--host", ""], "--host", "not an empty string (for every interface say"),
        (["serve", "--host", "a" * 1_000_000], "--host", "expected an IP address or host name"),
        (["serve", "--host", "local host"], "--host", "expected an IP address or host name"),
        (["serve", "--host=-x.example"], "--host", "expected an IP address or host name"),
    ],
)
def test_absurd_arguments_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, says: str
) -> None:
    line = _usage_error(capsys, argv)
    assert line.startswith(f"kernevo {argv[0]}: error: argument {option}: "), line
    assert says in line


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "my-host.example."])
def test_real_hosts_pass_the_host_check(host: str) -> None:
    from kernevo.cli.arguments import _host

    assert _host(host) == host


def test_an_unknown_subcommand_or_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid choice" in _usage_error(capsys, ["evolv"])
    assert "unrecognized arguments" in _usage_error(capsys, ["jobs", "--bogus"])
    assert "the following arguments are required" in _usage_error(capsys, ["best"])


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["best", "--dtype", "float32", "--gpu", "h200", "--path", "trsm_small"], "kernevo best"),
        (["jobs", "extra"], "kernevo jobs"),
        (["token", "list", "--bogus"], "kernevo token list"),
        (["evolve", "--path", "trsm_small", "--dtype", "float32", "-x"], "kernevo evolve"),
    ],
)
def test_an_option_the_subcommand_lacks_is_refused_in_its_name(
    capsys: pytest.CaptureFixture[str], argv: list[str], prefix: str
) -> None:
    # The user mistyped an option of this subcommand: its own usage, not the top level's.
    said = _usage_error(capsys, argv)
    assert said.startswith(f"{prefix}: error: unrecognized arguments: ")
    assert said.rstrip().endswith(f"(see {prefix} --help)")


# --- job files that do not decode or parse (errors of the input: exit 1) -----------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("path: trsm_small\ndtype: float64  # café\n".encode("latin-1"),
         "not UTF-8 text (byte 0xe9 at offset 38); save the file as UTF-8"),
        ("path: trsm_small\n".encode("utf-16"), "not UTF-8 text (byte 0xff at offset 0)"),
        (b"path: trsm_small\x00\n", "invalid YAML: character U+0000 at offset 16"),
        (b"path: trsm_small\ndtype: float64\nislands: 2\nislands: 4\n",
         "invalid YAML at line 4, column 1: found the key 'islands' twice"),
        (b"[" * 100_000, "invalid YAML: nested too deeply"),
        (b"# " + b"x" * (1 << 20), "larger than 1048576 bytes; not a job config"),
        (b"- path\n- dtype\n", "expected a mapping of keys to values"),
        (b"path: trsm_small\ndtype: float64\n? [1, 2]\n: 3\n", "found unhashable key"),
        (b"path: trsm_small\ndtype: float64\nllm: {base_url: 'http://[::1', model: m}\n",
         "llm.base_url: not a URL: 'http://[::1' (Invalid IPv6 URL)"),
        (b"path: trsm_small\ndtype: float64\nllm: {api_key_env: A B}\n",
         "llm.api_key_env: not an environment variable name"),
    ],
)  # fmt: skip
def test_a_job_file_that_does_not_decode_or_parse_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, says: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(content)
    assert main(["evolve", "--config", str(job), "--work-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernevo: {job}: ") and says in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("kind", ["folder", "missing"])
def test_a_job_file_name_that_names_no_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The argument itself is wrong (exit 2); what a job file says is input (exit 1)."""
    job = tmp_path if kind == "folder" else tmp_path / "bad.yaml"
    with pytest.raises(SystemExit) as exited:
        main(["evolve", "--config", str(job), "--work-dir", str(tmp_path / "r")])
    assert exited.value.code == 2
    says = f"no such job file: '{job}'" if kind == "missing" else f"'{job}' is not a file"
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"kernevo evolve: error: argument --config: {says}")


# --- python -m evaluator.bench -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--dtype", "float16"],
            "argument --dtype: unknown dtype 'float16' for trsm_small; known:",
        ),
        (["--path", "trsm_tiny"], "argument --path: unknown path 'trsm_tiny'; known paths:"),
        (["--source", "/no/such.cu"], "argument --source: cannot read /no/such.cu: No such file"),
        (["--source", "BAD"], "is not UTF-8 text (byte 0xe9 at offset 3)"),
        (["--source", "BIG"], "is larger than 1048576 bytes"),
        (["--gpu", "-1"], "argument --gpu: expected a device index 0..1023, not '-1'"),
        (["--gpu", "9" * 100_000], "(100000 characters)"),
        (
            ["--json", "/no/such/dir/out.json"],
            "argument --json: folder /no/such/dir does not exist",
        ),
        (["--label", ""], "argument --label: expected a label on one line"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bench_arguments_are_one_line_usage_errors(
    tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "BAD").write_bytes(b"caf\xe9")
    (tmp_path / "BIG").write_bytes(b"//" + b"x" * (1 << 20))
    done = subprocess.run(
        [sys.executable, "-m", "evaluator.bench", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": repo_pythonpath()},
    )  # fmt: skip
    assert done.returncode == 2
    line = _one_line_error(done)
    assert line.startswith("python -m evaluator.bench: error: ") and says in line
    assert len(line) < 300
    assert done.stdout == ""  # nothing ran


def test_an_error_answer_is_one_line_whatever_its_shape() -> None:
    import json

    from kernevo.cli.service import _error_detail

    listed = {"detail": [{"loc": ["query", "m"], "msg": "too big"}, {"loc": [], "msg": "more"}]}
    assert _error_detail(json.dumps(listed).encode()) == "query.m: too big; : more"
    assert _error_detail(b'{"detail": "no champion"}') == "no champion"
    # Not a kernevo error body: the caller says so rather than echo it.
    assert _error_detail(b"[1, 2]") is None
    assert _error_detail(b"<html> " + b"x " * 1_000_000) is None
    huge = _error_detail(json.dumps({"detail": "x\n" * 1_000_000}).encode())
    assert huge is not None
    assert len(huge) <= 1001 and "\n" not in huge


# --- a reader that goes away (kernevo jobs | head -3): quiet, exit 0 ---------------------------


def _stub_service(rows: int) -> StubServer:
    """A local service answering ``/v1/kernels/best`` with a champion and ``/v1/jobs`` with
    ``rows`` jobs, in a thread of this process."""
    import json

    from test_loader_resolver import champion_json

    job = {
        "id": 1, "path": "trsm_small", "dtype": "float64", "gpu": "none", "state": "running",
        "iteration": 3, "config": {"iterations": 10}, "best_score": 0.0, "best_speedup": 0.0,
        "programs": 4, "backend": "offline", "model": "offline-mutator", "stale": False,
        "heartbeat_age_s": 3.0,
    }  # fmt: skip
    answers = {
        "/v1/kernels/best": json.dumps(champion_json(signer=None)).encode(),
        "/v1/jobs": json.dumps([{**job, "id": i + 1} for i in range(rows)]).encode(),
    }
    return StubServer(
        lambda handler: reply(handler, 200, answers[handler.path.split("?")[0]], JSON)
    )


@pytest.fixture
def stub_service() -> Iterator[StubServer]:
    with _stub_service(rows=3000) as stub:  # ~400 KB listed: more than a pipe holds
        yield stub


def _into_closed_pipe(
    *args: str, tmp_path: Path, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``kernevo ARGS`` with stdout a real pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env.update(env_extra or {})
    try:
        return subprocess.run(
            [sys.executable, "-m", "kernevo.cli", *args],
            env=env, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        os.close(write_end)


def _a_database_with_a_job(tmp_path: Path) -> str:
    from db import repository
    from db.migrate import upgrade
    from db.session import make_engine, session_scope

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as s:
        repository.create_job(
            s, path="trsm_small", dtype="float64", gpu="none", shape_bucket="m64n64",
            config={"iterations": 10}, backend="offline", model="offline-mutator",
        )  # fmt: skip
    engine.dispose()
    return url


def test_jobs_best_and_keys_into_a_closed_pipe_exit_quietly(
    tmp_path: Path, stub_service: StubServer
) -> None:
    url = _a_database_with_a_job(tmp_path)
    best = ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "nvidia-h200"]
    for args in (
        ["jobs", "--database-url", url],
        ["jobs", "--api-url", stub_service.url],
        [*best, "--api-url", stub_service.url],
        ["keys", "--dir", str(tmp_path / "keys")],
    ):
        done = _into_closed_pipe(*args, tmp_path=tmp_path)
        assert (done.returncode, done.stderr) == (0, ""), args
    assert list((tmp_path / "keys").iterdir())  # keys did its work before printing


def test_jobs_into_head_1_exits_quietly_when_the_reader_leaves_mid_listing(
    tmp_path: Path, stub_service: StubServer
) -> None:
    """A listing larger than the pipe: the reader leaves while kernevo is still printing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    job = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", "jobs", "--api-url", stub_service.url]
        + ["--limit", "3000"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert job.stdout is not None and job.stderr is not None
    assert job.stdout.readline().split()[:2] == ["id", "path/bucket"]
    job.stdout.close()  # what head -1 does after its line
    assert job.wait(120) == 0
    assert job.stderr.read() == ""


def test_lock_into_a_closed_pipe_writes_the_lock_file_and_exits_quietly(tmp_path: Path) -> None:
    import base64

    from test_loader_lock_cli import _champion
    from test_loader_resolver import SIGNER

    from kernevo.cache import ChampionCache
    from kernevo.keys import public_raw_of

    cache = ChampionCache(tmp_path / "cache")
    cache.store(_champion(program_id=17))
    env = {
        "KERNEVO_TRUSTED_KEYS": base64.b64encode(public_raw_of(SIGNER)).decode(),
        "KERNEVO_TRUST_LOCAL_KEY": "false",
        "KERNEVO_CACHE_DIR": str(cache.root),
    }
    lock = tmp_path / "kernevo.lock"
    done = _into_closed_pipe("lock", "-o", str(lock), tmp_path=tmp_path, env_extra=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert lock.exists()
    # A command that fails after printing keeps its error and exit status.
    lock.unlink()
    env["KERNEVO_TRUSTED_KEYS"] = base64.b64encode(bytes(32)).decode()
    done = _into_closed_pipe("lock", "-o", str(lock), tmp_path=tmp_path, env_extra=env)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()  # the error alone: no "Exception ignored … BrokenPipe"
    assert line.startswith("kernevo: no trusted champion in the disk cache")
    assert not lock.exists()


@pytest.mark.parametrize("args", [("--help",), ("keys", "--dir", "keys")])
def test_a_command_started_with_stdout_closed_runs_quietly(tmp_path: Path, args: tuple) -> None:
    """``kernevo … >&-``: Python has no sys.stdout at all; the command still runs, exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args],
        env=env,
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        cwd=tmp_path,
        preexec_fn=lambda: os.close(1),
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_jobs_table_fits_a_long_path_and_tells_buckets_apart() -> None:
    """A fresh user's finding: trsm_small_batched pushed every later column right of its
    header, and band_bidiag's two buckets' jobs looked the same."""
    from kernevo.cli.job_table import _job_line, _path_bucket

    rows = [
        {"id": 1, "path": "trsm_small_batched", "shape_bucket": "m64n64", "dtype": "float32",
         "gpu": "none", "state": "complete", "iteration": 2, "config": {"iterations": 2},
         "best_score": 0.0, "best_speedup": 0.0, "programs": 3, "backend": "offline",
         "model": "offline-mutator"},
        {"id": 2, "path": "band_bidiag", "shape_bucket": "n2049_16384", "dtype": "float32",
         "gpu": "none", "state": "complete", "iteration": 2, "config": {"iterations": 2},
         "best_score": 0.0, "best_speedup": 0.0, "programs": 3, "backend": "offline",
         "model": "offline-mutator"},
    ]  # fmt: skip
    width = max(len(_path_bucket(row)) for row in rows)
    lines = [_job_line(row, width) for row in rows]
    assert [line.split()[1] for line in lines] == [
        "trsm_small_batched/m64n64", "band_bidiag/n2049_16384",
    ]  # fmt: skip
    # The dtype column starts at the same place in both rows.
    assert lines[0].index("float32") == lines[1].index("float32")
