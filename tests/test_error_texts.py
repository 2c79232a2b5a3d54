"""The words of errors and progress lines a fresh user tripped over (issue 9): an LLM failure
ending in a bare colon, a SQLite URI shown percent-encoded, a raw errno line from ``kernevo
keys``, ``kernevo lock`` on a missing folder, a key folder the loader will not trust, and a
``speedup_64 0.00x`` for jobs that never time 64×64."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from http_stub import StubServer, reply

from evolver.errors import LLMEndpointError
from evolver.llm import OPENAI_BACKEND, LLMBackend, check_endpoint
from evolver.progress import largest_timed_shape, speedup_text
from evolver.store import display_url
from kernevo.cli import main
from seeds.registry import get_path


@contextmanager
def _answering(status: int, body: bytes) -> Iterator[str]:
    """An endpoint answering every request with ``status`` and ``body``."""
    with StubServer(
        lambda handler: reply(handler, status, body), methods=("GET", "POST")
    ) as server:
        yield f"{server.url}/v1"


@pytest.mark.parametrize(
    ("body", "ends"), [(b"", ": empty body"), (b"  \n ", ": empty body"), (b"no", ": no")]
)
def test_an_llm_failure_never_ends_in_a_bare_colon(body: bytes, ends: str) -> None:
    with _answering(500, body) as base:
        backend = LLMBackend(kind=OPENAI_BACKEND, model="m", base_url=base)
        with pytest.raises(LLMEndpointError) as caught:
            check_endpoint(backend, timeout_s=10)
    message = str(caught.value)
    assert message.startswith(f"LLM endpoint {base} answered HTTP 500 to a test request")
    assert message.endswith(ends)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:///file:/tmp/k.db?mode=ro&uri=true", "sqlite:///file:/tmp/k.db?mode=ro&uri=true"),
        ("sqlite:////tmp/a b/k.db", "sqlite:////tmp/a b/k.db"),
        ("sqlite:///./k%20x.db", "sqlite:///./k%20x.db"),  # as typed, not decoded either
        ("postgresql+psycopg://u:pw@h/db", "postgresql+psycopg://u:***@h/db"),
        ("not a url", "not a url"),
    ],
)
def test_a_database_url_is_shown_as_typed_but_its_password(url: str, shown: str) -> None:
    assert display_url(url) == shown


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


@pytest.mark.parametrize(
    ("folder", "says"),
    [
        ("/proc/kernevo-keys", "cannot be created or written: No such file or directory"),
        ("/proc/self/kernevo/keys", "cannot be created or written: No such file or directory"),
        # Something not a folder above: said as for --work-dir
        # (kernevo.cli.folders._file_in_the_way).
        ("/dev/null/keys", "cannot be created: /dev/null is a file, not a folder"),
    ],
)
def test_keys_in_a_folder_that_cannot_be_made_is_one_usual_line(
    capsys: pytest.CaptureFixture[str], folder: str, says: str
) -> None:
    assert main(["keys", "--dir", folder]) == 1
    line = _one_line(capsys)
    assert line.startswith("kernevo: key folder /")
    assert line.endswith(f" {says}")
    assert "[Errno" not in line


def test_keys_warns_when_the_loader_would_not_trust_the_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The loader ignores a local key whose folder others can write
    (``kernevo.keys.local_public_key``): ``kernevo keys`` says so instead of suggesting all
    is well."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    assert main(["keys", "--dir", str(folder)]) == 0
    captured = capsys.readouterr()
    assert "public key: " in captured.out
    assert captured.err == (
        f"kernevo: warning: a loader with KERNEVO_KEY_DIR={folder} will not trust this key "
        f"(local key ignored: {folder} is writable by others): make the folder and key writable "
        "only by you (chmod 700 / 644), or give loaders KERNEVO_TRUSTED_KEYS\n"
    )
    folder.chmod(0o700)
    assert main(["keys", "--dir", str(folder)]) == 0
    assert capsys.readouterr().err == ""  # trusted now: nothing to warn about


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_lock_says_the_cache_folder_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    cache = tmp_path / "cache"
    if kind == "file":
        cache.write_text("")
    out = tmp_path / "kernevo.lock"
    assert main(["lock", "-o", str(out), "--cache-dir", str(cache)]) == 1
    what = "does not exist" if kind == "missing" else "is not a folder"
    assert _one_line(capsys) == (
        f"kernevo: disk cache folder {cache} {what} (--cache-dir, else KERNEVO_CACHE_DIR; a "
        "loader fills it on its first fetch)"
    )
    assert not out.exists()


# --- the speedup a job line shows ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "bucket", "at"),
    [
        ("trsm_small", None, "m=64 n=64"),
        ("trsm_blocked", "m128_2048", "m=129 n=8192"),
        ("trsm_blocked", "m2049_16384", "m=8192 n=1024"),
    ],
)
def test_the_speedup_is_named_by_the_shape_it_was_timed_at(
    path: str, bucket: str | None, at: str
) -> None:
    assert largest_timed_shape(get_path(path, bucket)) == at
    assert speedup_text(1.5, at) == f"speedup 1.50x at {at}"


@pytest.mark.parametrize("value", [0.0, None, -1.0])
def test_no_speedup_is_not_a_measured_zero(value: float | None) -> None:
    assert speedup_text(value, "m=129 n=8192") == "speedup n/a"
