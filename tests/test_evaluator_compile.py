"""NVRTC compilation of every seed in every dtype, without a GPU (in the sandboxed compiler
child), the compile cache and the capped compile log."""

from __future__ import annotations

import json
import os

import pytest

from evaluator.compile import MAX_LOG_CHARS, cap_log, compile_cubin, parse_resources
from evaluator.compile_sandbox import shared_compiler
from seeds.registry import PATHS, get_path
from seeds.tunables import parse_tunables

SEEDS = [(p, d) for p in PATHS for d in PATHS[p].dtypes]


@pytest.mark.parametrize(("path_id", "dtype"), SEEDS)
def test_seed_compiles_to_sm90_cubin(path_id, dtype, tmp_path):
    spec = get_path(path_id)
    result = compile_cubin(spec.seed_source(), spec.compile_options(dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    assert result.cubin[:4] == b"\x7fELF"  # a cubin is an ELF image, not PTX text
    kernel = result.resources[spec.kernel_name]
    assert 0 < kernel.registers <= 255 and kernel.spill_store_bytes == 0
    assert spec.config_kernel_name in result.resources


def test_compile_error_is_a_result_with_the_log(tmp_path):
    spec = get_path("trsm_small")
    bad = spec.seed_source().replace("cfg[1] = 1;", "cfg[1] = undefined_name;")
    result = compile_cubin(bad, spec.compile_options("float64", "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert not result.ok and "undefined_name" in result.log and result.cubin == b""


def test_cache_hit_and_tampered_entry_is_a_miss(tmp_path):
    spec = get_path("trsm_small")
    opts = spec.compile_options("float32", "sm_90")
    first = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    second = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    assert not first.cached and second.cached and second.cubin == first.cubin
    (cubin_file,) = tmp_path.glob("*.cubin")
    cubin_file.write_bytes(b"garbage")
    third = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    assert not third.cached and third.cubin == first.cubin
    meta = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert meta["cubin_sha256"] == first.cubin_sha256


def test_options_must_target_the_arch(tmp_path):
    with pytest.raises(ValueError, match="do not target"):
        compile_cubin("", ["-arch=sm_80"], "sm_90", cache_dir=tmp_path)


def test_parse_resources_reads_ptxas_verbose_log():
    log = (
        "ptxas info    : Function properties for k\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem\n"
    )
    (res,) = parse_resources(log).values()
    assert (res.registers, res.stack_bytes, res.spill_store_bytes, res.spill_load_bytes,
            res.static_shared_bytes) == (40, 16, 8, 4, 1024)  # fmt: skip


def test_seed_declares_tunables_inside_the_block():
    tunables = {t.name: t for t in parse_tunables(get_path("trsm_small").seed_source())}
    assert set(tunables) == {"TRSM_WARPS", "TRSM_COLS_PER_WARP", "TRSM_UNROLL", "TRSM_INV_DIAG"}
    for t in tunables.values():
        assert t.value in t.choices and len(t.choices) >= 2
        assert t.with_value(t.choices[-1]).split("//")[0].split()[-1] == t.choices[-1]


def _inject(code: str) -> str:
    seed = get_path("trsm_small").seed_source()
    return seed.replace("// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-START\n" + code + "\n")


def test_macro_include_of_environ_reads_nothing_in_the_sandbox(tmp_path, monkeypatch):
    """Behind the screen: NVRTC resolves includes on the host, and in the evaluator's own
    process ``#include "/proc/self/environ"`` echoed the job's environment (API keys) into the
    log. The compiler child has an empty environment and, with Landlock, no file access."""
    monkeypatch.setenv("KERNEVO_TEST_COMPILE_MARKER", "marker-7f3a")
    spec = get_path("trsm_small")
    shared_compiler().version()  # starts the child, which reports whether Landlock is on
    landlock = shared_compiler().landlock_abi > 0
    # Without Landlock the parent's /proc/<pid>/environ is readable: only the screen guards it.
    targets = ["/proc/self/environ"] + ([f"/proc/{os.getpid()}/environ"] if landlock else [])
    for target in targets:
        source = _inject(f'#define H "{target}"\n#include H')
        result = compile_cubin(source, spec.compile_options("float32", "sm_90"), "sm_90",
                               cache_dir=tmp_path)  # fmt: skip
        assert "marker-7f3a" not in result.log and "PATH=" not in result.log
        if landlock:
            assert not result.ok and f'cannot open source file "{target}"' in result.log


def test_long_log_keeps_head_and_tail_and_says_what_was_cut():
    log = "".join(f"line {i}: error\n" for i in range(10_000)) + "\x00"
    capped = cap_log(log)
    assert len(capped) < MAX_LOG_CHARS + 100 and "\x00" not in capped
    assert capped.startswith("line 0: error") and capped.endswith("line 9999: error\n")
    cut = len(log) - 1 - MAX_LOG_CHARS
    assert f"[... {cut} characters of the compile log cut ...]" in capped
    assert cap_log("short\x00") == "short"


def test_a_flood_of_errors_is_stored_capped(tmp_path):
    """A candidate can make NVRTC write a long log: here 100 errors, each naming a 200-character
    identifier and echoing its line."""
    spec = get_path("trsm_small")
    flood = "\n".join(f"__device__ int kv_e{i} = undefined_{i}_{'x' * 200};" for i in range(120))
    result = compile_cubin(_inject(flood), spec.compile_options("float32", "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert not result.ok and "characters of the compile log cut" in result.log
    assert len(result.log) <= MAX_LOG_CHARS + 100 and "undefined_0_" in result.log


def test_compile_log_has_no_nul_bytes(tmp_path):
    """PostgreSQL text/jsonb refuse NUL; NVRTC's log ends in one."""
    spec = get_path("trsm_small")
    bad = spec.seed_source().replace("cfg[1] = 1;", "cfg[1] = undefined_name;")
    for source in (spec.seed_source(), bad):
        result = compile_cubin(source, spec.compile_options("float32", "sm_90"), "sm_90",
                               cache_dir=tmp_path)  # fmt: skip
        assert "\x00" not in result.log


@pytest.mark.parametrize("payload", ["null", "[]", "{}", '{"cubin_sha256": 1}'])
def test_corrupt_cache_metadata_is_a_miss(tmp_path, payload):
    spec = get_path("trsm_small")
    opts = spec.compile_options("float32", "sm_90")
    first = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    next(tmp_path.glob("*.json")).write_text(payload)
    again = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    assert again.ok and not again.cached and again.cubin == first.cubin


def test_cache_entry_with_wrong_types_or_unwritable_path_still_compiles(tmp_path):
    spec = get_path("trsm_small")
    opts = spec.compile_options("float64", "sm_90")
    first = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    meta_file = next(tmp_path.glob("*.json"))
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "ok": "no"}))
    assert not compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path).cached
    for f in tmp_path.iterdir():
        f.unlink()
    meta_file.mkdir()  # the entry's path is a directory: no cache, still a result
    again = compile_cubin(spec.seed_source(), opts, "sm_90", cache_dir=tmp_path)
    assert again.ok and again.cubin == first.cubin
