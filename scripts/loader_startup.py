"""Start-up of the loader served from its disk cache (issue 11, Build item 4), on this GPU.

    python scripts/loader_startup.py [--dtype float64] [--ask-missing] [--json FILE]

Prepares, in a temporary folder: a key pair (``kernevo.keys.generate_key_pair``), trsm_small's
seed at its m64n64 bucket compiled here for this GPU and signed as a promotion signs a champion
(``kernevo.signature``), written to a disk cache (``kernevo.cache.ChampionCache``), and, for
every other path serving the 64×64 problem in that dtype (complex128: trsm_small_z64), a
negative entry dated now, as a 404 from the service leaves it (``ChampionCache.remember_absent``:
the service has no champion for it), so that the loader does not ask the service for it;
``--ask-missing`` leaves those out, and the first call then asks the service (a closed port)
for each. Then it runs two fresh interpreters one after the other, as two processes of an
application started on that disk cache: the first decides the full way (settings, trust policy,
trust checks) and writes the loader's warm-start memo (``kernevo.warm_start``), the second is
the warm start, which replays the memo. Each, its service a closed port on 127.0.0.1 and its
disk cache and local key those, times and prints, one line each, in ms:

- ``import kernevo``;
- ``import cupy`` and CuPy's initialization (``Device(0).use()``, a small reduction, the stream
  synchronized);
- ``kernevo.load("trsm", dtype)``;
- its first call on a 64×64 problem (A 64×64 lower triangular, B 64×64, Fortran order; the
  stream synchronized after it): routing from the disk cache, trust checks, module load, launch
  geometry, launch;
- load + first call;

then one line splitting load and the first call into phases (ms, measured by wrapping the
loader's functions in that interpreter; the rest of each is what no phase covers):

- load: importing the loader's modules (the first process: the full path's too, pydantic,
  pydantic-settings, cryptography …; the second: the solver and the memo's only), the GPU's
  identity (``kernevo.device.current_gpu``: CUDA properties, driver and NVRTC versions), the
  memo (``WarmStart.open``: the fingerprint, the memo read and its MAC checked), the settings
  (``LoaderSettings``) and the trust policy (``policy_from_settings``: keys, lock file), in the
  first process; in the second, the full path when it must be built after all (``full path``,
  0 when the memo answered);
- first call: the disk-cache reads (entry and negative-entry ages, ``ChampionCache.load``), the
  trust checks (``TrustPolicy.check``: digest, signature, certificate), the service (fetches),
  the memo write (``WarmStart.record``), in the first process; the memo's replay in the second
  (``WarmStart.decision``: files unchanged, the cubin read and hashed); the driver build
  (``build_driver``: the path's driver module imported, the cubin loaded as a CUDA module), the
  launch preparation (``OpSolver._kernel_plan``), and the rest of the call (operand checks, the
  snapshot of ``b``, the launch geometry query, the launch, the stream synchronized);

then the route and reason of ``explain(64, 64)`` and the call's relative error against a float64
(complex128) solve on the host; for the second process, which of pydantic, pydantic-settings,
cryptography, httpx and asyncio its load and first call imported (none when the memo answered).
Issue 11's bounds: ``import kernevo`` under 150 ms; load + first call under 50 ms once CuPy is
initialized (the second process's figure: an application's every start after its first).
Before measuring, the loader's packages (``kernevo``, ``seeds``) are compiled to bytecode, as
pip does when it installs them (:func:`compile_loader_bytecode`): run from a working tree under
``PYTHONDONTWRITEBYTECODE=1`` (this development machine sets it), every process compiled them
from source, about 95 ms of the warm process's 130 ms of imports here, which no installed
application pays.
``--json`` writes the second process's figures, with the first's under ``first_run``.

The champion is only the seed, signed with a key made for this run: its certificate names this
GPU and toolkit so that the loader admits it, and its ``not_verified`` says that nothing was
verified. Exit status 0 when, in both processes, the first call ran the kernel from the disk
cache and solved within the dtype's tolerance, 1 otherwise; a missing GPU is one line and exit 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATH, BUCKET = "trsm_small", "m64n64"
M = N = 64
DTYPES = ("float32", "float64", "complex64", "complex128")
# max |X − X_ref| / max |X_ref| accepted: A = I + L with ‖L‖∞ ≤ 10⁻³ (the problem below) keeps
# X within a few units in the last place of the wide reference; these are far above that.
TOLERANCE = {"float32": 1e-4, "complex64": 1e-4, "float64": 1e-12, "complex128": 1e-12}
TIMES = ("import_kernevo_ms", "cupy_init_ms", "load_ms", "first_call_ms", "load_first_call_ms")
RUNS = {
    "first": "first process (decides the full way, writes the warm-start memo)",
    "warm": "second process (warm start: the memo replayed)",
}
# What the warm start must not import (kernevo.warm_start); the second process reports which it did.
HEAVY = ("pydantic", "pydantic_settings", "cryptography", "httpx", "asyncio")
LABELS = {
    "import_kernevo_ms": "import kernevo",
    "cupy_init_ms": "import cupy + CuPy init",
    "load_ms": "kernevo.load",
    "first_call_ms": f"first call {M}x{N}",
    "load_first_call_ms": "load + first call",
}

# The fresh interpreter: argv[1:] the dtype, m, n and the run ("first" or "warm"). Nothing of
# kernevo or CuPy is imported before the clock starts; the problem is drawn (NumPy, which CuPy
# imports anyway) before load is timed.
_CHILD = """
import json, sys, time
dtype, m, n, run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
import kernevo
t1 = time.perf_counter()
import cupy
cupy.cuda.Device(0).use()
float(cupy.arange(8).sum())
cupy.cuda.get_current_stream().synchronize()
t2 = time.perf_counter()
import numpy as np
rng = np.random.default_rng(0)
wide = np.complex128 if dtype.startswith("complex") else np.float64
def draw(shape, scale):
    values = rng.uniform(-scale, scale, shape)
    return values + 1j * rng.uniform(-scale, scale, shape) if wide is np.complex128 else values
