// trsm_small_z64: complex128 triangular solve at m = 64, the shared-memory-partitioned pipeline of
// the HSMA-TRSM paper (its double-complex design for the boundary case m = 64), widened for
// parallelism: many compute warps, few columns each, and several thread blocks at n = 64.
//
// Operation (BLAS ztrsm, side=L, uplo=L, trans=N, diag=N, alpha=1): solve A*X = B for X.
//   A: m x m lower triangular, column-major, leading dimension lda (= m); the strict upper
//      triangle is never read (it may hold anything, NaN included).
//   B: m x n, column-major, leading dimension ldb (= m); X overwrites B in place.
//   The path serves m = 64, 1 <= n <= 64; the kernel is also right for any 1 <= m <= 64 (the
//   evaluator's fixed audit pair and scale sweep have m < 64). complex128 only.
//
// The paper's idea: a 64 x 64 complex128 matrix is 64 KB, the paper's whole per-block
// shared-memory budget, so A and B cannot both sit on chip. A is split 2 x 2 into A11, A21, A22
// (32 x 32 each, 16 KB each; A12 is the unread upper block), each staged in its own shared-memory
// region, and B streams through one more region in blocks of 32 rows ("top": rows 0-31,
// "bottom": rows 32-63) by TZ_BW columns. The block solve is
//   X_top = A11^-1 B_top;   B_bot -= A21 X_top;   X_bot = A22^-1 B_bot.
// Two groups of warps: TZ_LOAD_WARPS load (device memory -> shared memory, nothing else but
// 1/a_kk when TZ_INV_DIAG), TZ_COMPUTE_WARPS compute (shared memory -> registers -> solve -> X
// stored from registers). Barrier-separated phases, each overlapping a load by one group with
// the other group's work:
//   phase 1            load:    A11, top block of the first column block -> B region
//   per column block:
//   phase 2  compute: top block -> registers
//   phase 3  compute: X_top = A11^-1 B_top, store  load: bottom block -> B region; A21 and A22
//                                                        (first column block only)
//   phase 4  compute: bottom block -> registers
//   phase 5  compute: B_bot -= A21 X_top, X_bot = A22^-1 B_bot, store
//                                                  load: next column block's top -> B region
// Phase 4 and the bottom loads are skipped when m <= 32. A21 and A22 stream in during the top
// solve (phase 3), not before it: the compute group waits for nothing but A11 and its top block.
// Every phase ends in a barrier of all the block's threads (bar.sync id, TZ_THREADS; every thread
// reaches every barrier): the region a group reads in one phase is the one the other group wrote
// in an earlier phase, and in no phase do the groups touch the same region.
//
// Inside the compute group, lane l holds row l of the 32 rows of a block and each compute warp
// TZ_COLS consecutive columns of the TZ_BW-column block in registers (x: top, b: bottom); a
// substitution step is one warp shuffle (broadcast of x_k), one multiply by 1/a_kk (or a Smith
// division) and one multiply-subtract per column, as in trsm_small. Step k updates only rows
// below k, so a non-finite x_k never reaches a row solved before it.
//
// Why this many warps and thread blocks: a step's latency chain (multiply-subtract -> shuffle ->
// scale, about 60-70 cycles) is fixed, while its FP64 work grows with the columns a warp holds
// (8 DFMA-class instructions per column, 2 issue cycles each on an SM sub-partition's 16 FP64
// lanes). The paper's 2 compute warps x 16 columns in one thread block are issue-bound at ~256
// cycles per step on 2 of the SM's 4 sub-partitions, and with a Smith division per step and
// column (two IEEE divisions each) the first seed took 165 us at 64 x 16 and 327 us at 64 x 64
// on the H200. At the defaults (TZ_CTA_COLS 8, 4 compute warps x 2 columns, one warp per
// sub-partition, 1/a_kk) a solve step is latency-bound, ~32 issue cycles under a ~65-cycle
// chain, and an update step (B_bot -= A21 X_top: the shuffles do not wait on the chain) ~16-20
// cycles; n = 64 runs as 8 thread blocks on 8 SMs at once, each ~2 global round trips of loads
// (phase 1) then 32 x 65 + 32 x 18 + 32 x 65 ~ 4,700 cycles of solve (A21, A22 and the bottom
// block load under the top solve).
//
// Launch geometry: the driver calls kernevo_launch_config(m, n, cfg) once per shape; it writes
// grid xyz, block xyz and dynamic shared-memory bytes to cfg[0..6]. Grid: one thread block per
// TZ_CTA_COLS columns of B. Block: 32 * (TZ_LOAD_WARPS + TZ_COMPUTE_WARPS) threads. Shared
// memory: A11, A21, A22 (16 KB each) and one 32 x TZ_BW B region: 52-64 KB, past the 48 KB
// default, so the driver opts the kernel in.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values; every combination is
// legal):
//   TZ_COMPUTE_WARPS  warps of the compute group; each holds TZ_COLS = TZ_BW / TZ_COMPUTE_WARPS
//                     columns (at least 1; warps past the block's TZ_BW columns idle). At most
//                     16: with 4 loader warps a block stays within 1,024 threads.
//   TZ_CTA_COLS       columns of B per thread block (64: two 32-column blocks stream through one
//                     thread block, the paper's design; fewer: more thread blocks)
//   TZ_LOAD_WARPS     warps of the loading group
//   TZ_LOAD_BATCH     loads each loader issues before storing them (loads in flight per thread)
//   TZ_UNROLL         unroll factor of the substitution and update loops
//   TZ_INV_DIAG       1: multiply by 1/a_kk (Smith's reciprocal, once per diagonal entry, by the
//                     loading group); 0: Smith's division at each step and column

