"""``import kernevo`` stays light: applications import the loader, not the service or evolver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("openevolve", "fastapi", "sqlalchemy", "uvicorn", "alembic", "starlette")
# cryptography (about 15 ms to import) is loaded when the first champion is verified.
NOT_AT_IMPORT = ("cupy", "cupyx", "evaluator", "api", "db", "evolver", "cryptography")


def test_import_kernevo_pulls_in_no_service_or_evolver_code() -> None:
    code = "import json, sys, kernevo; kernevo.load; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}

    assert "kernevo" in loaded and "seeds" in loaded
    assert sorted(loaded & set(HEAVY)) == []
    assert sorted(loaded & set(NOT_AT_IMPORT)) == []


def test_load_without_a_driver_says_so_in_one_line(tmp_path: Path) -> None:
    """On a machine without libcuda (this CI machine), ``kernevo.load`` raises
    ``kernevo.NoGpuError`` naming the missing driver, not CUDA's "insufficient driver"."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("an NVIDIA driver is installed here")
    import kernevo

    with pytest.raises(kernevo.NoGpuError) as caught:
        kernevo.load("trsm", "float64", cache_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith("no CUDA GPU found: no NVIDIA driver (") and "\n" not in message
