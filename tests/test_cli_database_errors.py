"""A fresh user's wrong database, said in one line, the file left as it was (fresh-user trial):
a SQLite path that is a folder, an empty file, another program's SQLite file, random bytes, or
nothing there for ``--resume`` (``evolver.store.sqlite_file_problem``, ``open_store``,
``open_existing_store``); and a shape's range told as the check accepts it
(``kernevo.solver.checked_shape``).

The CLI runs in a temporary folder with ``KERNEVO_DATABASE_URL`` unset (conftest), so the
database is the default ``sqlite:///./kernevo.db``, as the trial had it."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import inspect

from evolver.store import open_store
from kernevo.cli import main
from kernevo.solver import checked_shape
from seeds import ops
from seeds.ops import ShapeError

URL = "sqlite:///./kernevo.db"
CREATES_IT = "'kernevo evolve' or 'kernevo serve' creates and migrates it"
JOB_DATABASE = "point --database-url (or KERNEVO_DATABASE_URL) at the job's database"
RESUME = f"run 'kernevo evolve' without --resume to start a new job, or {JOB_DATABASE}"

RESUME_ID = ["evolve", "--resume", "41"]
RESUME_LATEST = ["evolve", "--resume", "--path", "trsm_small", "--dtype", "float64"]
EXPORT = ["export", "--op", "trsm", "--dtype", "float64", "--gpu", "nvidia-h200", "-o", "out"]
# Every command that opens the store, with the advice it gives when the database is not there.
READERS_AND_RESUMERS = [
    (["jobs"], CREATES_IT),
    (["jobs", "--state", "running"], CREATES_IT),
    (RESUME_ID, RESUME),
    (RESUME_LATEST, RESUME),
    (["cancel", "41"], JOB_DATABASE),
    (["token", "list"], CREATES_IT),
    (["token", "create", "--scope", "read"], CREATES_IT),
    (["token", "revoke", "1"], CREATES_IT),
    (EXPORT, CREATES_IT),
]
CREATORS = [
    ["serve", "--port", "1"],  # the store is opened before the port is bound
    ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"],
    ["worker", "--compile-only"],
]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder of the command: a new temporary one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line ``kernevo argv`` printed on stderr, having exited 1 with nothing on stdout."""
    status = main(argv)
    captured = capsys.readouterr()
    assert (status, captured.out) == (1, ""), captured.err
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    return captured.err.rstrip("\n")


def _listing(folder: Path, prefix: str = "") -> dict[str, bytes | None]:
    """Every entry of ``folder`` whose name starts with ``prefix``, with its bytes (``None`` for
    a folder): equal before and after means nothing was created, written or removed there
    (SQLite's -wal, -shm and -journal files included)."""
    entries = sorted(p for p in folder.iterdir() if p.name.startswith(prefix))
    return {p.name: None if p.is_dir() else p.read_bytes() for p in entries}


# --- 1: shape ranges --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "shape", "line"),
    [
        ("trsm", (0, 64), "shape (0, 64): m=0 is out of range: trsm takes 1 <= m <= 2147483647 "
                          "(rows of A and B)"),
        ("trsm", (64, 0), "shape (64, 0): n=0 is out of range: trsm takes 1 <= n <= 2147483647 "
                          "(columns of B)"),
        ("trsm", (2**31, 64), "shape (2147483648, 64): m=2147483648 is out of range: trsm takes "
                              "1 <= m <= 2147483647 (rows of A and B)"),
        ("solve_tri", (0, 6, 4, 2), "shape (0, 6, 4, 2): n=0 is out of range: solve_tri takes "
                                    "1 <= n <= 2147483647 (rows and columns of each A, rows of "
                                    "each B)"),
        ("solve_tri", (64, 6, -1, 2), "shape (64, 6, -1, 2): b2=-1 is out of range: solve_tri "
                                      "takes 1 <= b2 <= 2147483647 (batch size in ggml's third "
                                      "dimension)"),
        ("band_bidiag", (64, -1), "shape (64, -1): bandwidth=-1 is out of range: band_bidiag "
                                  "takes 0 <= bandwidth <= 2147483647 (superdiagonals of the "
                                  "upper band)"),
        ("band_bidiag", (0, 0), "shape (0, 0): n=0 is out of range: band_bidiag takes 1 <= n <= "
                                "2147483647 (order of the square band matrix)"),
    ],
)  # fmt: skip
def test_an_explained_shape_out_of_range_states_the_range_checked(
    op: str, shape: tuple[int, ...], line: str
) -> None:
    """Check: ``checked_shape`` (``OpSolver.explain``) tells one range, the one it applies:
    it refused trsm's ``m=0`` as "not a positive integer" yet told ``m=2147483648`` that trsm
    takes ``0 <= m``."""
    with pytest.raises(ShapeError) as caught:
        checked_shape(ops.get_op(op), shape)
    assert str(caught.value) == line


