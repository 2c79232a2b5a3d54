"""One question, one answer on the command line (a fresh user's trial on RESULTS 25's database):

1. A shape value's range is the op's (``seeds.ops``), however it is given: ``best --m 0 --n 1``
   was refused ("must be 1..2147483647") while ``--shape m=0,n=1`` reached the service and the
   op table says trsm takes 0 <= m (BLAS's quick return). Now both reach the service (its 422:
   no path serves it), and a value outside the op's range is one usage error in the op's words,
   for ``--m``/``--n`` and ``--shape`` alike, for every op's parameters.
2. ``--shape`` is as strict as ``--m``: a space around a name or a value is refused in
   ``--m``'s words (``"m= 4096,n=1"`` was taken).
3. ``jobs --watch`` draws exactly ``jobs``'s output (one renderer), redrawn: it lacked the shape
   bucket, the heartbeat, last failure and backend columns and the ``job N failed`` lines.
4. ``serve`` on a port in use left a created and migrated database behind: it binds first now.
"""

from __future__ import annotations

import io
import json
import re
import socket
import sqlite3
import tarfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from http_stub import JSON, StubServer, reply
from ops_service import Service
from rich.console import Console
from sqlalchemy import create_engine, inspect

from db.migrate import upgrade
from kernevo.cli import jobs, main
from seeds.ops import OPS, get_op

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs" / "results" / "2026-12-02_s25_jobs_nokeys.tar.gz"
BEST = ["best", "--gpu", "nvidia-h200", "--dtype", "float64"]
# A shape each op serves or may serve, by parameter name (dtype float32: every op has it).
VALID = {
    "trsm": {"m": 64, "n": 64},
    "solve_tri": {"n": 64, "k": 6, "b2": 4, "b3": 2},
    "band_bidiag": {"n": 4096, "bandwidth": 32},
    "trsm_batched": {"m": 32, "n": 32, "batch": 1000},
}


