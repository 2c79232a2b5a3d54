// trsm_small_batched: many independent small triangular solves of one shape, one launch.
//
// Operation (batched BLAS ?trsm, side=L, uplo=L, trans=N, diag=N, alpha=1): for every batch index
// i in [0, batch), solve A_i * X_i = B_i for X_i.
//   A: batch matrices m x m, lower triangular, packed and row-major: A_i(r, c) is at
//      A + i*m*m + r*m + c; the strict upper triangle is never read (it may hold anything, NaN
//      included).
//   B: batch matrices m x n, packed and row-major: B_i(r, c) is at B + i*m*n + r*n + c; X_i
//      overwrites B_i in place.
//   1 <= m, n <= 64 (the small regime), batch >= 1; scalar type chosen at compile time by
//   -DKERNEVO_DTYPE (0 float32, 1 float64, 2 complex64, 3 complex128).
//
// Algorithm: the HSMA-TRSM paper's small-scale regime (m, n <= 64: the whole problem fits one
// block) turned for many problems at once. A block solves several matrices ("slots"); each
// stages its A_i's lower triangle in shared memory once, with the reciprocal diagonal, and
// every right-hand-side column is owned by TRSM_ROW_SPLIT threads that hold its rows in
// registers (thread h of a column holds rows h*RPT .. h*RPT + RPT - 1; RPT = B / ROW_SPLIT for
// the smallest B of 16, 32, 64 with m <= B, a compile-time bound chosen per launch).
// The substitution is right-looking: at step k the owner of row k scales it by 1/a_kk (a
// shuffle hands x_k to the column's other threads when the rows are split) and every thread
// subtracts a_rk * x_k from its rows below k, reading a_rk from shared memory (A staged
// column-major: one base address per step plus compile-time offsets; one address per column
// group: a broadcast). No barrier inside the solve; with the whole step loop unrolled
// (k and the register index are compile-time), the updates of one step are independent FMAs.
// Loads and stores of B are coalesced: for a fixed row, the threads of consecutive columns read
// consecutive addresses of row-major B. The batch index is grid.x times the slots per block.
//
// Launch geometry (the one mechanism kernevo uses): the driver calls
// kernevo_launch_config(m, n, batch, cfg) once per shape; it writes grid xyz, block xyz and
// dynamic shared-memory bytes to cfg[0..6]. Threads per matrix T = n * ROW_SPLIT; slots per
// block = max(1, min(TRSM_BLOCK_THREADS / T, TRSM_SMEM_KB KB / one matrix's bytes)); block =
// slots * T rounded up to whole warps (the shuffles name whole warps; spare lanes follow the
// same steps on slot 0's data and store nothing); grid.x = ceil(batch / slots). Dynamic shared
// memory: slots * (m*m + m) scalars, 65 KB for complex128 at m = 64 (one slot), past the 48 KB
// static limit, so the driver opts the kernel in.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   TRSM_BLOCK_THREADS  threads a block aims for (it solves as many matrices as fit)
//   TRSM_SMEM_KB        shared memory a block's matrices may take (fewer, wider blocks per SM)
//   TRSM_ROW_SPLIT      threads sharing one column's rows (complex128 takes 4: 32 or 64 rows
//                       of 16 bytes in one thread's registers spill, measured with NVRTC 13 for
//                       sm_90)
//   TRSM_INV_DIAG       1: multiply by a precomputed 1/a_kk; 0: divide at each step
//   TRSM_FULL_NOINLINE  1: the full 64-row bound's solve is a function of its own (__noinline__),
//                       which ptxas schedules apart from the kernel: 10 s instead of 33 s of CPU
//                       to compile in float32 (NVRTC 13.5, the 2-core CI machine), at the cost of
//                       one call per thread past m = 32; 0: all three bounds inlined

// ---- fixed prelude: scalar type and arithmetic (header-free: NVRTC ships no CUDA headers) ----
#ifndef KERNEVO_DTYPE
#error "compile with -DKERNEVO_DTYPE=0..3"
#endif
#if KERNEVO_DTYPE == 0 || KERNEVO_DTYPE == 2
typedef float real_t;
#else
typedef double real_t;
#endif
#define KV_COMPLEX (KERNEVO_DTYPE >= 2)

