"""Key files and lock files an operator configures are read without waiting and within a
bound: a FIFO, a link to /dev/zero, an oversized or deeply nested file is a one-line error, and
a key mounted through a symbolic link (as secret stores do) still works."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernevo.keys import KeyFileError, generate_key_pair, load_signing_key, trusted_keys
from kernevo.lockfile import LockFile, LockFileError


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _big(path: Path) -> Path:
    path.write_bytes(b"x" * (17 * 2**20))
    return path


HOSTILE = {"fifo": _fifo, "dev_zero": _zero_link, "oversized": _big}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_lock_file_is_a_one_line_error_at_once(tmp_path: Path, kind: str) -> None:
    path = HOSTILE[kind](tmp_path / "kernevo.lock")
    start = time.monotonic()
    with pytest.raises(LockFileError) as caught:
        LockFile.load(path)
    assert time.monotonic() - start < 2.0
    assert str(caught.value).startswith(f"lock file {path}:") and "\n" not in str(caught.value)


def test_a_deeply_nested_lock_file_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "kernevo.lock"
    path.write_text('{"format": ' + "[" * 100_000)
    with pytest.raises(LockFileError, match="not JSON"):
        LockFile.load(path)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_key_file_is_a_one_line_error_at_once(tmp_path: Path, kind: str) -> None:
    path = HOSTILE[kind](tmp_path / "key.pem")
    start = time.monotonic()
    with pytest.raises(KeyFileError, match=f"signing key {path}:"):
        load_signing_key(path)
    with pytest.raises(KeyFileError, match=f"trusted key {path}:"):
        trusted_keys([str(path)])
    assert time.monotonic() - start < 2.0


def test_keys_mounted_through_symbolic_links_are_read(tmp_path: Path) -> None:
    key = generate_key_pair(tmp_path / "keys")
    private_link = tmp_path / "signing.pem"
    private_link.symlink_to(key.path)
    public_link = tmp_path / "trusted.pub"
    public_link.symlink_to(key.path.with_name("champion-signing.pub"))
    assert load_signing_key(private_link).key_id == key.key_id
    assert trusted_keys([str(public_link)]) == {key.key_id: key.public_raw}


def test_lock_file_errors_quote_keys_and_names_printably(tmp_path: Path) -> None:
    path = tmp_path / "kernevo.lock"
    path.write_text('{"format": "kernevo.lock.v1", "champions": {"a\\nb\\u001b[31m\\ud800": 1}}')
    with pytest.raises(LockFileError) as caught:
        LockFile.load(path)
    message = str(caught.value)
    assert message.isprintable() and "a\\nb\\x1b[31m\\ud800" in message
