"""``scripts/loader_startup.py`` (issue 11, Build item 4): the loader's start-up from its disk
cache.

On CPU: the signed seed champion the script writes is admitted by the loader's real trust checks
(the local key pair the script makes, read as ``kernevo.load`` reads it) and served from the
disk cache without asking the service; and the script's two processes, run with CuPy, the GPU
and the path's driver faked, decide the full way and then replay the warm-start memo without
importing pydantic, cryptography, httpx or asyncio. On the GPU (marked ``gpu``): the script end
to end — ``import kernevo``, CuPy's start, then ``kernevo.load`` + the first 64×64 call from the
disk cache in a fresh interpreter, twice (the first process writes the warm-start memo, the
second replays it), the service a closed port — with the second process's load + first call
under issue 11's 50 ms, the kernel from the disk cache, and the solve right (the script's
tolerance: 1e-12 for float64 on A = I + L, ‖L‖∞ ≤ 10⁻³, far above its rounding and far below a
wrong solve).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kernevo.cache import ChampionCache
from kernevo.client import FetchOutcome
from kernevo.device import GpuInfo
from kernevo.keys import generate_key_pair
from kernevo.resolver import Resolver
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "loader_startup.py"
GPU = GpuInfo(
    index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90",
    cuda_driver_api_version="13.0", nvrtc_version="12.8", nvidia_driver_version="580.95.05",
)  # fmt: skip
# issue 11: load + first call from the disk cache under 50 ms once CuPy is initialized.
LOAD_FIRST_CALL_BOUND_MS = 50.0


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loader_startup", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripts_signed_seed_is_served_from_the_disk_cache(tmp_path: Path) -> None:
    script = _script()
    key = generate_key_pair(tmp_path / "keys")
    champion = script.seed_champion(GPU, "float64", b"\x7fELF stand-in cubin", key, "12.8")
    cache = ChampionCache(tmp_path / "cache")
    cache.store(champion)
    settings = LoaderSettings(
        cache_dir=tmp_path / "cache", key_dir=tmp_path / "keys", trusted_keys=()
    )
    asked: list[object] = []

    def fetch(key: object, *shape: int) -> FetchOutcome:
        asked.append(key)
        return FetchOutcome("unreachable", "service unreachable: not expected")

    resolver = Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=cache,
        trust=policy_from_settings(settings), cache_max_age_s=settings.cache_max_age_s,
    )  # fmt: skip
    decision = resolver.resolve(64, 64)

    assert asked == []
    assert (decision.route, decision.path, decision.refusals) == ("kernel", "trsm_small", ())
    assert decision.reason.startswith("champion program 1 from disk cache (written ")
    # Its certificate names this GPU's toolkit: served without a "not re-verified" remark.
    assert decision.reason.endswith("service not asked)")


def test_complex128s_other_path_is_remembered_absent_so_the_service_is_not_asked(
    tmp_path: Path,
) -> None:
    """complex128 64×64 is served by trsm_small and trsm_small_z64: the script's negative entry
    for the latter keeps the first call off the service, as a remembered 404 would."""
    script = _script()
    key = generate_key_pair(tmp_path / "keys")
    cache = ChampionCache(tmp_path / "cache")
    cache.store(script.seed_champion(GPU, "complex128", b"\x7fELF stand-in cubin", key, "12.8"))
    others = script.remember_other_paths_absent(cache, GPU.key, "complex128")
    assert others == ["trsm_small_z64/m64eq_n64"]
    settings = LoaderSettings(cache_dir=tmp_path / "cache", key_dir=tmp_path / "keys")
    asked: list[object] = []

    def fetch(key: object, *shape: int) -> FetchOutcome:
        asked.append(key)
        return FetchOutcome("unreachable", "service unreachable: not expected")

    decision = Resolver(
        "trsm", "complex128", gpu=GPU, fetch=fetch, cache=cache,
        trust=policy_from_settings(settings), cache_max_age_s=settings.cache_max_age_s,
    ).resolve(64, 64)  # fmt: skip
    assert asked == []
    assert (decision.route, decision.path) == ("kernel", "trsm_small")


def test_the_loaders_packages_are_compiled_as_an_install_compiles_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured from bytecode, not source: under PYTHONDONTWRITEBYTECODE=1 a working tree's
    modules were compiled by every measuring process (most of the warm import time)."""
    script = _script()
    for package in ("kernevo", "seeds"):
        (tmp_path / package / "inner").mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("X = 1\n")
        (tmp_path / package / "inner" / "mod.py").write_text("Y = 2\n")
    monkeypatch.setattr(script, "ROOT", tmp_path)
    script.compile_loader_bytecode()
    tag = sys.implementation.cache_tag
    for package in ("kernevo", "seeds"):
        assert (tmp_path / package / "__pycache__" / f"__init__.{tag}.pyc").is_file()
        assert (tmp_path / package / "inner" / "__pycache__" / f"mod.{tag}.pyc").is_file()
    (tmp_path / "seeds" / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match="seeds does not compile to bytecode"):
        script.compile_loader_bytecode()