// ---- fixed prelude: scalar type and arithmetic (header-free: NVRTC ships no CUDA headers) ----
#ifndef KERNEVO_DTYPE
#error "compile with -DKERNEVO_DTYPE=3 (complex128)"
#endif
#if KERNEVO_DTYPE != 3
#error "trsm_small_z64 is a complex128 path: compile with -DKERNEVO_DTYPE=3"
#endif
typedef double real_t;
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
// form divides by |a|^2, which overflows for |a| above sqrt(max) (1.3e154 in float64) and
// underflows below sqrt(min normal): X = NaN or 0 where X is O(1). Here no intermediate leaves
// the range of a, b and b / a, and a power-of-two scaling of a and b scales every intermediate
// exactly.
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
#define KV_STR(x) #x
#define KV_UNROLL(n) _Pragma(KV_STR(unroll n))
#define KV_WARP 32
#define KV_MAX_M 64

// EVOLVE-BLOCK-START
#define TZ_COMPUTE_WARPS 8  // tune: 2 4 8 16
#define TZ_CTA_COLS 8       // tune: 8 16 32 64
#define TZ_LOAD_WARPS 4     // tune: 1 2 4
#define TZ_LOAD_BATCH 8     // tune: 4 8 16
#define TZ_UNROLL 2         // tune: 1 2 4 8
#define TZ_INV_DIAG 1       // tune: 0 1

#define TZ_HALF 32                   // rows of a diagonal block and of a B block
#define TZ_TILE (TZ_HALF * TZ_HALF)  // scalars in one 16 KB region of A
// Columns of a B block: a thread block's columns, at most 32 (the paper's 32 x 32 B region).
#define TZ_BW (TZ_CTA_COLS < TZ_HALF ? TZ_CTA_COLS : TZ_HALF)
#define TZ_B_TILE (TZ_HALF * TZ_BW)            // scalars in the B region
#define TZ_CB_PER_CTA (TZ_CTA_COLS / TZ_BW)    // column blocks per thread block: 1 or 2
#define TZ_COLS (TZ_BW > TZ_COMPUTE_WARPS ? TZ_BW / TZ_COMPUTE_WARPS : 1)  // per compute warp
#define TZ_THREADS (KV_WARP * (TZ_LOAD_WARPS + TZ_COMPUTE_WARPS))

extern "C" __global__ void kernevo_launch_config(int m, int n, int* cfg) {
  // m outside 1..64 gets an empty grid, which the driver refuses before launching.
  cfg[0] = (m >= 1 && m <= KV_MAX_M) ? (n + TZ_CTA_COLS - 1) / TZ_CTA_COLS : 0;
  cfg[1] = 1;
  cfg[2] = 1;
  cfg[3] = TZ_THREADS;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = (3 * TZ_TILE + TZ_B_TILE) * (int)sizeof(scalar_t);  // A11, A21, A22, B
}