#if KV_COMPLEX
struct kv_complex {
  real_t re, im;
};
typedef kv_complex scalar_t;
__device__ __forceinline__ scalar_t kv_zero() { return {real_t(0), real_t(0)}; }
__device__ __forceinline__ scalar_t kv_mul(scalar_t a, scalar_t b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
// acc - a * x
__device__ __forceinline__ scalar_t kv_fms(scalar_t acc, scalar_t a, scalar_t x) {
  return {acc.re - a.re * x.re + a.im * x.im, acc.im - a.re * x.im - a.im * x.re};
}
// Division and reciprocal scaled by the larger of |re|, |im| (Smith's method: R. L. Smith,
// "Algorithm 116: Complex division", CACM 5(8), 1962; LAPACK's xLADIV refines it). The textbook
// form divides by |a|^2, which overflows for |a| above sqrt(max) (1.8e19 in float32, 1.3e154 in
// float64) and underflows below sqrt(min normal): X = NaN or 0 where X is O(1). Here no
// intermediate leaves the range of a, b and b / a, and a power-of-two scaling of a and b
// scales every intermediate exactly.
__device__ __forceinline__ scalar_t kv_recip(scalar_t a) {
  if (fabs(a.re) >= fabs(a.im)) {
    const real_t r = a.im / a.re, t = real_t(1) / (a.re + a.im * r);
    return {t, -r * t};
  }
  const real_t r = a.re / a.im, t = real_t(1) / (a.im + a.re * r);
  return {r * t, -t};
}
__device__ __forceinline__ scalar_t kv_div(scalar_t b, scalar_t a) {
  if (fabs(a.re) >= fabs(a.im)) {
    const real_t r = a.im / a.re, t = real_t(1) / (a.re + a.im * r);
    return {(b.re + b.im * r) * t, (b.im - b.re * r) * t};
  }
  const real_t r = a.re / a.im, t = real_t(1) / (a.im + a.re * r);
  return {(b.re * r + b.im) * t, (b.im * r - b.re) * t};
}
__device__ __forceinline__ scalar_t kv_shfl(scalar_t v, int lane) {
  return {__shfl_sync(0xffffffffu, v.re, lane), __shfl_sync(0xffffffffu, v.im, lane)};
}
#else
typedef real_t scalar_t;
__device__ __forceinline__ scalar_t kv_zero() { return real_t(0); }
__device__ __forceinline__ scalar_t kv_mul(scalar_t a, scalar_t b) { return a * b; }
__device__ __forceinline__ scalar_t kv_fms(scalar_t acc, scalar_t a, scalar_t x) {
  return acc - a * x;
}
__device__ __forceinline__ scalar_t kv_recip(scalar_t a) { return real_t(1) / a; }
__device__ __forceinline__ scalar_t kv_div(scalar_t b, scalar_t a) { return b / a; }
__device__ __forceinline__ scalar_t kv_shfl(scalar_t v, int lane) {
  return __shfl_sync(0xffffffffu, v, lane);
}
#endif
#define KV_WARP 32
#define KV_MAX_M 64

// EVOLVE-BLOCK-START
#define TRSM_BLOCK_THREADS 128  // tune: 64 128 256 512
#define TRSM_ROW_SPLIT 1        // tune: 1 2 4
#define TRSM_INV_DIAG 1         // tune: 0 1
#define TRSM_SMEM_KB 96         // tune: 32 64 96 192
#define TRSM_FULL_NOINLINE 0    // tune: 0 1

#if KERNEVO_DTYPE == 3 && TRSM_ROW_SPLIT < 4
#define KV_ROW_SPLIT 4
#else
#define KV_ROW_SPLIT TRSM_ROW_SPLIT
#endif
#define KV_RPT (KV_MAX_M / KV_ROW_SPLIT)  // rows of a column one thread holds
// The largest block the geometry makes: slots * T <= TRSM_BLOCK_THREADS when one matrix fits,
// else one matrix of T <= 64 * ROW_SPLIT threads; both are whole warps.
#define KV_MAX_THREADS \
  (TRSM_BLOCK_THREADS > KV_MAX_M * KV_ROW_SPLIT ? TRSM_BLOCK_THREADS : KV_MAX_M * KV_ROW_SPLIT)

// Blocks per SM promised to the compiler (__launch_bounds__'s second argument), so that it caps
// registers near what the solve needs (a column's rows, KV_RPT scalars of KV_WORDS 32-bit words,
// plus about 72 for addresses and the step) instead of hoisting the unrolled loop's shared-memory
// loads into every register it may take (255, with spills, when left free).
#if KERNEVO_DTYPE == 0
#define KV_WORDS 1
#elif KERNEVO_DTYPE == 3
#define KV_WORDS 4
#else
#define KV_WORDS 2
#endif
#define KV_MIN_BLOCKS_RAW (65536 / (KV_MAX_THREADS * (KV_RPT * KV_WORDS + 72)))
#define KV_MIN_BLOCKS (KV_MIN_BLOCKS_RAW > 0 ? KV_MIN_BLOCKS_RAW : 1)

// Matrices one block solves: as many as TRSM_BLOCK_THREADS threads and TRSM_SMEM_KB of shared
// memory hold, at least one (a complex128 64 x 64 matrix alone takes 65 KB).
__device__ __forceinline__ int kv_slots(int m, int n) {
  const int by_threads = TRSM_BLOCK_THREADS / (n * KV_ROW_SPLIT);
  const int by_memory = TRSM_SMEM_KB * 1024 / ((m * m + m) * (int)sizeof(scalar_t));
  const int slots = by_threads < by_memory ? by_threads : by_memory;
  return slots > 0 ? slots : 1;
}

// One column's solve by the ROW_SPLIT threads that own it: thread h holds rows h*RPT ..
// h*RPT + RPT - 1 in registers (RPT * ROW_SPLIT >= m), loads them from B_i, runs the unrolled
// right-looking substitution against the staged A_i and writes X back over B_i.
template <int RPT>
__device__ __forceinline__ void kv_solve_columns(const scalar_t* __restrict__ sA_i,
                                                 const scalar_t* __restrict__ sInv_i,
                                                 scalar_t* __restrict__ B_i, int m, int n,
                                                 int col, int h, int tid, bool stores) {
  scalar_t b[RPT];  // b[j] is row j + RPT * h
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    const int r = j + RPT * h;
    b[j] = (stores && r < m) ? B_i[(long long)r * n + col] : kv_zero();
  }

#if KV_ROW_SPLIT > 1
  const int group_lane = (tid & (KV_WARP - 1)) & ~(KV_ROW_SPLIT - 1);
#endif
#pragma unroll
  for (int k = 0; k < RPT * KV_ROW_SPLIT; ++k) {
    if (k >= m) break;  // the same for every thread: no shuffle is left half-done
    const int hk = k / RPT;
    const int jk = k - hk * RPT;
#if TRSM_INV_DIAG
    scalar_t x = kv_mul(b[jk], sInv_i[k]);
#else
    scalar_t x = kv_div(b[jk], sInv_i[k]);
#endif
#if KV_ROW_SPLIT > 1
    x = kv_shfl(x, group_lane | hk);  // x_k from the thread holding row k
#endif
    if (h == hk) b[jk] = x;
    const scalar_t* column = sA_i + k * m + RPT * h;  // a_rk for r = j + RPT * h at [j]
    // Only rows below k: a solved row is final, and 0 * x would turn it into NaN wherever x is
    // not finite.
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      const int r = j + RPT * h;
      if (r > k && r < m) b[j] = kv_fms(b[j], column[j], x);
    }
  }

  // The store addresses anew: without this opaque step the compiler keeps the load's 64
  // addresses alive through the whole solve (two registers each, spilled).
  scalar_t* out = B_i + (long long)(RPT * h) * n + col;
  asm volatile("" : "+l"(out));
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    if (stores && j + RPT * h < m) out[(long long)j * n] = b[j];
  }
}