def test_the_warm_starts_modules_leave_the_writers_imports_out() -> None:
    """What ``load`` imports on a warm start (the solver and the memo) leaves out tempfile and
    what it brings (shutil, random, bz2, lzma): only writing a memo, a secret or a cache file
    needs them (``kernevo.files.write_atomically``), and they were a tenth of the warm start's
    import time (RESULTS 24)."""
    code = (
        "import sys, numpy, kernevo.solver, kernevo.warm_start; "
        "print(sorted({'tempfile', 'shutil', 'random', 'bz2', 'lzma'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_phases_line_names_each_phase_in_order() -> None:
    line = _script().phases_line(
        {
            "load_phases_ms": {"imports": 250.04, "current_gpu": 3.0},
            "first_call_phases_ms": {"cache_read": 1.25, "call_rest": 40.0},
        }
    )
    assert line == (
        "phases (ms): load: imports 250.0, current gpu 3.0 | first call: cache read 1.2, "
        "call rest 40.0"
    )


# A stand-in for CuPy, enough for the script's measuring interpreter on a machine without a GPU:
# arrays are NumPy arrays that say they live on device 0 (not ``cupy.ndarray``, so the loader's
# snapshot copies them as host arrays), streams and devices do nothing.
_FAKE_CUPY = """
from types import SimpleNamespace
import numpy as _np
class ndarray:
    pass
class _OnDevice(_np.ndarray):
    device = SimpleNamespace(id=0)
def _on_device(x):
    return x.view(_OnDevice)
def asarray(x):
    return _on_device(_np.array(x))
def asfortranarray(x):
    return _on_device(_np.asfortranarray(x))
def arange(n):
    return _on_device(_np.arange(n))
def asnumpy(x):
    return _np.asarray(x).view(_np.ndarray)
class _Stream:
    def synchronize(self):
        pass
    def is_capturing(self):
        return False
class _Device:
    def __init__(self, index):
        pass
    def use(self):
        pass
class CUDARuntimeError(RuntimeError):
    pass
cuda = SimpleNamespace(
    Device=_Device, get_current_stream=_Stream,
    runtime=SimpleNamespace(CUDARuntimeError=CUDARuntimeError),
)
"""

# Run at the interpreter's start (PYTHONPATH): the GPU's identity and the path's driver class
# faked where the loader looks them up (the driver solves with NumPy).
_SITECUSTOMIZE = """
import json, os
if os.environ.get("LOADER_STARTUP_FAKE_GPU"):
    import importlib
    import numpy as np
    import kernevo.device
    from kernevo.paths import package
    gpu = kernevo.device.GpuInfo(**json.loads(os.environ["LOADER_STARTUP_FAKE_GPU"]))
    kernevo.device.current_gpu = lambda: gpu
    class FakeDriver:
        def __init__(self, cubin, dtype, spec):
            pass
        def solve(self, a, b, stream=None):
            b[...] = np.linalg.solve(np.tril(np.asarray(a)), np.asarray(b))
            return b
    driver = importlib.import_module(package.__name__ + ".trsm_small.driver")
    driver.TrsmSmallDriver = FakeDriver
"""


def test_the_scripts_second_process_replays_the_memo_the_first_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's two measuring interpreters on CPU (CuPy, the GPU and the driver faked):
    the first decides the full way and writes the warm-start memo; the second, with the same
    variables, replays it and imports none of the full path's modules."""
    script = _script()
    key = generate_key_pair(tmp_path / "keys")
    url = script.closed_port_url()
    # Stored for the service the measuring processes name: only its entries are fresh.
    ChampionCache(tmp_path / "cache", service=url).store(
        script.seed_champion(GPU, "float64", b"\x7fELF stand-in cubin", key, "12.8")
    )
    fakes = tmp_path / "fakes"
    (fakes / "cupy").mkdir(parents=True)
    (fakes / "cupy" / "__init__.py").write_text(_FAKE_CUPY)
    (fakes / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(fakes), os.environ.get("PYTHONPATH", "")])
    )
    gpu = {name: getattr(GPU, name) for name in ("index", "name", "key", "arch")}
    gpu.update(cuda_driver_api_version="13.0", nvrtc_version="12.8")
    gpu["nvidia_driver_version"] = "580.95.05"
    # Read by the sitecustomize above; not a KERNEVO_ name, which the script would remove.
    monkeypatch.setenv("LOADER_STARTUP_FAKE_GPU", json.dumps(gpu))

    first = script.measure(tmp_path, "float64", "first", url)
    warm = script.measure(tmp_path, "float64", "warm", url)

    assert first["route"] == "kernel" and first["reason"].startswith("champion program 1 from disk")
    assert warm["route"] == "kernel" and warm["reason"].startswith("warm-start memo (decided ")
    assert warm["reason"].endswith(first["reason"].split(" (written ")[1].split(")", 1)[1])
    assert script.verdict(first, "float64") is None and script.verdict(warm, "float64") is None
    assert warm["heavy_modules"] == [] and first["heavy_modules"] != []
    assert warm["load_phases_ms"]["full_path"] == 0.0 and warm["first_call_phases_ms"]["memo"] > 0
    assert script.warm_start_line(warm) == (
        "warm-start memo replayed; of pydantic, pydantic_settings, cryptography, httpx, asyncio "
        "imported: none"
    )