// A hand-over between the groups: every thread of the block arrives, so whatever one group
// wrote to shared memory before it is visible to the other after it. Ids 1-4 name the phases
// (0 is __syncthreads').
__device__ __forceinline__ void tz_barrier(int id) {
  asm volatile("bar.sync %0, %1;" : : "r"(id), "r"(TZ_THREADS) : "memory");
}

// Loading group: rows [r0, r0 + rows) x columns [c0, c0 + cols) of a column-major matrix into a
// region of 32 rows x WIDTH columns (column-major, leading dimension 32), zero outside, so
// padding rows and columns need no test when read. Loader warp lw moves columns lw,
// lw + TZ_LOAD_WARPS, ... of the region, lane l row l (one coalesced 512-byte column per warp
// and load). TRIANGLE: a diagonal block of A; its strict upper triangle is neither loaded nor
// stored, and with TZ_INV_DIAG the diagonal slot holds 1/a_kk (Smith's reciprocal). Each loader
// issues up to TZ_LOAD_BATCH loads before it stores them, so that many are in flight per thread.
template <int WIDTH, bool TRIANGLE>
__device__ __forceinline__ void tz_load(scalar_t* dst, const scalar_t* __restrict__ src, long ld,
                                        int r0, int c0, int rows, int cols, int lane, int lw) {
  constexpr int kPerWarp = (WIDTH + TZ_LOAD_WARPS - 1) / TZ_LOAD_WARPS;  // columns per warp
  constexpr int kBatch = TZ_LOAD_BATCH < kPerWarp ? TZ_LOAD_BATCH : kPerWarp;
  const scalar_t* from = src + c0 * ld + r0 + lane;
  scalar_t diag = kv_zero();  // a_kk at k = lane, loaded by warp lane % TZ_LOAD_WARPS
#pragma unroll 1
  for (int j0 = 0; j0 < kPerWarp; j0 += kBatch) {
    scalar_t v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = lw + (j0 + j) * TZ_LOAD_WARPS;
      const bool read = c < WIDTH && c < cols && lane < rows && (!TRIANGLE || c <= lane);
      v[j] = read ? from[c * ld] : kv_zero();
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = lw + (j0 + j) * TZ_LOAD_WARPS;
      if (c < WIDTH && (!TRIANGLE || c <= lane)) {
        if (TRIANGLE && TZ_INV_DIAG && c == lane) diag = v[j];  // stored below as 1/a_kk
        else dst[c * TZ_HALF + lane] = v[j];
      }
    }
  }
  // One reciprocal per diagonal entry, outside the batches: its division's slow path is a call,
  // and registers live across a call would spill.
  if (TRIANGLE && TZ_INV_DIAG && lane % TZ_LOAD_WARPS == lw)
    dst[lane * (TZ_HALF + 1)] = lane < rows ? kv_recip(diag) : kv_zero();
}

// Compute warp: forward substitution of the `rows` x `rows` lower triangle in region sL on the
// TZ_COLS columns of v (lane l holds row l). Step k updates only rows below k: a solved row is
// final, and 0 * x_k would turn it into NaN wherever x_k is not finite (a non-finite entry of A
// must not reach rows that do not depend on it).
__device__ __forceinline__ void tz_solve(scalar_t (&v)[TZ_COLS], const scalar_t* sL, int rows,
                                         int lane) {
  KV_UNROLL(TZ_UNROLL)
  for (int k = 0; k < rows; ++k) {
    const scalar_t d = sL[k * TZ_HALF + k];
    const bool below = lane > k && lane < rows;
    const scalar_t a = below ? sL[k * TZ_HALF + lane] : kv_zero();
#pragma unroll
    for (int c = 0; c < TZ_COLS; ++c) {
      scalar_t x = kv_shfl(v[c], k);
#if TZ_INV_DIAG
      x = kv_mul(x, d);
#else
      x = kv_div(x, d);
#endif
      if (lane == k) v[c] = x;
      if (below) v[c] = kv_fms(v[c], a, x);
    }
  }
}

