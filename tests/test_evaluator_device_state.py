"""No state survives from one launch to the next: ``device_global_state`` on the cubin NVRTC 13
really emits (compiled here, no GPU), and the pipeline refusing it before any GPU work.

Each candidate edits only the EVOLVE-BLOCK, as an LLM would, passes the screen and compiles;
the replay memos are whole, correct solvers (``REPLAY_MEMO`` runs on the GPU in
``tests/test_evaluator_gpu.py``).
"""

from __future__ import annotations

import io

import pytest
from elftools.elf.elffile import ELFFile

from evaluator.checks.device_state import CHECK, device_state_failure
from evaluator.compile import compile_cubin
from evaluator.pipeline import Evaluator
from evaluator.report import STATUSES, EvaluationReport
from evaluator.screen import screen
from seeds.registry import get_path

SPEC = get_path("trsm_small")
SEED = SPEC.seed_source()
DTYPES = ["float32", "float64", "complex64", "complex128"]

# Where candidates edit the seed's block: before the kernels, after the staging barrier (the
# solve loop below has no block-wide barrier), at the first line of the kernel, and the store.
TOP = 'extern "C" __global__ void kernevo_launch_config'
AFTER_STAGING = "  if (col0 >= n) return;\n"
KERNEL_START = "  const int tid = warp * KV_WARP + lane;\n"
STORE_LOOP = """#pragma unroll
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
      const int row = lane + KV_WARP * s;
      const int col = col0 + c;
      if (row < m && col < n) B[(long)col * ldb + row] = b[c][s];
    }
  }
}
// EVOLVE-BLOCK-END"""


def edit(*replacements: tuple[str, str]) -> str:
    """The seed with each ``(old, new)`` applied once; ``old`` must be in the block."""
    source = SEED
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def at_top(code: str) -> tuple[str, str]:
    return TOP, code + "\n" + TOP


# -- replay memos: X kept in __device__ memory, keyed on m, n, the column and the whole problem -

# A 64-bit key of column ``col``'s problem: m, n, col, every entry of A's lower triangle and of
# the column of B, bit for bit; never 0, an empty slot's key. A key of a few elements would make
# a memo that false-hits: the evaluator's containment cases share A's border and zero B's
# columns, and a replayed X of another case leaks its NaN (measured on the H200: refused by
# ``nonfinite_containment``, not by the replay). Keyed on everything, a hit is an exact replay,
# so no run-time check can see it and only the cubin check stands between it and the lineage.
MEMO_KEY = """
__device__ __forceinline__ unsigned long long kv_mix(unsigned long long h, unsigned long long v) {
  return h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
}
__device__ __forceinline__ unsigned long long kv_bits(const scalar_t* p) {
  const unsigned int* w = reinterpret_cast<const unsigned int*>(p);
  unsigned long long h = 0;
  for (int i = 0; i < (int)(sizeof(scalar_t) / 4); ++i) h = kv_mix(h, w[i]);
  return h;
}
__device__ unsigned long long kv_key_of(const scalar_t* A, const scalar_t* B, int m, int n,
                                        int lda, int ldb, int col) {
  unsigned long long h = kv_mix(kv_mix((unsigned long long)m, (unsigned long long)n), col);
  for (int j = 0; j < m; ++j)
    for (int i = j; i < m; ++i) h = kv_mix(h, kv_bits(A + (long)j * lda + i));
  for (int i = 0; i < m; ++i) h = kv_mix(h, kv_bits(B + (long)col * ldb + i));
  return h | 1ull;
}
"""