#if TRSM_FULL_NOINLINE
#define KV_FULL_LINKAGE __noinline__
#else
#define KV_FULL_LINKAGE __forceinline__
#endif
// The solve at the full bound (m > 32), inlined into the kernel or not (TRSM_FULL_NOINLINE).
__device__ KV_FULL_LINKAGE void kv_solve_columns_full(const scalar_t* __restrict__ sA_i,
                                                      const scalar_t* __restrict__ sInv_i,
                                                      scalar_t* __restrict__ B_i, int m, int n,
                                                      int col, int h, int tid, bool stores) {
  kv_solve_columns<KV_RPT>(sA_i, sInv_i, B_i, m, n, col, h, tid, stores);
}

extern "C" __global__ void kernevo_launch_config(int m, int n, int batch, int* cfg) {
  const int slots = kv_slots(m, n);
  const int threads = slots * n * KV_ROW_SPLIT;
  cfg[0] = (batch + slots - 1) / slots;
  cfg[1] = 1;
  cfg[2] = 1;
  cfg[3] = (threads + KV_WARP - 1) / KV_WARP * KV_WARP;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = slots * (m * m + m) * (int)sizeof(scalar_t);
}

extern "C" __global__ void __launch_bounds__(KV_MAX_THREADS, KV_MIN_BLOCKS)
trsm_small_batched_kernel(const scalar_t* __restrict__ A, scalar_t* __restrict__ B, int m, int n,
                          int batch) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  const int slots = kv_slots(m, n);
  // slots matrices, each column-major (ld m): step k reads column k at one base address plus
  // compile-time offsets, so no register holds a row's address.
  scalar_t* sA = reinterpret_cast<scalar_t*>(kv_smem);
  scalar_t* sInv = sA + slots * m * m;                   // slots diagonals: 1/a_kk or a_kk

  const int tid = threadIdx.x;
  const int per_matrix = n * KV_ROW_SPLIT;
  const int slot_raw = tid / per_matrix;
  const int within = tid - slot_raw * per_matrix;
  const int col = within / KV_ROW_SPLIT;
  const int h = within - col * KV_ROW_SPLIT;
  const long long first = (long long)blockIdx.x * slots;
  const long long i = first + slot_raw;
  const bool active = slot_raw < slots && i < batch;
  const int slot = slot_raw < slots ? slot_raw : 0;

  // Stage the lower triangles of this block's matrices (consecutive in A: one coalesced sweep);
  // the strict upper triangle is never read from device memory.
  const long long left = batch - first;
  const int held = left < slots ? (int)left : slots;
  const int mm = m * m;
  const scalar_t* A_block = A + first * mm;
  for (int idx = tid; idx < held * mm; idx += blockDim.x) {
    const int s = idx / mm;
    const int rc = idx - s * mm;
    const int r = rc / m;
    const int c = rc - r * m;
    if (c <= r) sA[s * mm + c * m + r] = A_block[idx];
  }
  __syncthreads();
  for (int idx = tid; idx < held * m; idx += blockDim.x) {
    const int s = idx / m;
    const int k = idx - s * m;
    const scalar_t d = sA[s * mm + k * m + k];  // the same place in either order
#if TRSM_INV_DIAG
    sInv[idx] = kv_recip(d);
#else
    sInv[idx] = d;
#endif
  }
  __syncthreads();

  // Rows per thread as a compile-time bound fitted to m: the unrolled steps and row updates run
  // over RPT * ROW_SPLIT >= m rows, not 64 (at m = 16 the 64-row solve predicated off three
  // quarters of every step's updates and ran 0.4-0.5x cuBLAS, RESULTS section 18).
  scalar_t* B_i = B + (active ? i : 0) * (long long)m * n;
  const bool stores = active && col < n;
  const scalar_t* sA_i = sA + slot * mm;
  const scalar_t* sInv_i = sInv + slot * m;
  if (m <= 16) {
    kv_solve_columns<16 / KV_ROW_SPLIT>(sA_i, sInv_i, B_i, m, n, col, h, tid, stores);
  } else if (m <= 32) {
    kv_solve_columns<32 / KV_ROW_SPLIT>(sA_i, sInv_i, B_i, m, n, col, h, tid, stores);
  } else {
    kv_solve_columns_full(sA_i, sInv_i, B_i, m, n, col, h, tid, stores);
  }
}
// EVOLVE-BLOCK-END