a_host = (np.eye(m) + np.tril(draw((m, m), 1e-3 / m), -1)).astype(dtype)
b_host = draw((m, n), 1.0).astype(dtype)
x_ref = np.linalg.solve(np.tril(a_host).astype(wide), b_host.astype(wide))
a = cupy.asfortranarray(cupy.asarray(np.asfortranarray(a_host)))
b = cupy.asfortranarray(cupy.asarray(np.asfortranarray(b_host)))
cupy.cuda.get_current_stream().synchronize()
before = {name.split(".")[0] for name in sys.modules}
t3 = time.perf_counter()
# What load imports when it runs, imported here (inside the timed window) so that its phases
# can be wrapped before it runs; the wrapping itself is taken out of the figures. The warm start
# imports the solver and the memo only: the full path's modules are imported (and wrapped) here
# in the first run alone; a warm start that needs them after all imports them in "full path".
import kernevo.solver, kernevo.warm_start
if run == "first":
    import kernevo.cache, kernevo.client, kernevo.resolver, kernevo.settings, kernevo.trust
t_imported = time.perf_counter()
spent = {}
def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + (time.perf_counter() - start) * 1e3
    return wrapper
def wrap(owner, attribute, name):
    setattr(owner, attribute, timed(name, getattr(owner, attribute)))
wrap(kernevo.solver, "current_gpu", "current_gpu")
wrap(kernevo.warm_start.WarmStart, "open", "memo")
wrap(kernevo.warm_start.WarmStart, "decision", "memo")
wrap(kernevo.warm_start.WarmStart, "record", "memo_write")
if run == "first":
    load_names = ["current_gpu", "memo", "settings", "trust_policy"]
    call_names = ["cache_read", "trust_checks", "service", "memo_write"]
    wrap(kernevo.settings.LoaderSettings, "__init__", "settings")
    wrap(kernevo.trust, "policy_from_settings", "trust_policy")
    for attribute in ("entry_age_s", "absent_age_s", "load"):
        wrap(kernevo.cache.ChampionCache, attribute, "cache_read")
    wrap(kernevo.trust.TrustPolicy, "check", "trust_checks")
    fetcher = kernevo.client.service_fetcher
    kernevo.client.service_fetcher = lambda *a, **k: timed("service", fetcher(*a, **k))
    wrap(kernevo.resolver.Resolver, "resolve", "resolve")