def _stated_range(message: str, op: str, name: str) -> tuple[int, int]:
    found = re.search(rf"{op} takes (\d+) <= {name} <= (\d+) ", message)
    assert found is not None, message
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("op", sorted(ops.OPS))
@pytest.mark.parametrize("checker", ["explain", "op"])
def test_every_stated_range_is_the_range_accepted(op: str, checker: str) -> None:
    """For every op and parameter, the range a refusal states is exact at both ends: its lower
    bound is accepted and one below it refused, one above its upper bound refused with the same
    range; for the solver's ``explain`` (``checked_shape``) and for the op's own check
    (``OpSpec.check_shape``: the API's best-kernel query, ``kernevo best --shape``)."""
    spec = ops.get_op(op)

    def check(shape: list[int]) -> None:
        if checker == "explain":
            checked_shape(spec, tuple(shape))
        else:
            spec.check_shape(shape)

    def message(shape: list[int]) -> str:
        with pytest.raises(ShapeError) as caught:
            check(shape)
        assert caught.value.kind == "range", caught.value
        return str(caught.value)

    lows: list[int] = []
    for index, name in enumerate(spec.param_names):
        probe = [1] * len(spec.param_names)
        probe[index] = -1
        lows.append(_stated_range(message(probe), op, name)[0])
    check(lows)  # every lower bound at once is a shape of the op
    for index, name in enumerate(spec.param_names):
        below, above = list(lows), list(lows)
        below[index] = lows[index] - 1
        low, high = _stated_range(message(below), op, name)
        above[index] = high + 1
        assert (low, high) == _stated_range(message(above), op, name) and low == lows[index]


# --- 2: --resume without the database ---------------------------------------------------------


