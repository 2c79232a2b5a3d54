"""``import kernevo`` stays light: applications import the loader, not the service or evolver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