else:
    load_names = ["current_gpu", "memo", "full_path"]
    call_names = ["memo", "full_path", "memo_write"]
    wrap(kernevo.solver, "_full_resolver", "full_path")
    wrap(kernevo.solver.WarmResolver, "resolve", "resolve")
wrap(kernevo.solver, "build_driver", "driver_build")
wrap(kernevo.solver.OpSolver, "_kernel_plan", "launch_prep")
t_wrapped = time.perf_counter()
solver = kernevo.load("trsm", dtype)
t4 = time.perf_counter()
loaded = {name: spent.get(name, 0.0) for name in load_names}
spent.clear()
solver(a, b)
cupy.cuda.get_current_stream().synchronize()
t5 = time.perf_counter()
decision = solver.explain(m, n)
imported = {name.split(".")[0] for name in sys.modules} - before
error = float(np.abs(cupy.asnumpy(b) - x_ref).max() / np.abs(x_ref).max())
load_ms = (t4 - t3 - (t_wrapped - t_imported)) * 1e3
first_ms = (t5 - t4) * 1e3
load_phases = {"imports": (t_imported - t3) * 1e3, **loaded}
load_phases["load_rest"] = load_ms - sum(load_phases.values())
call_phases = {name: spent.get(name, 0.0) for name in call_names}
resolve_rest = spent.get("resolve", 0.0) - sum(call_phases.values())
call_phases["driver_build"] = spent.get("driver_build", 0.0)
call_phases["launch_prep"] = spent.get("launch_prep", 0.0)
call_phases["resolve_rest"] = resolve_rest
call_phases["call_rest"] = first_ms - spent.get("resolve", 0.0) - call_phases["driver_build"] - (
    call_phases["launch_prep"])