@pytest.mark.parametrize("argv", [RESUME_ID, RESUME_LATEST])
def test_resume_without_a_database_advises_what_works_and_creates_nothing(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Check: ``open_store(create=False, hint=…)`` before ``resume_job``. The advice was
    "'kernevo evolve' … creates it": a new database holds no job to resume."""
    assert _refusal(capsys, argv) == (
        f"kernevo: database {URL}: no such file ./kernevo.db ({RESUME})"
    )
    assert _listing(in_tmp) == {}
    elsewhere = in_tmp / "jobs" / "lineage.db"
    line = _refusal(capsys, [*argv, "--database-url", f"sqlite:///{elsewhere}"])
    assert line == f"kernevo: database sqlite:///{elsewhere}: no such file {elsewhere} ({RESUME})"
    assert _listing(in_tmp) == {}  # nor its folder


# --- 3: a folder where the database file should be ---------------------------------------------


@pytest.mark.parametrize("argv", [a for a, _ in READERS_AND_RESUMERS] + CREATORS)
def test_a_folder_named_as_the_database_is_said_to_be_one(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Check: ``sqlite_file_problem`` in ``open_store``, ``open_existing_store`` and the worker's
    ``check_database``. It read "no such file ./kernevo.db", "unable to open database file" or
    "[Errno 21] Is a directory"."""
    (in_tmp / "kernevo.db").mkdir()
    assert _refusal(capsys, argv) == (
        f"kernevo: database {URL}: ./kernevo.db is a directory, not a database file"
    )
    assert list((in_tmp / "kernevo.db").iterdir()) == []


@pytest.mark.parametrize("argv", [["jobs"], RESUME_ID, ["cancel", "41"], CREATORS[0]])
def test_a_fifo_named_as_the_database_is_refused_before_anything_opens_it(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Check: ``sqlite_file_problem``'s "not a regular file" (opening a FIFO would block)."""
    os.mkfifo(in_tmp / "kernevo.db")
    assert _refusal(capsys, argv) == (
        f"kernevo: database {URL}: ./kernevo.db is not a regular file"
    )


# --- 4: an empty file, another program's database, random bytes --------------------------------


@pytest.mark.parametrize(("argv", "hint"), READERS_AND_RESUMERS)
def test_an_empty_file_is_not_a_kernevo_database_and_stays_empty(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    """Check: ``open_store(create=False)`` reads the revision (read-only) before migrating, as
    ``open_existing_store`` does. ``--resume``, ``cancel`` and ``token create|revoke`` wrote
    the schema into the 0-byte file, then said "job 41 not found"."""
    (in_tmp / "kernevo.db").write_bytes(b"")
    before = _listing(in_tmp)
    assert _refusal(capsys, argv) == (
        f"kernevo: database {URL}: ./kernevo.db is an empty file, not a kernevo database ({hint})"
    )
    assert _listing(in_tmp) == before
    assert (in_tmp / "kernevo.db").stat().st_size == 0


# The advice for another program's database: no kernevo command creates its schema there
# (db.migrate.schema_problem; tests/test_cli_foreign_database.py has the creating commands).
KERNEVO_DATABASE = "point --database-url (or KERNEVO_DATABASE_URL) at a kernevo database"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (a, JOB_DATABASE if h in (RESUME, JOB_DATABASE) else KERNEVO_DATABASE)
        for a, h in READERS_AND_RESUMERS
    ],
)
def test_another_programs_sqlite_database_is_not_written(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    connection = sqlite3.connect(in_tmp / "kernevo.db")
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.execute("INSERT INTO notes VALUES ('mine')")
    connection.commit()
    connection.close()
    before = _listing(in_tmp)
    assert _refusal(capsys, argv) == (
        f"kernevo: database {URL}: not a kernevo database: it has 1 table (notes) and no "
        f"kernevo schema revision (no alembic_version table) ({hint})"
    )
    assert _listing(in_tmp) == before


@pytest.mark.parametrize("content", [bytes(range(256)) * 16, b"kernevo lineage\n" * 300])
@pytest.mark.parametrize("argv", [a for a, _ in READERS_AND_RESUMERS] + CREATORS[:2])
def test_a_file_that_is_not_sqlite_is_one_line_and_untouched(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str], content: bytes
) -> None:
    (in_tmp / "kernevo.db").write_bytes(content)
    before = _listing(in_tmp, "kernevo.db")
    assert _refusal(capsys, argv) == f"kernevo: database {URL}: file is not a database"
    # A new job makes its work folder (./runs) before it opens the store: only the database's
    # files are compared.
    assert _listing(in_tmp, "kernevo.db") == before


@pytest.mark.parametrize("argv", [RESUME_ID, ["cancel", "41"]])
def test_an_empty_database_of_either_backend_gets_no_schema(
    empty_database_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """PostgreSQL too: a schema without kernevo tables is refused, not migrated."""
    from sqlalchemy import create_engine

    if empty_database_url.startswith("sqlite:///"):
        Path(empty_database_url.removeprefix("sqlite:///")).write_bytes(b"")
    line = _refusal(capsys, [*argv, "--database-url", empty_database_url])
    assert line.startswith("kernevo: database ") and "not a kernevo database" in line, line
    engine = create_engine(empty_database_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


# --- what still works -------------------------------------------------------------------------


def test_an_older_kernevo_schema_is_still_migrated_without_create(in_tmp: Path) -> None:
    """``create=False`` refuses what is not a kernevo database, not an older one."""
    from db.migrate import current_revision, downgrade, head_revision, upgrade

    upgrade(URL)
    downgrade(URL, "-1")
    assert current_revision(URL) != head_revision()
    open_store(URL, create=False).dispose()
    assert current_revision(URL) == head_revision()


def test_creating_commands_still_take_an_empty_file(in_tmp: Path) -> None:
    """``kernevo evolve`` (a new job) and ``kernevo serve`` open with ``create=True``: an empty
    file is a new database to them."""
    from db.migrate import current_revision, head_revision

    (in_tmp / "kernevo.db").write_bytes(b"")
    open_store(URL).dispose()
    assert current_revision(URL) == head_revision()


def test_resume_in_a_kernevo_database_reaches_the_job_lookup(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(URL).dispose()
    said = "kernevo: job 41 not found; 'kernevo jobs' lists the jobs"
    assert _refusal(capsys, RESUME_ID) == said
    assert _refusal(capsys, ["cancel", "41"]) == said
