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
//      m) are inverted in parallel: thread block (t, j) computes columns j*IB .. j*IB+IB-1 of
//      inv(D_t) by column-wise forward substitution on the identity columns E_j, IB = NB / 8.
//   2. Block row by block row, X_i = inv(D_i) * (B_i - A_i,0:i * X_0:i), both products cuBLAS
//      GEMMs (the driver).
//   When m <= NB there is one diagonal block and no GEMM: the same kernel solves B directly,
//   its right-hand sides B's columns instead of identity columns (solve != 0).
//
// Shared memory is O(IB): two buffers of IB scalars. Step k of the substitution needs, in every
// thread, the solved x_k of each of the block's IB right-hand sides; its owner writes it to
// buffer k & 1 and one barrier publishes it. Because consecutive steps alternate buffers, the
// owner of step k+1 may write while slower threads still read step k's buffer, so one barrier
// per step suffices (single-buffered, a second barrier would be needed before each write). The
// column k of D_t is read by each thread for its own rows straight from global memory
// (coalesced: a column is contiguous).
//
// Launch geometry: kernevo_launch_config(m, n, cfg) writes grid xyz, block xyz and dynamic
// shared bytes of trsm_blocked_diag_kernel for problem (m, n) into cfg[0..6] (the inversion
// grid when m > NB, the direct-solve grid otherwise); kernevo_block_size(cfg) writes NB to
// cfg[0], from which the driver forms the block rows and GEMMs.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   TB_NB        outer block size NB (rows of a diagonal block, of a GEMM block row)
//   TB_IB        inner block IB: right-hand sides per thread block (paper: NB / 8)
//   TB_THREADS   threads per block; each thread holds NB * IB / TB_THREADS entries of its
//                right-hand sides in registers
//   TB_UNROLL    unroll factor of the substitution's step loop
//   TB_PREFETCH  1: column k+1 of D is loaded into registers during step k (hides its latency
//                behind the barrier; not in the paper); 0: read at step k, as the paper does

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

// EVOLVE-BLOCK-START
#define TB_NB 256       // tune: 128 256 512
#define TB_IB 32        // tune: 16 32 64
#define TB_THREADS 256  // tune: 128 256 512 1024
#define TB_UNROLL 1     // tune: 1 2 4
#define TB_PREFETCH 0   // tune: 0 1

// Thread (c, g): right-hand side c = tid % IB, rows g, g + R, g + 2R, ... with R = THREADS / IB.
#define TB_GROUPS (TB_THREADS / TB_IB)
#define TB_ROWS (TB_NB / TB_GROUPS)
static_assert(TB_THREADS % TB_IB == 0 && TB_NB % TB_GROUPS == 0, "threads must tile NB x IB");

extern "C" __global__ void kernevo_block_size(int* cfg) { cfg[0] = TB_NB; }

extern "C" __global__ void kernevo_launch_config(int m, int n, int* cfg) {
  if (m > TB_NB) {
    cfg[0] = (m + TB_NB - 1) / TB_NB;  // one thread block per (diagonal block, IB columns)
    cfg[1] = TB_NB / TB_IB;
  } else {
    cfg[0] = 1;  // direct solve: one thread block per IB columns of B
    cfg[1] = (n + TB_IB - 1) / TB_IB;
  }
  cfg[2] = 1;
  cfg[3] = TB_THREADS;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = 0;
}

// solve == 0: Y is the inverse workspace (NB x NB per diagonal block, leading dimension NB);
// thread block (t, j) writes columns j*IB.. of inv(D_t), zeros outside the block's mb x mb.
// solve != 0: m <= NB, Y is B (leading dimension ldy, ncols columns), solved in place.
extern "C" __global__ void __launch_bounds__(TB_THREADS)
trsm_blocked_diag_kernel(const scalar_t* __restrict__ A, int lda, int m, scalar_t* __restrict__ Y,
                         int ldy, int ncols, int solve) {
  __shared__ scalar_t xbuf[2][TB_IB];
  const int tid = threadIdx.x;
  const int c = tid % TB_IB;
  const int g = tid / TB_IB;
  const int t = blockIdx.x;
  const int col = blockIdx.y * TB_IB + c;  // this thread's column of inv(D_t), or of B
  const long r0 = (long)t * TB_NB;         // first row (and column) of D_t in A
  const int mb = solve ? m : min(TB_NB, m - (int)r0);
  const scalar_t* D = A + r0 * lda + r0;
  const bool active = solve ? col < ncols : col < mb;
  // Rows above `col` of an identity right-hand side stay zero: substitution starts at its 1.
  const int first = solve ? 0 : col;
  const int k0 = solve ? 0 : blockIdx.y * TB_IB;

  scalar_t y[TB_ROWS];
#pragma unroll
  for (int s = 0; s < TB_ROWS; ++s) {
    const int row = g + TB_GROUPS * s;
    scalar_t v = kv_zero();
    if (active && row < mb) {
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
    y[s] = v;
  }

#if TB_PREFETCH
  // Column k of D for this thread's rows (row >= k), loaded one step ahead into registers: the
  // load's latency then overlaps the previous step's barrier and updates instead of stalling
  // each of the NB sequential steps (2 * NB / GROUPS registers per scalar; more spill-prone).
  scalar_t a_next[TB_ROWS];
#pragma unroll
  for (int s = 0; s < TB_ROWS; ++s) {
    const int row = g + TB_GROUPS * s;
    a_next[s] = (k0 < mb && row >= k0 && row < mb) ? D[(long)k0 * lda + row] : kv_zero();
  }
#endif

  KV_UNROLL(TB_UNROLL)
  for (int k = k0; k < mb; ++k) {
#if TB_PREFETCH
    scalar_t a_k[TB_ROWS];
#pragma unroll
    for (int s = 0; s < TB_ROWS; ++s) {
      const int row = g + TB_GROUPS * s;
      a_k[s] = a_next[s];
      a_next[s] = (k + 1 < mb && row > k && row < mb) ? D[(long)(k + 1) * lda + row] : kv_zero();
    }
#define TB_COLUMN_K(s, row) a_k[s]
#else
#define TB_COLUMN_K(s, row) D[(long)k * lda + (row)]
#endif
    if (g == k % TB_GROUPS) {
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        if (g + TB_GROUPS * s == k) {
          const scalar_t d = TB_COLUMN_K(s, k);
          const scalar_t x = (active && k >= first) ? kv_div(y[s], d) : kv_zero();
          y[s] = x;
          xbuf[k & 1][c] = x;
        }
      }
    }
    __syncthreads();
    // Only rows below k of a right-hand side that has started: a solved row is final, and
    // 0 * x (or a * 0 with a non-finite a) would turn rows that do not depend on it into NaN.
    if (active && k >= first) {
      const scalar_t x = xbuf[k & 1][c];
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        const int row = g + TB_GROUPS * s;
        if (row > k && row < mb) y[s] = kv_fms(y[s], TB_COLUMN_K(s, row), x);
      }
    }
#undef TB_COLUMN_K
  }

  if (solve) {
    if (!active) return;
#pragma unroll
    for (int s = 0; s < TB_ROWS; ++s) {
      const int row = g + TB_GROUPS * s;
      if (row < mb) Y[(long)col * ldy + row] = y[s];
    }
  } else {
    scalar_t* out = Y + (long)t * TB_NB * TB_NB + (long)col * TB_NB;
#pragma unroll
    for (int s = 0; s < TB_ROWS; ++s) {
      const int row = g + TB_GROUPS * s;
      out[row] = (active && row < mb) ? y[s] : kv_zero();
    }
  }
}
// EVOLVE-BLOCK-END