print(json.dumps({
    "import_kernevo_ms": (t1 - t0) * 1e3, "cupy_init_ms": (t2 - t1) * 1e3,
    "load_ms": load_ms, "first_call_ms": first_ms,
    "load_first_call_ms": load_ms + first_ms, "route": decision.route, "reason": decision.reason,
    "rel_error": error, "load_phases_ms": load_phases, "first_call_phases_ms": call_phases,
    "run": run, "heavy_modules": sorted(set(sys.argv[5].split(",")) & imported),
}))
"""


def seed_champion(gpu: Any, dtype: str, cubin: bytes, key: Any, cuda_runtime_version: str) -> Any:
    """trsm_small's seed at m64n64 for ``gpu`` (a ``kernevo.device.GpuInfo``) as a signed
    ``kernevo.client.ChampionKernel``: ``cubin`` its compiled module, ``key`` the
    ``kernevo.keys.SigningKey`` that signs it, with a v2 certificate naming ``gpu``'s name, key,
    arch and versions (``cuda_runtime_version`` as ``"12.8"``) so that the loader's trust
    checks admit it on this device without a toolkit remark.

    Raises:
        ValueError: a field the certificate or the champion refuses (e.g. a GPU key that is
            not a plain name).
    """
    from kernevo.certificate import CERTIFICATE_FORMAT, REQUIRED_CHECKS, Certificate
    from kernevo.client import ChampionKernel
    from kernevo.paths import registry
    from kernevo.signature import champion_payload, sign

    spec = registry.get_path(PATH, BUCKET)
    source = spec.seed_source()
    verified = [list(shape) for shape in spec.verify_shapes]
    certificate = Certificate(
        format=CERTIFICATE_FORMAT,
        checks_passed=list(REQUIRED_CHECKS[CERTIFICATE_FORMAT]),
        input_seeds=[0],
        held_out_seeds=[],
        verified_shapes=[tuple(shape) for shape in verified],
        held_out_shapes=[],
        determinism_shapes=[],
        sanitizer_tools=[],
        sanitizer_version=None,
        sanitizer_shapes={},
        gpu_name=gpu.name,
        gpu_key=gpu.key,
        arch=gpu.arch,
        nvidia_driver_version=gpu.nvidia_driver_version or None,
        cuda_driver_api_version=gpu.cuda_driver_api_version or None,
        cuda_runtime_version=cuda_runtime_version or None,
        nvrtc_version=gpu.nvrtc_version or None,
        timings=[],
        noise_floor=None,
        input_scales=[],
        not_verified=[
            "everything: trsm_small's seed signed by scripts/loader_startup.py with a key made "
            "for one start-up measurement; the checks listed did not run"
        ],
    ).to_json_dict()
    payload = {
        "path": PATH,
        "dtype": dtype,
        "gpu": gpu.key,
        "shape_bucket": BUCKET,
        "program_id": 1,
        "arch": gpu.arch,
        "nvrtc_version": gpu.nvrtc_version or None,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "source": source,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "compile_options": list(spec.compile_options(dtype, gpu.arch)),
        "launch": {"kernel": spec.kernel_name, "config_kernel": spec.config_kernel_name},
        "envelope": {**spec.envelope, "verified_shapes": verified},
        "metrics": {},
        "promoted_at": None,
        "certificate": certificate,
    }
    unsigned = ChampionKernel.from_payload(payload, cubin)
    signature = sign(key.private_key, champion_payload(unsigned))
    return replace(unsigned, signature=signature, signing_key_id=key.key_id)


def prepare(folder: Path, dtype: str, api_url: str, *, ask_missing: bool = False) -> Any:
    """The key pair (``folder/keys``) and the disk cache (``folder/cache``), its entries
    recorded as answers of the service at ``api_url`` (the loader trusts an entry as fresh only
    for the service it came from), holding the signed
    seed compiled for CuPy's current device and, unless ``ask_missing``, a negative entry for
    every other path serving the problem (:func:`remember_other_paths_absent`); returns that
    device's ``GpuInfo``.

    Raises:
        kernevo.NoGpuError: no usable CUDA device.
        RuntimeError: the seed does not compile (or this install has no compiler).
    """
    import cupy

    from kernevo.cache import ChampionCache
    from kernevo.device import current_gpu
    from kernevo.environment import service_id
    from kernevo.kernel import compile_for_arch
    from kernevo.keys import generate_key_pair
    from kernevo.paths import registry

    gpu = current_gpu()
    spec = registry.get_path(PATH, BUCKET)
    options = list(spec.compile_options(dtype, gpu.arch))
    cubin = compile_for_arch(spec.seed_source(), options, gpu.arch)
    runtime = cupy.cuda.runtime.runtimeGetVersion()
    key = generate_key_pair(folder / "keys")
    champion = seed_champion(gpu, dtype, cubin, key, f"{runtime // 1000}.{runtime % 1000 // 10}")
    cache = ChampionCache(folder / "cache", service=service_id(api_url))
    cache.store(champion)
    if not ask_missing:
        remember_other_paths_absent(cache, gpu.key, dtype)
    return gpu


def compile_loader_bytecode() -> None:
    """Compile ``kernevo`` and ``seeds`` under :data:`ROOT` to bytecode in their
    ``__pycache__`` folders (what ``pip install`` does for an installed package; up-to-date
    files are left as they are), so that the measuring processes import them as an
    application imports its installed loader whatever ``PYTHONDONTWRITEBYTECODE`` says.

    Raises:
        RuntimeError: a module does not compile.
    """
    import compileall

    for package in ("kernevo", "seeds"):
        if not compileall.compile_dir(ROOT / package, quiet=1):
            raise RuntimeError(f"{package} does not compile to bytecode")


def remember_other_paths_absent(cache: Any, gpu_key: str, dtype: str) -> list[str]:
    """Record in ``cache`` (a ``kernevo.cache.ChampionCache``), as a 404 from the service
    would, that no path serving trsm at M×N in ``dtype`` other than :data:`PATH` has a
    champion on ``gpu_key``; returns those paths as ``path/bucket``."""
    from kernevo.client import ChampionKey
    from kernevo.paths import registry

    others = []
    for served in registry.route("trsm", dtype, M, N):
        if served.path_id != PATH:
            cache.remember_absent(ChampionKey(gpu_key, served.path_id, dtype, served.shape_bucket))
            others.append(f"{served.path_id}/{served.shape_bucket}")
    return others


def closed_port_url() -> str:
    """An http:// URL on 127.0.0.1 at a port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def measure(folder: Path, dtype: str, run: str, api_url: str) -> dict[str, Any]:
    """Run the fresh interpreter (module doc) on the key pair and cache under ``folder`` as
    process ``run`` (``"first"``, which imports and times the full path's phases, or
    ``"warm"``), its service at ``api_url``; its figures and decision as a dict. Both runs get
    the same ``KERNEVO_*`` variables, as two starts of one application would (the warm-start
    memo is bound to them).

    Raises:
        RuntimeError: the interpreter failed (its last stderr lines in the message).
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("KERNEVO_")}
    env.update(
        KERNEVO_API_URL=api_url,
        KERNEVO_CACHE_DIR=str(folder / "cache"),
        KERNEVO_KEY_DIR=str(folder / "keys"),
    )
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, dtype, str(M), str(N), run, ",".join(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"the measuring interpreter failed ({done.returncode}): {tail}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def phases_line(result: dict[str, Any]) -> str:
    """The load and first-call phases of ``result`` (module doc) as one line, in ms."""

    def joined(phases: dict[str, float]) -> str:
        return ", ".join(f"{name.replace('_', ' ')} {ms:.1f}" for name, ms in phases.items())

    return (
        f"phases (ms): load: {joined(result['load_phases_ms'])} | "
        f"first call: {joined(result['first_call_phases_ms'])}"
    )


def warm_start_line(result: dict[str, Any]) -> str:
    """Whether the second process's load and first call were answered by the warm-start memo,
    and which of the full path's modules (:data:`HEAVY`) it imported, as one line."""
    memo = "replayed" if result["reason"].startswith("warm-start memo") else "not used"
    heavy = ", ".join(result["heavy_modules"]) or "none"
    return f"warm-start memo {memo}; of {', '.join(HEAVY)} imported: {heavy}"