# kv_find(k, col): the way holding key k for column col, or -1; kv_victim(k, col): the way a
# miss stores into. Every lane of the warp calls both with the same arguments and gets the same
# answer (the lookup reads global memory no lane changes before the store loop).
MEMO_POLICIES = {
    # The last call's X per column: a replay when the same problem comes twice in a row.
    "last_call": """
#define KV_WAYS 1
__device__ unsigned long long kv_keys[KV_WAYS][KV_MAX_M];
__device__ scalar_t kv_memo[KV_WAYS][KV_MAX_M * KV_MAX_M];
__device__ int kv_find(unsigned long long k, int col) { return kv_keys[0][col] == k ? 0 : -1; }
__device__ int kv_victim(unsigned long long k, int col) { return 0; }
""",
    # Direct-mapped: the key's high bits choose one of 64 slots per column.
    "hashed": """
#define KV_WAYS 64
__device__ unsigned long long kv_keys[KV_WAYS][KV_MAX_M];
__device__ scalar_t kv_memo[KV_WAYS][KV_MAX_M * KV_MAX_M];
__device__ int kv_victim(unsigned long long k, int col) { return (int)((k >> 40) % KV_WAYS); }
__device__ int kv_find(unsigned long long k, int col) {
  const int w = kv_victim(k, col);
  return kv_keys[w][col] == k ? w : -1;
}
""",
    # Fully associative, 16 ways per column, round-robin replacement: more ways than the timed
    # graph's 8 rotating input sets, so after one round every timed solve is a replay.
    "associative": """
#define KV_WAYS 16
__device__ unsigned long long kv_keys[KV_WAYS][KV_MAX_M];
__device__ scalar_t kv_memo[KV_WAYS][KV_MAX_M * KV_MAX_M];
__device__ unsigned int kv_next[KV_MAX_M];
__device__ int kv_find(unsigned long long k, int col) {
  for (int w = 0; w < KV_WAYS; ++w)
    if (kv_keys[w][col] == k) return w;
  return -1;
}
__device__ int kv_victim(unsigned long long k, int col) {
  const unsigned int w = kv_next[col] % KV_WAYS;
  __syncwarp();
  if (threadIdx.x == 0) kv_next[col] = w + 1;
  return (int)w;
}
""",
}

# A hit replays the stored X and skips the solve; a miss solves, then stores X and its key.
MEMO_LOOKUP = """  if (col0 >= n) return;
  unsigned long long kv_k[TRSM_COLS_PER_WARP];
  int kv_way[TRSM_COLS_PER_WARP];
  bool kv_hit = true;
#pragma unroll
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
    const int col = col0 + c;
    kv_k[c] = col < n ? kv_key_of(A, B, m, n, lda, ldb, col) : 0ull;
    kv_way[c] = col < n ? kv_find(kv_k[c], col) : 0;
    if (kv_way[c] < 0) kv_hit = false;
  }
  if (kv_hit) {
#pragma unroll
    for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
      for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
        const int row = lane + KV_WARP * s;
        const int col = col0 + c;
        if (row < m && col < n)
          B[(long)col * ldb + row] = kv_memo[kv_way[c]][col * KV_MAX_M + row];
      }
    }
    return;
  }
"""
MEMO_STORE = """#pragma unroll
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
    const int col = col0 + c;
    if (col >= n) continue;
    const int w = kv_victim(kv_k[c], col);
#pragma unroll
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
      const int row = lane + KV_WARP * s;
      if (row < m) {
        B[(long)col * ldb + row] = b[c][s];
        kv_memo[w][col * KV_MAX_M + row] = b[c][s];
      }
    }
    __syncwarp();
    if (lane == 0) kv_keys[w][col] = kv_k[c];
  }
}
// EVOLVE-BLOCK-END"""


def memo_candidate(policy: str) -> str:
    """The seed turned into a replay memo with the ``MEMO_POLICIES[policy]`` table."""
    return edit(
        at_top(MEMO_KEY + MEMO_POLICIES[policy]),
        (AFTER_STAGING, MEMO_LOOKUP),
        (STORE_LOOP, MEMO_STORE),
    )


# The memo that cheats the timed replays; tests/test_evaluator_gpu.py runs it.
REPLAY_MEMO = memo_candidate("associative")

# -- other device-global state ----------------------------------------------------------------

