"""NVRTC compilation of every seed in every dtype, without a GPU, and the compile cache."""

from __future__ import annotations

import json

import pytest

from evaluator.compile import compile_cubin, parse_resources
from evaluator.screen import screen
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


def test_screen_rejects_edits_outside_the_block_includes_and_broken_markers():
    seed = get_path("trsm_small").seed_source()
    assert screen(seed, seed) is None
    inside = seed.replace("#define TRSM_WARPS 4", "#define TRSM_WARPS 8")
    assert screen(inside, seed) is None
    outside = seed.replace("#define KV_WARP 32", "#define KV_WARP 16")
    assert screen(outside, seed).check == "edit_outside_evolve_block"
    assert screen("#include <cuComplex.h>\n" + seed, seed).check == "include"
    assert screen(seed.replace("// EVOLVE-BLOCK-END", ""), seed).check == "evolve_block_markers"
    assert screen(seed + "//" + "x" * 70000, seed).check == "source_size"


def test_seed_declares_tunables_inside_the_block():
    tunables = {t.name: t for t in parse_tunables(get_path("trsm_small").seed_source())}
    assert set(tunables) == {"TRSM_WARPS", "TRSM_COLS_PER_WARP", "TRSM_UNROLL", "TRSM_INV_DIAG"}
    for t in tunables.values():
        assert t.value in t.choices and len(t.choices) >= 2
        assert t.with_value(t.choices[-1]).split("//")[0].split()[-1] == t.choices[-1]


FILE_READS = {
    "macro_include": '#define H "/proc/self/environ"\n#include H',
    "include_next": '#include_next "x.h"',
    "line_splice": '#inc\\\nlude "x.h"',
    "has_include": '#if __has_include("/etc/passwd")\n#endif',
    "comment_in_directive": '#/**/include "x.h"',
    "digraph": '%:include "x.h"',
    "string_fakes_comment": 'const char* a = "/*";\n#include "/etc/passwd"\nconst char* b = "*/";',
    "raw_string": 'const char* r = R"(/*)";',
    "embed": '#embed "x"',
    "quoted_builtin": '#include "cuda_fp16.h"',
    "angle_builtin": "#include <cuda_fp16.h>",
    "form_feed": '#\finclude "x.h"',
    "vertical_tab": '#\vinclude "x.h"',
    "digit_separator_fakes_literal": "int p = 1'0 + '/*';\n#include \"x.h\"\nint q = '*/';",
    "token_paste_has_include": '#define P(a, b) a##b\n#if P(__has_, include)("x.h")\n#endif',
    "digraph_paste": "#define P(a, b) a%:%:b",
    "prefixed_raw_string": 'const char* r = u8R"(x)";',
}


def _inject(code: str) -> str:
    seed = get_path("trsm_small").seed_source()
    return seed.replace("// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-START\n" + code + "\n")


@pytest.mark.parametrize("code", FILE_READS.values(), ids=FILE_READS.keys())
def test_screen_blocks_every_way_of_reading_a_host_file(code):
    """NVRTC resolves includes on the host: a missed one leaks files into the compile log."""
    seed = get_path("trsm_small").seed_source()
    failure = screen(_inject(code), seed)
    assert failure is not None and failure.check == "include"


def test_screen_passes_comments_literals_and_numbers_that_only_look_suspicious():
    seed = get_path("trsm_small").seed_source()
    harmless = (
        '// #include "x.h"\n/* #include "y.h" */\n'
        "const char* s = \"## __has_include /*\"; char c = '\\''; int z = 1'000'000;\n"
        "double d = 0x1p+3 + 1.5e-3;"
    )
    assert screen(_inject(harmless), seed) is None


def test_macro_include_of_environ_would_leak_without_the_screen(tmp_path):
    """Why the screen exists: NVRTC itself happily includes /proc/self/environ (the process's
    environment at start, API keys included) and echoes it in the log."""
    spec = get_path("trsm_small")
    source = _inject('#define H "/proc/self/environ"\n#include H')
    result = compile_cubin(source, spec.compile_options("float32", "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert "/proc/self/environ" in result.log and "PATH=" in result.log


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