extern "C" __global__ void __launch_bounds__(TZ_THREADS)
trsm_small_z64_kernel(const scalar_t* __restrict__ A, scalar_t* __restrict__ B, int m, int n,
                      int lda, int ldb) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  scalar_t* sA11 = reinterpret_cast<scalar_t*>(kv_smem);
  scalar_t* sA21 = sA11 + TZ_TILE;  // full 32 x 32 block: every entry is below the diagonal
  scalar_t* sA22 = sA21 + TZ_TILE;
  scalar_t* sB = sA22 + TZ_TILE;    // the B block in flight, 32 x TZ_BW

  const int lane = threadIdx.x & (KV_WARP - 1);
  const int warp = threadIdx.x / KV_WARP;
  const bool loader = warp < TZ_LOAD_WARPS;
  const int wc = (warp - TZ_LOAD_WARPS) * TZ_COLS;       // first column of this compute warp
  const bool computes = !loader && wc < TZ_BW;           // uniform in the warp
  const int mt = m < TZ_HALF ? m : TZ_HALF;              // rows of the top half
  const int mb = m - TZ_HALF;                            // rows of the bottom half (<= 0: none)
  const int cta_col0 = blockIdx.x * TZ_CTA_COLS;
  const int left = (n - cta_col0 + TZ_BW - 1) / TZ_BW;
  const int nblocks = left < TZ_CB_PER_CTA ? left : TZ_CB_PER_CTA;  // uniform in the block

  scalar_t x[TZ_COLS];  // top rows (lane) of this warp's columns: B_top, then X_top
  scalar_t b[TZ_COLS];  // bottom rows (32 + lane): B_bot, then X_bot

  // Phase 1: A11 and the first top block.
  if (loader) {
    tz_load<TZ_HALF, true>(sA11, A, lda, 0, 0, mt, mt, lane, warp);
    tz_load<TZ_BW, false>(sB, B, ldb, 0, cta_col0, mt, n - cta_col0, lane, warp);
  }
  tz_barrier(1);

  for (int cb = 0; cb < nblocks; ++cb) {
    const int col0 = cta_col0 + cb * TZ_BW;

    // Phase 2: the top block into registers.
    if (computes) {
#pragma unroll
      for (int c = 0; c < TZ_COLS; ++c) x[c] = sB[(wc + c) * TZ_HALF + lane];
    }
    tz_barrier(2);

    // Phase 3: X_top = A11^-1 B_top, written back, while the bottom block (and A21, A22)
    // stream in.
    if (computes) {
      tz_solve(x, sA11, mt, lane);
#pragma unroll
      for (int c = 0; c < TZ_COLS; ++c) {
        const int col = col0 + wc + c;
        if (lane < mt && col < n) B[(long)col * ldb + lane] = x[c];
      }
    } else if (loader && mb > 0) {
      tz_load<TZ_BW, false>(sB, B, ldb, TZ_HALF, col0, mb, n - col0, lane, warp);
      if (cb == 0) {
        tz_load<TZ_HALF, false>(sA21, A, lda, TZ_HALF, 0, mb, TZ_HALF, lane, warp);
        tz_load<TZ_HALF, true>(sA22, A, lda, TZ_HALF, TZ_HALF, mb, mb, lane, warp);
      }
    }
    tz_barrier(3);

    if (mb > 0) {
      // Phase 4: the bottom block into registers.
      if (computes) {
#pragma unroll
        for (int c = 0; c < TZ_COLS; ++c) b[c] = sB[(wc + c) * TZ_HALF + lane];
      }
      tz_barrier(4);
    }

    // Phase 5: B_bot -= A21 X_top, X_bot = A22^-1 B_bot, written back, while the next column
    // block's top streams in.
    if (computes) {
      if (mb > 0) {
        KV_UNROLL(TZ_UNROLL)
        for (int k = 0; k < TZ_HALF; ++k) {
          const scalar_t a = sA21[k * TZ_HALF + lane];  // zero in padding rows
#pragma unroll
          for (int c = 0; c < TZ_COLS; ++c) b[c] = kv_fms(b[c], a, kv_shfl(x[c], k));
        }
        tz_solve(b, sA22, mb, lane);
#pragma unroll
        for (int c = 0; c < TZ_COLS; ++c) {
          const int col = col0 + wc + c;
          if (lane < mb && col < n) B[(long)col * ldb + TZ_HALF + lane] = b[c];
        }
      }
    } else if (loader && cb + 1 < nblocks) {
      tz_load<TZ_BW, false>(sB, B, ldb, 0, col0 + TZ_BW, mt, n - col0 - TZ_BW, lane, warp);
    }
    if (cb + 1 < nblocks) tz_barrier(1);
  }
}
// EVOLVE-BLOCK-END