# Blocks run one after another: each waits for the previous one's flag (a spin-wait chain).
FLAG_CHAIN = edit(
    at_top("__device__ volatile int kv_flag;"),
    (
        KERNEL_START,
        KERNEL_START + "  if (tid == 0) { while (kv_flag != (int)blockIdx.x) { } }\n"
        "  __syncthreads();\n",
    ),
    (
        STORE_LOOP,
        STORE_LOOP.removesuffix("}\n// EVOLVE-BLOCK-END") + "  __syncwarp();\n"
        "  if (tid == 0) kv_flag = blockIdx.x + 1 == gridDim.x ? 0 : (int)blockIdx.x + 1;\n"
        "}\n// EVOLVE-BLOCK-END",
    ),
)
STATIC_IN_FUNCTION = edit(
    at_top("__device__ int kv_tick() { static __device__ int kv_ticks; return ++kv_ticks; }"),
    (AFTER_STAGING, AFTER_STAGING + "  if (lane == 0 && kv_tick() < 0) return;\n"),
)
MANAGED = edit(
    at_top("__managed__ unsigned int kv_launches;"),
    (KERNEL_START, KERNEL_START + "  if (tid == 0) atomicAdd(&kv_launches, 1u);\n"),
)
# The heap outlives the launch: free then malloc of the same size hands back the same block.
DEVICE_MALLOC = edit(
    (
        AFTER_STAGING,
        AFTER_STAGING + "  scalar_t* kv_heap = (scalar_t*)malloc(KV_MAX_M * sizeof(scalar_t));\n"
        "  if (kv_heap != nullptr) { kv_heap[lane] = b[0][0]; free(kv_heap); }\n",
    ),
)
DEVICE_NEW = edit(
    (
        AFTER_STAGING,
        AFTER_STAGING + "  int* kv_heap = new int[KV_MAX_M];\n"
        "  kv_heap[lane] = lane; if (kv_heap[m & 31] == 99) return; delete[] kv_heap;\n",
    ),
)
PRINTF = edit((AFTER_STAGING, AFTER_STAGING + '  if (m > 1000) printf("m=%d\\n", m);\n'))
CONST_DEVICE_TABLE = edit(
    at_top("__device__ const int kv_warps_of[5] = {1, 2, 4, 8, 16};"),
    ("  cfg[4] = TRSM_WARPS;", "  cfg[4] = kv_warps_of[2 + (m > KV_MAX_M)];"),
)
INLINE_PTX_GLOBAL = edit(
    (
        AFTER_STAGING,
        AFTER_STAGING + "  unsigned int kv_v;\n"
        '  asm volatile("{\\n .global .align 4 .u32 kv_ptx;\\n ld.global.u32 %0, [kv_ptx];\\n}"'
        ' : "=r"(kv_v));\n'
        "  if (kv_v == 12345u) return;\n",
    ),
)

# A __constant__ table, read-only to C++ code...
CONSTANT_TABLE = edit(
    at_top("__constant__ int kv_warps_of[5] = {1, 2, 4, 8, 16};"),
    ("  cfg[4] = TRSM_WARPS;", "  cfg[4] = kv_warps_of[2 + (m > KV_MAX_M)];"),
)
# ...but not to a generic store: its address from cvta.const takes st/atom (a red-team review's
# launch counter, wrong after N calls; the bank lives as long as the module).
CONSTANT_COUNTER = edit(
    at_top("__constant__ unsigned int kv_calls;"),
    (
        AFTER_STAGING,
        AFTER_STAGING + "  unsigned long long kv_p;\n"
        '  asm("cvta.const.u64 %0, kv_calls;" : "=l"(kv_p));\n'
        "  unsigned int kv_n = 0;\n"
        "  if (tid == 0 && blockIdx.x == 0) kv_n = atomicAdd((unsigned int*)kv_p, 1u);\n"
        "  if (kv_n >= 1000u) return;\n",
    ),
)
REFUSED = {
    "last_call_memo": (memo_candidate("last_call"), ["kv_keys", "kv_memo"]),
    "hashed_memo": (memo_candidate("hashed"), ["kv_keys", "kv_memo"]),
    "associative_memo": (REPLAY_MEMO, ["kv_keys", "kv_memo", "kv_next"]),
    "inter_block_flag_chain": (FLAG_CHAIN, ["kv_flag"]),
    "static_device_in_function": (STATIC_IN_FUNCTION, ["kv_ticks"]),
    "managed": (MANAGED, ["kv_launches"]),
    "device_malloc": (DEVICE_MALLOC, ["malloc", "free"]),
    "device_new": (DEVICE_NEW, ["malloc", "free"]),
    "printf": (PRINTF, ["vprintf", "$str"]),
    "device_const_table": (CONST_DEVICE_TABLE, ["kv_warps_of"]),
    "inline_ptx_global": (INLINE_PTX_GLOBAL, ["kv_ptx"]),
    "constant_table": (CONSTANT_TABLE, ["kv_warps_of", ".nv.constant3"]),
    "constant_counter_via_cvta": (CONSTANT_COUNTER, ["kv_calls", ".nv.constant3"]),
}

# Per-block storage and a const table local to the kernel (folded into the code) are allowed.
LOCAL_TABLE_AND_SHARED = edit(
    (
        AFTER_STAGING,
        "  __shared__ int kv_done[TRSM_WARPS];\n"
        "  if (lane == 0) kv_done[warp] = col0 < n;\n"
        "  __syncthreads();\n" + AFTER_STAGING + "  if (kv_done[warp] == 0) return;\n"
        "  { const double kv_t[5] = {1.5, 2.25, 3.125, 4.0625, 5.5};\n"
        "    if (kv_t[lane % 5] == 7.0) return; }\n",
    ),
)