def _outcome(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exited:
        code = int(exited.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _usage_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code, out, err = _outcome(capsys, argv)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def _pairs(values: dict[str, Any]) -> str:
    return ",".join(f"{name}={value}" for name, value in values.items())


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> str:
    """RESULTS 25's database (five jobs: trsm_blocked at m128_2048 and m2049_16384, two failed
    by SIGTERM; champions), as a URL of a copy of it."""
    folder = tmp_path_factory.mktemp("s25")
    with tarfile.open(SAMPLE) as archive:
        archive.extractall(folder, filter="data")
    url = f"sqlite:///{folder / 'kj' / 'kernevo.db'}"
    # Migrated as 'kernevo serve' would: the archive keeps the schema it was written at, and a
    # reading command (kernevo jobs) refuses a database behind the newest revision.
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def service(sample: str) -> Iterator[Service]:
    served = Service(sample)
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KERNEVO_API_TOKEN", "KERNEVO_API_URL", "KERNEVO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


# --- 1. one range: the op's --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "where"),
    [
        (["--m", "0", "--n", "1"], "m=0, n=1"),  # the trial's case
        (["--shape", "m=0,n=1"], "m=0, n=1"),
        (["--m", "0", "--shape", "n=1"], "m=0, n=1"),
        (["--m", "64", "--n", "0"], "m=64, n=0"),
        (["--shape", "m=0,n=0"], "m=0, n=0"),
    ],
)
def test_trsm_m_or_n_zero_is_asked_of_the_service_however_given(
    capsys: pytest.CaptureFixture[str], service: Service, given: list[str], where: str
) -> None:
    """m = 0 is a valid trsm (the op table's 0 <= m): the service answers that no path serves
    it, and the CLI says what the loader does there, whichever option gave the 0."""
    code, out, err = _outcome(capsys, [*BEST, *given, "--api-url", service.url])
    assert (code, out) == (1, "")
    assert err == (
        f"kernevo: 422 from {service.url}/v1/kernels/best: no path serves trsm float64 at "
        f"{where}; kernevo.load falls back to cuBLAS ?trsm (through CuPy) there\n"
    )


class _Recorder:
    """A local HTTP server that records each query and answers 404 "no champion yet"."""

    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []
        self.server = StubServer(self._answer)
        self.url = self.server.url

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        query = parse_qs(urlsplit(handler.path).query)
        self.queries.append({key: value[0] for key, value in query.items()})
        reply(handler, 404, json.dumps({"detail": "no champion yet"}).encode(), JSON)


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    served = _Recorder()
    with served.server:
        yield served


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("end", ["low", "high"])
def test_each_ops_range_is_taken_at_both_ends_and_sent_as_given(
    capsys: pytest.CaptureFixture[str], recorder: _Recorder, op: str, end: str
) -> None:
    """Every parameter of every op at its declared bound (``ShapeParam.low``/``high``) reaches
    the service, by --shape and, for m and n, by --m/--n too."""
    spec = get_op(op)
    for param in spec.params:
        values: dict[str, Any] = {**VALID[op], param.name: getattr(param, end)}
        # The op's relations hold too: band_bidiag's bandwidth <= n - 1 (so its bandwidth
        # never reaches its own bound), solve_tri's b2 * b3 <= 2147483647.
        if (op, param.name, end) == ("band_bidiag", "bandwidth", "high"):
            continue
        if (op, param.name, end) == ("band_bidiag", "n", "low"):
            values["bandwidth"] = 0  # a 1 x 1 band is diagonal
        if op == "solve_tri" and param.name in ("b2", "b3") and end == "high":
            values["b3" if param.name == "b2" else "b2"] = 1
        ways = [["--shape", _pairs(values)]]
        if param.name in ("m", "n"):
            rest = {name: value for name, value in values.items() if name != param.name}
            ways.append([f"--{param.name}", str(values[param.name]), "--shape", _pairs(rest)])
        for way in ways:
            argv = ["best", "--op", op, "--dtype", "float32", "--gpu", "nvidia-h200", *way]
            code, _, err = _outcome(capsys, [*argv, "--api-url", recorder.url])
            assert code == 1 and "404 from" in err and "no champion yet" in err, (way, err)
            sent = recorder.queries.pop()
            assert {name: int(sent[name]) for name in spec.param_names} == values


@pytest.mark.parametrize("op", list(OPS))
def test_a_value_outside_the_ops_range_is_one_usage_error_however_given(
    capsys: pytest.CaptureFixture[str], op: str
) -> None:
    spec = get_op(op)
    usage = f"(--shape {','.join(f'{name}=…' for name in spec.param_names)})"
    for param in spec.params:
        for value in (param.low - 1, param.high + 1):
            values = {**VALID[op], param.name: value}
            said = (
                f"kernevo best: error: {param.out_of_range(value, op)} {usage} "
                "(see kernevo best --help)"
            )
            argv = ["best", "--op", op, "--dtype", "float32", "--gpu", "nvidia-h200"]
            assert _usage_line(capsys, [*argv, "--shape", _pairs(values)]) == said
            if param.name in ("m", "n"):
                rest = {name: v for name, v in values.items() if name != param.name}
                by_option = [f"--{param.name}", str(value), "--shape", _pairs(rest)]
                assert _usage_line(capsys, [*argv, *by_option]) == said


def test_a_number_of_more_than_30_digits_is_told_by_its_length_however_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = (
        "kernevo best: error: m is out of range: trsm takes 0 <= m <= 2147483647 (rows of A and "
        "B), not a 100000-digit number (--shape m=…,n=…) (see kernevo best --help)"
    )
    assert _usage_line(capsys, [*BEST, "--m", "9" * 100_000, "--n", "1"]) == said
    shape_said = said.replace("100000-digit", "40-digit")
    assert _usage_line(capsys, [*BEST, "--shape", f"m={'9' * 40},n=1"]) == shape_said
    assert _usage_line(capsys, [*BEST, "--m", "9" * 40, "--n", "1"]) == shape_said


def test_help_states_each_ops_ranges_from_the_op_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["best", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for op, spec in OPS.items():
        for param in spec.params:
            assert f"{param.low}..{param.high}" in text
        assert op in text
    assert "--m M m, as --shape m=… (decimal digits): trsm 0..2147483647, trsm_batched 1..64" in (
        text
    )


# --- 2. --shape as strict as --m ------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ("m= 4096,n=1", "expected an integer value of m, not ' 4096' (decimal digits only)"),
        ("m=4096 ,n=1", "expected an integer value of m, not '4096 ' (decimal digits only)"),
        ("m=4096,n=1 ", "expected an integer value of n, not '1 ' (decimal digits only)"),
        (
            " m=4096,n=1",
            "expected a parameter name such as n or b2, not ' m' (lowercase letters and digits "
            "only)",
        ),
        (
            "m =4096,n=1",
            "expected a parameter name such as n or b2, not 'm ' (lowercase letters and digits "
            "only)",
        ),
        (
            "m=4096, n=1",
            "expected a parameter name such as n or b2, not ' n' (lowercase letters and digits "
            "only)",
        ),
        ("m=4096,n=\t1", "expected an integer value of n, not '\\t1' (decimal digits only)"),
    ],
)
def test_a_space_in_shape_is_refused(
    capsys: pytest.CaptureFixture[str], shape: str, said: str
) -> None:
    line = _usage_line(capsys, [*BEST, "--shape", shape])
    assert line == f"kernevo best: error: argument --shape: {said} (see kernevo best --help)"