@pytest.fixture(scope="module")
def startup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The script's JSON result of one run on this GPU (float64)."""
    out = tmp_path_factory.mktemp("startup") / "startup.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dtype", "float64", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(f"\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


@pytest.mark.gpu
def test_the_first_call_runs_the_kernel_from_the_disk_cache_and_is_right(startup: dict) -> None:
    for result in (startup["first_run"], startup):
        assert result["route"] == "kernel"
        assert "from disk cache" in result["reason"] and "service not asked" in result["reason"]
        assert result["rel_error"] <= 1e-12


@pytest.mark.gpu
def test_the_second_process_replays_the_warm_start_memo(startup: dict) -> None:
    assert not startup["first_run"]["reason"].startswith("warm-start memo")
    assert startup["reason"].startswith("warm-start memo (decided "), startup["reason"]
    assert startup["heavy_modules"] == []


@pytest.mark.gpu
def test_load_and_the_first_call_from_the_disk_cache_are_under_50_ms(startup: dict) -> None:
    """Issue 11's bound on an application's every start after its first (the second process,
    the warm-start memo replayed)."""
    # The message names where the time went (RESULTS 24: a 69 ms run inside the GPU suite said
    # only its total, which a rerun alone could not explain).
    assert startup["load_first_call_ms"] < LOAD_FIRST_CALL_BOUND_MS, (
        f"load + first call {startup['load_first_call_ms']:.1f} ms; "
        f"{_script().phases_line(startup)}"
    )
