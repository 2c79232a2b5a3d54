"""The champion endpoints under load on PostgreSQL: the CI-sized run of
``scripts/load_service.py`` (locust, headless; docs/RESULTS.md has the 20 s runs). Every
request must answer as expected: best kernels 200, the manifest 200, the conditional manifest
304."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from seeds.registry import PATHS

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "load_service.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_service", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def test_champion_endpoints_under_load_answer_every_request(
    tmp_path: Path, postgres_server_url: str
) -> None:
    script = _load_script()
    result = script.run_load(
        tmp_path, postgres_url=postgres_server_url, users=4, seconds=3.0, cubin_kib=48
    )
    report = script._table(result)
    by_name = {endpoint.name: endpoint for endpoint in result.endpoints}
    assert set(by_name) == {
        "/v1/kernels/best",
        "/v1/manifest (first)",
        "/v1/manifest (200)",
        "/v1/manifest (304)",
        "Aggregated",
    }, report
    assert result.ok, report
    # One champion per (path, dtype) of the registry, and one on a second GPU.
    assert result.champions == sum(len(spec.dtypes) for spec in PATHS.values()) + 1, report
    assert by_name["/v1/kernels/best"].requests > 20, report
    assert by_name["/v1/manifest (304)"].requests > 0, report
    assert by_name["/v1/manifest (304)"].avg_bytes == 0, report  # 304: no body
    # Every champion of the GPU, each with a 48 KiB cubin (64 KiB in base64): above 9 x 64 KiB.
    assert by_name["/v1/manifest (200)"].avg_bytes > 9 * 64 * 1024, report