@pytest.mark.parametrize("value", [" 4096", "4096 ", "+4096", "4_096", "4096.0"])
def test_shape_and_m_refuse_a_value_in_the_same_words(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    by_m = _usage_line(capsys, [*BEST, "--m", value, "--n", "1"])
    by_shape = _usage_line(capsys, [*BEST, "--shape", f"m={value},n=1"])
    words = f"expected an integer value of m, not {value!r} (decimal digits only)"
    assert by_m == f"kernevo best: error: argument --m: {words} (see kernevo best --help)"
    assert by_shape == by_m.replace("argument --m:", "argument --shape:")


@pytest.mark.parametrize("op", list(OPS))
def test_every_ops_parameters_refuse_spaces(capsys: pytest.CaptureFixture[str], op: str) -> None:
    argv = ["best", "--op", op, "--dtype", "float32", "--gpu", "nvidia-h200", "--shape"]
    for name, value in VALID[op].items():
        for spaced in (f" {value}", f"{value} "):
            shape = _pairs({**VALID[op], name: spaced})
            line = _usage_line(capsys, [*argv, shape])
            assert f"expected an integer value of {name}, not {spaced!r} (decimal" in line
        shape = _pairs(VALID[op]).replace(f"{name}=", f" {name}=", 1)
        assert f"not ' {name}' (lowercase" in _usage_line(capsys, [*argv, shape])


# --- 3. jobs --watch: the plain table, redrawn -------------------------------------------------


def _without_ages(text: str) -> str:
    """The listing with each heartbeat age (``33m``) as ``?``: it grows between two calls."""
    return re.sub(r"(?<= )\d+[smhd](?= )", "?", text)


def test_watch_of_a_finished_database_prints_the_plain_listing(
    capsys: pytest.CaptureFixture[str], sample: str
) -> None:
    """The trial's database: trsm_blocked at two buckets, two jobs failed by SIGTERM."""
    code, plain, err = _outcome(capsys, ["jobs", "--database-url", sample])
    assert (code, err) == (0, "")
    code, watched, err = _outcome(capsys, ["jobs", "--watch", "--database-url", sample])
    assert (code, err) == (0, "")
    assert _without_ages(watched) == _without_ages(plain)
    lines = watched.splitlines()
    assert lines[0].split() == [
        "id", "path/bucket", "dtype", "gpu", "state", "beat", "iter", "best", "speedup",
        "progs", "last", "failure", "backend/model",
    ]  # fmt: skip
    assert "trsm_blocked/m128_2048" in lines[2] and "trsm_blocked/m2049_16384" in lines[4]
    assert lines[4].split()[-2:] == ["interrupted", "offline/offline-mutator"]
    # Stored as 'job 2 stopped by SIGTERM …' by the version that wrote the archive (shown 'job 2
    # failed: job 2 stopped …'); made bare by migration 7b2d4f6a8c13: the job is named once.
    assert lines[-2:] == [
        f"job {n} failed: stopped by SIGTERM at iteration {at} of 30; resume with 'kernevo "
        f"evolve --resume {n}'"
        for n, at in ((2, 26), (1, 25))
    ]


_ROW = {
    "id": 7, "path": "trsm_blocked", "shape_bucket": "m128_2048", "dtype": "float64",
    "gpu": "nvidia-h200", "state": "running", "iteration": 3, "config": {"iterations": 8},
    "best_score": 1.5, "best_speedup": 1.25, "programs": 4, "last_failure_kind": None,
    "failure_reason": None, "backend": "local", "model": "m1", "heartbeat_age_s": 5.0,
    "stale": False, "claimed_by": "host:1:ab", "attempts": 1, "queued_at": "2026-12-02T00:00:00",
}  # fmt: skip
_OTHERS = [
    {**_ROW, "id": 6, "shape_bucket": "m2049_16384", "state": "failed", "iteration": 2,
     "last_failure_kind": "worker_error", "failure_reason": "worker died", "heartbeat_age_s": 90},
    {**_ROW, "id": 5, "state": "running", "stale": True, "heartbeat_age_s": 4000.0},
]  # fmt: skip
# What the watch fetches in turn: running, running on, then done (the stale job 5 failed).
_FRAMES = [
    [_ROW, *_OTHERS],
    [{**_ROW, "iteration": 5}, *_OTHERS],
    [
        {**_ROW, "iteration": 8, "state": "complete", "best_score": 2.0},
        _OTHERS[0],
        {**_OTHERS[1], "state": "failed", "stale": False, "failure_reason": "worker lost"},
    ],
]


def _plain(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, rows) -> str:
    monkeypatch.setattr(jobs, "_job_rows", lambda args: rows)
    code, out, err = _outcome(capsys, ["jobs", "--database-url", "sqlite:////nowhere.db"])
    assert (code, err) == (0, "")
    return out


def _fetched_in_turn(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    fetched: list[int] = []

    def rows(args: Any) -> list[dict[str, Any]]:
        fetched.append(len(fetched))
        return _FRAMES[min(len(fetched) - 1, len(_FRAMES) - 1)]

    monkeypatch.setattr(jobs, "_job_rows", rows)
    return fetched


def test_off_a_terminal_the_watch_prints_the_last_plain_listing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    last = _plain(capsys, monkeypatch, _FRAMES[-1])
    fetched = _fetched_in_turn(monkeypatch)
    argv = ["jobs", "--watch", "--interval", "0.1", "--database-url", "sqlite:////nowhere.db"]
    code, out, err = _outcome(capsys, argv)
    assert (code, err, len(fetched)) == (0, "", 3)
    assert out == last
    assert "trsm_blocked/m128_2048" in out and "trsm_blocked/m2049_16384" in out
    assert "job 6 failed: worker died" in out and "job 5 failed: worker lost" in out


def test_on_a_terminal_each_frame_is_the_plain_listing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three fetches (the last with no job active ends the watch), three frames, each exactly
    ``kernevo jobs``'s output of its rows, the stale hint of the first two included."""
    plains = [_plain(capsys, monkeypatch, rows) for rows in _FRAMES]
    assert "stale: running, but no heartbeat" in plains[0] and "stale:" not in plains[2]
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=400, color_system=None)
    monkeypatch.setattr(jobs, "_watch_console", lambda: terminal)
    fetched = _fetched_in_turn(monkeypatch)
    argv = ["jobs", "--watch", "--interval", "0.1", "--database-url", "sqlite:////nowhere.db"]
    code, out, err = _outcome(capsys, argv)
    assert (code, out, err, len(fetched)) == (0, "", "", 3)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\x00", screen.getvalue()).replace("\r", "")
    for plain in plains:
        assert "\n".join(plain.splitlines()) in drawn.replace("\x00", "")
    # Each frame is drawn whole, starting where the previous one was cleared.
    frames = [part for part in re.split(r"\x00+", drawn) if part.strip()]
    assert [frame.strip("\n") for frame in frames][:3] == [p.rstrip("\n") for p in plains]


def test_a_narrow_terminal_cuts_the_frames_and_leaves_the_last_listing_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame folded by the terminal would grow and scroll, so frames are cut at its edge;
    the listing left on screen at the end is printed whole (a second trial's finding: the last
    frame, cut, showed "com"/"fai" for states and lost the resume hint)."""
    plain = _plain(capsys, monkeypatch, _FRAMES[-1])
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=60, color_system=None)
    monkeypatch.setattr(jobs, "_watch_console", lambda: terminal)
    monkeypatch.setattr(jobs, "_job_rows", lambda args: _FRAMES[-1])
    code, _, err = _outcome(capsys, ["jobs", "--watch", "--database-url", "sqlite:////x.db"])
    assert (code, err) == (0, "")
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\x00", screen.getvalue()).replace("\r", "")
    parts = [part.strip("\n").splitlines() for part in re.split(r"\x00+", drawn) if part.strip()]
    assert [line[:60] for line in plain.splitlines()] in parts[:-1]
    assert parts[-1] == plain.splitlines()


# --- 4. serve leaves nothing behind when it cannot listen --------------------------------------


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_serve_on_a_port_in_use_creates_no_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, taken_port: int
) -> None:
    """The trial's case: a new folder and file named by --database-url."""
    database = tmp_path / "x" / "new" / "e.db"
    argv = ["serve", "--port", str(taken_port), "--database-url", f"sqlite:///{database}"]
    code, out, err = _outcome(capsys, argv)
    assert (code, out) == (1, "")
    assert err == f"kernevo: cannot listen on 127.0.0.1:{taken_port}: Address already in use\n"
    assert not (tmp_path / "x").exists()


def test_serve_on_a_port_in_use_leaves_the_environments_database_alone(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    taken_port: int,
) -> None:
    """KERNEVO_DATABASE_URL naming a new file, and an empty file already there: neither is
    migrated."""
    new = tmp_path / "new.db"
    monkeypatch.setenv("KERNEVO_DATABASE_URL", f"sqlite:///{new}")
    code, _, err = _outcome(capsys, ["serve", "--host", "127.0.0.1", "--port", str(taken_port)])
    assert code == 1 and "Address already in use" in err
    assert not new.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    argv = ["serve", "--port", str(taken_port), "--database-url", f"sqlite:///{empty}"]
    code, _, err = _outcome(capsys, argv)
    assert code == 1 and "Address already in use" in err
    assert empty.stat().st_size == 0
    with sqlite3.connect(empty) as connection:
        assert connection.execute("select name from sqlite_master").fetchall() == []


def test_serve_on_a_port_in_use_migrates_no_empty_database(
    capsys: pytest.CaptureFixture[str], empty_database_url: str, taken_port: int
) -> None:
    """SQLite and PostgreSQL: an empty database stays without tables."""
    argv = ["serve", "--port", str(taken_port), "--database-url", empty_database_url]
    code, _, err = _outcome(capsys, argv)
    assert code == 1 and "Address already in use" in err
    if empty_database_url.startswith("sqlite:///"):
        assert not Path(empty_database_url.removeprefix("sqlite:///")).exists()
        return
    engine = create_engine(empty_database_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
