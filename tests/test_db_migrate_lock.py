"""SQLite migrations queue on a lock of the database's folder and leave no lock file beside
the database (``<db>.migrate.lock`` was left after every ``kernevo`` command)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from db.migrate import _folder_lock, current_revision, head_revision, upgrade
from kernevo.cli import main


def test_a_migration_leaves_only_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sub' / 'lineage.db'}"
    upgrade(url)
    upgrade(url)  # the second finds the head and changes nothing
    assert current_revision(url) == head_revision()
    left = sorted(p.name for p in (tmp_path / "sub").iterdir())
    assert [name for name in left if not name.startswith("lineage.db")] == []
    assert not any(name.endswith(".lock") for name in left)


def test_kernevo_commands_leave_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    assert main(["token", "create", "--scope", "read", "--database-url", url]) == 0
    assert main(["jobs", "--database-url", url]) == 0
    assert main(["cancel", "7", "--database-url", url]) == 1  # no job 7: migrated all the same
    assert list(tmp_path.glob("*.lock")) == []


def test_a_migration_waits_for_the_folder_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    done = threading.Event()
    with _folder_lock(tmp_path):
        migrator = threading.Thread(target=lambda: (upgrade(url), done.set()))
        migrator.start()
        time.sleep(0.5)
        assert not done.is_set()  # queued behind the holder
    migrator.join(30)
    assert done.is_set() and current_revision(url) == head_revision()
