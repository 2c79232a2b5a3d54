"""The light loader distribution (loader/pyproject.toml): what an application installs for
``kernevo.load`` alone holds one top-level package, ``kernevo``, and none of the service's
dependencies; the path package it launches through is vendored as ``kernevo._seeds``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOADER = ROOT / "loader"
SERVICE_ONLY = {"openevolve", "fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "scipy"}


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower()


@pytest.fixture(scope="module")
def light_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(LOADER), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # setuptools builds in the source folder: leave the checkout as it was.
    for leftover in ("build", "kernevo.egg-info"):
        shutil.rmtree(LOADER / leftover, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("kernevo-*.whl")
    return wheel


def test_every_path_package_is_vendored() -> None:
    """A path folder added under seeds/ must be listed in the light wheel, or the loader breaks."""
    config = tomllib.loads((LOADER / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {
        "kernevo._seeds" + ".".join(("", *init.parent.relative_to(ROOT / "seeds").parts))
        for init in (ROOT / "seeds").rglob("__init__.py")
    }
    assert on_disk <= listed, f"missing from loader/pyproject.toml: {sorted(on_disk - listed)}"


def test_the_service_distribution_needs_nothing_of_the_loader_that_it_lacks() -> None:
    """Every loader dependency is also a service dependency (the service includes the loader)."""
    loader = tomllib.loads((LOADER / "pyproject.toml").read_text())["project"]
    service = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert loader["name"] == "kernevo" and service["name"] == "kernevo-service"
    missing = {_requirement_name(r) for r in loader["dependencies"]} - {
        _requirement_name(r) for r in service["dependencies"]
    }
    assert not missing


def test_light_wheel_holds_one_top_level_package_and_no_service_dependency(
    light_wheel: Path,
) -> None:
    with zipfile.ZipFile(light_wheel) as wheel:
        names = wheel.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [
            _requirement_name(line.split(":", 1)[1].strip())
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    top_level = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"kernevo"}
    assert "kernevo/_seeds/registry.py" in names
    assert "kernevo/_seeds/trsm_small/driver.py" in names
    assert "kernevo/_seeds/trsm_small/kernel.cu" in names
    assert not SERVICE_ONLY & set(requires), requires


def test_light_install_loads_without_the_service(light_wheel: Path, tmp_path: Path) -> None:
    """In a fresh virtual environment with only the light wheel and its dependencies, every
    loader module imports (path drivers included) and routes, and no service package is there."""
    env_dir = tmp_path / "app-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(light_wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = r"""
import importlib.util, json, sys, sysconfig
from pathlib import Path
import pkgutil, importlib
import kernevo
from kernevo import paths
# Every loader module, the path driver included (the console script, the package kernevo.cli,
# is the service's: this wheel does not ship it).
for info in pkgutil.walk_packages(kernevo.__path__, "kernevo."):
    importlib.import_module(info.name)
[route] = paths.registry.route("trsm", "float64", 64, 64)
site = Path(sysconfig.get_paths()["purelib"])
print(json.dumps({
    "paths_package": paths.package.__name__,
    "service_modules": sorted(
        m for m in ("openevolve", "fastapi", "sqlalchemy", "evaluator", "evolver", "api", "db",
                    "seeds") if m in sys.modules or importlib.util.find_spec(m) is not None),
    "top_level": sorted(p.name for p in site.iterdir()
                        if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))
                        and (p / "__init__.py").exists()),
    "route": [route.path_id, route.shape_bucket],
}))
"""
    done = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the repository: its folders must not be importable by accident
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert result["paths_package"] == "kernevo._seeds"
    assert result["service_modules"] == []
    assert "kernevo" in result["top_level"]
    assert not {"api", "db", "seeds", "evaluator", "evolver"} & set(result["top_level"])
    assert result["route"][0] == "trsm_small"


def test_dir_of_kernevo_lists_its_lazy_names() -> None:
    """A fresh user's finding: dir(kernevo) did not list load (imported on first use)."""
    import kernevo

    assert {"load", "NoGpuError", "Decision"} <= set(dir(kernevo))
    # A trial's finding: it also listed this file's own imports (Any, TYPE_CHECKING, importlib).
    assert not {"Any", "TYPE_CHECKING", "importlib", "annotations"} & set(dir(kernevo))
    assert [name for name in dir(kernevo) if not name.startswith("__")] == sorted(kernevo.__all__)
