"""Start-up (issue 11, Build item 4): ``import kernevo`` and ``from kernevo import load`` in a
fresh interpreter import no CuPy, no HTTP client, no pydantic and nothing of the service; what
``load`` needs is imported when it runs. Asserted on the modules loaded, which do not depend on
the machine's speed; the times are printed, not asserted (a shared CI machine's speed varies:
issue 11's bound, 150 ms, is read from ``kernevo bench-loader``'s first line on the GPU host)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Never imported by `import kernevo` nor `from kernevo import load`: CuPy (the first call's),
# the fetch's HTTP client and the settings' and certificates' pydantic (load's), signatures'
# cryptography (the first champion's), and the service's stack (never the loader's).
NOT_BEFORE_LOAD_RUNS = (
    "cupy", "cupyx", "httpx", "pydantic", "pydantic_settings", "cryptography",
    "sqlalchemy", "fastapi", "starlette", "uvicorn", "alembic", "openevolve",
    "evaluator", "api", "db", "evolver",
)  # fmt: skip

_PROBE = """
import json, sys, time
start = time.perf_counter()
import kernevo
imported = time.perf_counter()
after_import = sorted(sys.modules)
from kernevo import load
loaded = time.perf_counter()
print(json.dumps({
    "import_ms": (imported - start) * 1e3,
    "load_ms": (loaded - start) * 1e3,
    "after_import": after_import,
    "after_load": sorted(sys.modules),
}))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    return json.loads(done.stdout)


def _roots(names: list[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_import_kernevo_imports_nothing_heavy(probe: dict) -> None:
    print(f"\nimport kernevo: {probe['import_ms']:.1f} ms")
    assert sorted(_roots(probe["after_import"]) & set(NOT_BEFORE_LOAD_RUNS)) == []
    assert not any(name.startswith("kernevo.") for name in probe["after_import"])


def test_from_kernevo_import_load_imports_nothing_heavy(probe: dict) -> None:
    print(f"\nfrom kernevo import load: {probe['load_ms']:.1f} ms")
    assert sorted(_roots(probe["after_load"]) & set(NOT_BEFORE_LOAD_RUNS)) == []
    assert "kernevo.solver" in probe["after_load"]