def verdict(result: dict[str, Any], dtype: str) -> str | None:
    """Why ``result`` is not a kernel call from the disk cache that solved right, or ``None``."""
    if result["route"] != "kernel" or "from disk cache" not in result["reason"]:
        return f"not the cached kernel: {result['route']} ({result['reason']})"
    if not result["rel_error"] <= TOLERANCE[dtype]:
        return f"relative error {result['rel_error']:.1e} over {TOLERANCE[dtype]:g}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=DTYPES, default="float64")
    parser.add_argument(
        "--ask-missing",
        action="store_true",
        help="no negative entries for the other paths serving the problem: the first call "
        "asks the service (a closed port) for each",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    from needs_gpu import exit_without_gpu

    from kernevo.device import NoGpuError

    exit_without_gpu(__file__)

    with tempfile.TemporaryDirectory(prefix="kernevo-startup-") as tmp:
        try:
            api_url = closed_port_url()
            gpu = prepare(Path(tmp), args.dtype, api_url, ask_missing=args.ask_missing)
            compile_loader_bytecode()
            results = {run: measure(Path(tmp), args.dtype, run, api_url) for run in RUNS}
        except (NoGpuError, RuntimeError) as error:
            print(f"loader_startup: {error}", file=sys.stderr)
            return 1
    print(
        f"loader start-up on {gpu.name} ({gpu.arch}), trsm {args.dtype}, champion from disk cache"
    )
    problems = []
    for run, title in RUNS.items():
        result = results[run]
        print(f"{title}:")
        for name in TIMES:
            print(f"  {LABELS[name]}: {result[name]:.1f} ms")
        print(f"  {phases_line(result)}")
        print(f"  route: {result['route']} ({result['reason']})")
        print(f"  relative error {result['rel_error']:.1e} (tolerance {TOLERANCE[args.dtype]:g})")
        if run == "warm":
            print(f"  {warm_start_line(result)}")
        problem = verdict(result, args.dtype)
        if problem is not None:
            problems.append(f"{title.split(' (')[0]}: {problem}")
    if args.json is not None:
        figures = {"dtype": args.dtype, **results["warm"], "first_run": results["first"]}
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
