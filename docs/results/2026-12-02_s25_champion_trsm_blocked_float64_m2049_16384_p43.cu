// trsm_blocked: triangular solve for large matrices by the HSMA-TRSM paper's blocked algorithm
// with decoupled diagonal-block inversion.
//
// Operation (BLAS ?trsm, side=L, uplo=L, trans=N, diag=N, alpha=1): solve A*X = B for X.
//   A: m x m lower triangular, column-major, leading dimension lda; the strict upper triangle is
//      never read (it may hold anything, NaN included).
//   B: m x n, column-major, leading dimension ldb; X overwrites B in place.
//   128 <= m <= 16384, 1 <= n <= 16384 (the evaluator also runs fixed cases below m = 128:
//   m <= NB is solved directly, below); scalar type by -DKERNEVO_DTYPE (0 float32, 1 float64,
//   2 complex64, 3 complex128).
//
// Algorithm (paper, "diagonal block inversion"; the driver, driver.py, runs the host side):
//   1. The diagonal NB x NB blocks D_t of A (the last one m - t*NB rows when NB does not divide
//      m) are inverted in parallel by forward substitution on identity columns: thread block
//      (t, j) computes WARPS * COLS consecutive columns of inv(D_t), each warp COLS of them.
//   2. The driver forms X from the inverses with cuBLAS GEMMs (schedule.py: recursive halving).
//   When m <= NB there is one diagonal block and no GEMM: the same kernel solves B directly,
//   its right-hand sides B's columns instead of identity columns (solve != 0).
//
// Why warps own columns: a substitution step is a chain (x_k, then the rows below k), and the
// step count is the block's height, so each step must be short. Lane l of a warp holds rows
// l, l + 32, ... of its COLS columns in registers; step k is one warp shuffle of row k (x_k
// broadcast), a division, and one multiply-subtract per row below k: no block-wide barrier,
// no shared-memory round trip for x. The loop over a lane's register slots is unrolled, so
// the register holding row k is known at compile time (an indexed register array would live
// in local memory) and slots above row k, already final, are not even visited; the steps
// inside a slot are a run-time loop (unrolling all NB steps took NVRTC past 30 s).
//   The block's column k is read by every warp: PANEL columns of D at a time are staged in
// shared memory by the whole thread block between two barriers (one global-memory latency
// per PANEL steps instead of one per step: the previous seed read column k from global
// memory at every step, behind a barrier, and spent 525 us inverting 256-blocks on the H200).
// Only the lower triangle is loaded; the rest of the panel is zero.
//
// Numerics: step k updates only rows below k, and only in columns that have started (an
// identity column starts at its 1), so a non-finite entry of A never reaches rows that do not
// depend on it; complex division is Smith's (below). Inverses are written with zeros outside
// the block's mb x mb (the driver's GEMMs read whole NB x NB slots of full blocks).
//
// Launch geometry: kernevo_launch_config(m, n, cfg) writes grid xyz, block xyz and dynamic
// shared bytes of trsm_blocked_diag_kernel for problem (m, n) into cfg[0..6] (the inversion
// grid when m > NB, the direct-solve grid otherwise; the panel's bytes, up to 128 KB for
// complex128 at NB = 256, past the 48 KB default, which the driver opts into);
// kernevo_block_size(cfg) writes NB to cfg[0], from which the driver forms the block rows and
// GEMMs.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   TB_NB      outer block size NB (rows of a diagonal block; the GEMMs' granularity)
//   TB_WARPS   warps per thread block (they share one staged panel)
//   TB_COLS    right-hand-side columns per warp (independent chains a warp interleaves;
//              registers per thread grow as NB / 32 * COLS scalars)
//   TB_PANEL   columns of D staged in shared memory per barrier pair
//   TB_UNROLL  unroll factor of the step loop inside a panel

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
#define KV_STR(x) #x
#define KV_UNROLL(n) _Pragma(KV_STR(unroll n))
#define KV_WARP 32

// EVOLVE-BLOCK-START
#define TB_NB 256     // tune: 128 256
#define TB_WARPS 8    // tune: 2 4 8 16
#define TB_COLS 1     // tune: 1 2 4
#define TB_PANEL 8   // tune: 8 16 32
#define TB_UNROLL 4   // tune: 1 2 4

#define TB_THREADS (TB_WARPS * KV_WARP)
#define TB_ROWS (TB_NB / KV_WARP)  // rows of the block each lane holds, per column
#define TB_CTA_COLS (TB_WARPS * TB_COLS)
static_assert(TB_NB % KV_WARP == 0 && KV_WARP % TB_PANEL == 0, "NB must tile by 32, 32 by PANEL");

extern "C" __global__ void kernevo_block_size(int* cfg) { cfg[0] = TB_NB; }

extern "C" __global__ void kernevo_launch_config(int m, int n, int* cfg) {
  if (m > TB_NB) {
    cfg[0] = (m + TB_NB - 1) / TB_NB;                   // one row of thread blocks per D_t
    cfg[1] = (TB_NB + TB_CTA_COLS - 1) / TB_CTA_COLS;  // the NB identity columns
  } else {
    cfg[0] = 1;  // direct solve: the columns of B
    cfg[1] = (n + TB_CTA_COLS - 1) / TB_CTA_COLS;
  }
  cfg[2] = 1;
  cfg[3] = TB_THREADS;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = TB_PANEL * TB_NB * (int)sizeof(scalar_t);
}