def _cubin(source: str, dtype: str, tmp_path) -> bytes:
    result = compile_cubin(source, SPEC.compile_options(dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    return result.cubin


def _objects(cubin: bytes) -> dict[str, str]:
    """Defined ``STT_OBJECT`` symbols of ``cubin`` and their sections."""
    elf = ELFFile(io.BytesIO(cubin))
    symbols = elf.get_section_by_name(".symtab").iter_symbols()
    return {
        s.name: elf.get_section(s["st_shndx"]).name
        for s in symbols
        if s["st_info"]["type"] == "STT_OBJECT" and isinstance(s["st_shndx"], int)
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_seed_holds_no_device_state_in_any_dtype(dtype, tmp_path):
    assert device_state_failure(_cubin(SEED, dtype, tmp_path)) is None


@pytest.mark.parametrize("name", list(REFUSED))
def test_device_state_is_refused_naming_the_symbol(name, tmp_path):
    source, symbols = REFUSED[name]
    assert screen(source, SEED) is None  # past the text screen: only the cubin shows it
    failure = device_state_failure(_cubin(source, "float64", tmp_path))
    assert failure is not None and failure.check == CHECK == "device_global_state"
    for symbol in symbols:
        assert symbol in failure.detail, failure.detail
    # The section of each stored symbol is named as well.
    assert any(s in failure.detail for s in (".nv.global", ".nv.constant3", "device runtime"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_replay_memo_is_refused_in_every_dtype(dtype, tmp_path):
    failure = device_state_failure(_cubin(REPLAY_MEMO, dtype, tmp_path))
    assert failure is not None and "kv_memo" in failure.detail and ".nv.global" in failure.detail


def test_nvrtc_puts_device_variables_in_nv_global_sections(tmp_path):
    """What the rules rest on: uninitialized __device__ data in .nv.global, initialized in
    .nv.global.init, __constant__ in the user constant bank .nv.constant3."""
    objects = _objects(_cubin(REPLAY_MEMO, "float32", tmp_path))
    assert objects["kv_memo"] == objects["kv_keys"] == ".nv.global"
    assert _objects(_cubin(CONST_DEVICE_TABLE, "float32", tmp_path))["kv_warps_of"] == (
        ".nv.global.init"
    )
    assert _objects(_cubin(CONSTANT_TABLE, "float32", tmp_path))["kv_warps_of"] == ".nv.constant3"


@pytest.mark.parametrize("dtype", DTYPES)
def test_local_tables_and_shared_memory_are_accepted(dtype, tmp_path):
    assert screen(LOCAL_TABLE_AND_SHARED, SEED) is None
    cubin = _cubin(LOCAL_TABLE_AND_SHARED, dtype, tmp_path)
    assert device_state_failure(cubin) is None
    assert not any(section.startswith(".nv.constant3") for section in _objects(cubin).values())


@pytest.mark.parametrize(
    "data", [b"", b"not an ELF image", b"\x7fELF" + bytes(60)], ids=["empty", "text", "header"]
)
def test_an_unreadable_cubin_is_refused(data):
    failure = device_state_failure(data)
    assert failure is not None and failure.check == CHECK
    assert "not a readable ELF image" in failure.detail


def test_a_truncated_cubin_is_refused_or_clean_never_an_exception(tmp_path):
    cubin = _cubin(REPLAY_MEMO, "float32", tmp_path)
    for end in range(0, len(cubin), 97):
        failure = device_state_failure(cubin[:end])
        assert failure is None or failure.check == CHECK


@pytest.mark.parametrize("dtype", DTYPES)
def test_compile_only_pipeline_refuses_before_any_gpu_work(dtype):
    """Compile-only mode (no GPU, as in CI) sees the violation too: ``contract_error``, stage
    ``compile``, numeric metrics, the compile facts kept; the seed stays ``compiled``."""
    evaluator = Evaluator("trsm_small", dtype, gpu_index=None)
    try:
        report = evaluator.evaluate(REPLAY_MEMO)
        assert report.status == "contract_error" and report.status in STATUSES
        assert report.stage == "compile" and report.failure.check == "device_global_state"
        assert "kv_memo" in report.failure.detail
        assert report.compile is not None and report.compile.ok and report.compile.cubin_sha256
        metrics = report.metrics()
        assert all(isinstance(v, float) for v in metrics.values())
        assert metrics["passed"] == metrics["combined_score"] == 0.0 and metrics["stage"] == 1.0
        assert "device_global_state" in report.artifacts()["first_failure"]
        assert EvaluationReport.from_json(report.to_json()).failure == report.failure
        assert evaluator.evaluate(SEED).status == "compiled"
    finally:
        evaluator.close()
