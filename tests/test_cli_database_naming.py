"""Every database line of the CLI names the database (its password hidden).

A fresh-user trial: an over-long SQLite path printed ``kernevo: [Errno 36] File name too long:
'/tmp/…`` (no database named, the quote cut off with the path), and ``kernevo jobs`` on a
damaged file ``database is damaged: …`` without the URL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from job_store import enqueue_jobs

from kernevo.cli import main

NAME = "a" * 260  # past NAME_MAX (255): the kernel refuses the name itself
EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float32", "--compile-only"]


@pytest.mark.parametrize(
    ("argv", "database"),
    [
        (["jobs"], f"./{NAME}.db"),
        (
            ["evolve", "--path", "trsm_small", "--dtype", "float32", "--compile-only"],
            f"./{NAME}.db",
        ),
        (
            ["evolve", "--path", "trsm_small", "--dtype", "float32", "--compile-only"],
            f"./{NAME}/x.db",
        ),
        (["worker", "--compile-only"], f"./{NAME}.db"),
    ],
)
def test_a_name_too_long_is_one_line_naming_the_database(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    database: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a short relative path: the line's words are not cut
    url = f"sqlite:///{database}"
    code = main([*argv, "--database-url", url])
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    assert captured.err == (
        f"kernevo: database {url}: {database} cannot be used as a database file "
        "(File name too long)\n"
    )
    if argv[0] != "evolve":  # evolve makes its work root (./runs) before it opens the store
        assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_damaged_database_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Its schema readable, its job pages not: the damage surfaces while the jobs are read."""
    from db.session import session_scope
    from evolver.store import open_store

    database = tmp_path / "kernevo.db"
    url = f"sqlite:///{database}"
    engine = open_store(url)
    with session_scope(engine) as s:
        enqueue_jobs(s, 300)
    engine.dispose()
    data = bytearray(database.read_bytes())
    data[-8192:] = b"\xde" * 8192  # the last two pages: jobs
    database.write_bytes(bytes(data))
    code = main(["jobs", "--limit", "500", "--database-url", url])
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    assert captured.err == (
        f"kernevo: database {url}: database is damaged: database disk image is malformed\n"
    )