// solve == 0: Y is the inverse workspace (NB x NB per diagonal block, leading dimension NB);
// thread block (t, j) writes its columns of inv(D_t), zeros outside the block's mb x mb.
// solve != 0: m <= NB, Y is B (leading dimension ldy, ncols columns), solved in place.
extern "C" __global__ void __launch_bounds__(TB_THREADS)
trsm_blocked_diag_kernel(const scalar_t* __restrict__ A, int lda, int m, scalar_t* __restrict__ Y,
                         int ldy, int ncols, int solve) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  scalar_t* panel = reinterpret_cast<scalar_t*>(kv_smem);  // PANEL columns of D, ld NB
  const int lane = threadIdx.x % KV_WARP;
  const int warp = threadIdx.x / KV_WARP;
  const int t = blockIdx.x;
  const long r0 = (long)t * TB_NB;  // first row (and column) of D_t in A
  const int mb = solve ? m : min(TB_NB, m - (int)r0);
  const scalar_t* D = A + r0 * lda + r0;
  const int col0 = (blockIdx.y * TB_WARPS + warp) * TB_COLS;  // this warp's first column
  // Identity column j is zero above row j: no step before this thread block's first column
  // changes any of its columns (uniform in the block, so its barriers stay uniform).
  const int k_begin = solve ? 0 : blockIdx.y * TB_CTA_COLS;

  scalar_t y[TB_ROWS][TB_COLS];
  bool live[TB_COLS];  // column exists (B's, or inside the block)
  int first[TB_COLS];  // the step at which the column starts
#pragma unroll
  for (int c = 0; c < TB_COLS; ++c) {
    const int col = col0 + c;
    live[c] = solve ? col < ncols : col < mb;
    first[c] = solve ? 0 : col;
#pragma unroll
    for (int s = 0; s < TB_ROWS; ++s) {
      const int row = lane + KV_WARP * s;
      scalar_t v = kv_zero();
      if (live[c] && row < mb) {
        if (solve) {
          v = Y[(long)col * ldy + row];
        } else if (row == col) {
#if KV_COMPLEX
          v = {real_t(1), real_t(0)};
#else
          v = real_t(1);
#endif
        }
      }
      y[s][c] = v;
    }
  }

  // Row k = 32 * sk + l lives in register slot sk of lane l: the slot loop is unrolled (slot
  // indices are constants) and the lane loop is not (a shuffle takes a run-time lane), so the
  // code holds ROWS * (ROWS + 1) / 2 update bodies, not one per step.
#pragma unroll
  for (int sk = 0; sk < TB_ROWS; ++sk) {
    if (KV_WARP * sk >= mb) break;
    for (int q = KV_WARP * sk; q < KV_WARP * (sk + 1); q += TB_PANEL) {
      if (q >= mb) break;
      if (q + TB_PANEL <= k_begin) continue;
      __syncthreads();  // every warp is done with the previous panel
      for (int idx = threadIdx.x; idx < TB_PANEL * TB_NB; idx += TB_THREADS) {
        const int k = q + idx / TB_NB;
        const int row = idx % TB_NB;
        panel[idx] = (k < mb && row >= k && row < mb) ? D[(long)k * lda + row] : kv_zero();
      }
      __syncthreads();
      const int k_end = min(q + TB_PANEL, mb);
      KV_UNROLL(TB_UNROLL)
      for (int k = q; k < k_end; ++k) {
        const int l = k - KV_WARP * sk;  // the lane holding row k
        const scalar_t* dk = panel + (k - q) * TB_NB;
        const scalar_t d = dk[k];
        scalar_t x[TB_COLS];
        bool go[TB_COLS];
#pragma unroll
        for (int c = 0; c < TB_COLS; ++c) {
          // Uniform in the warp: every lane takes part in the shuffle.
          go[c] = live[c] && k >= first[c];
          x[c] = go[c] ? kv_div(kv_shfl(y[sk][c], l), d) : kv_zero();
          if (go[c] && lane == l) y[sk][c] = x[c];
        }
        // Rows below k only: a solved row is final, and 0 * x (or a * 0 with a non-finite a)
        // would turn rows that do not depend on it into NaN.
#pragma unroll
        for (int s = sk; s < TB_ROWS; ++s) {
          const int row = lane + KV_WARP * s;
          if (row > k && row < mb) {
            const scalar_t a = dk[row];
#pragma unroll
            for (int c = 0; c < TB_COLS; ++c)
              if (go[c]) y[s][c] = kv_fms(y[s][c], a, x[c]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int c = 0; c < TB_COLS; ++c) {
    const int col = col0 + c;
    if (solve) {
      if (!live[c]) continue;
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        const int row = lane + KV_WARP * s;
        if (row < mb) Y[(long)col * ldy + row] = y[s][c];
      }
    } else if (col < TB_NB) {
      scalar_t* out = Y + (long)t * TB_NB * TB_NB + (long)col * TB_NB;
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        const int row = lane + KV_WARP * s;
        out[row] = (live[c] && row < mb) ? y[s][c] : kv_zero();
      }
    }
  }
}
// EVOLVE-BLOCK-END
