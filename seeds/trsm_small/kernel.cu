// trsm_small: triangular solve for small matrices, one kernel launch, everything on chip.
//
// Operation (BLAS ?trsm, side=L, uplo=L, trans=N, diag=N, alpha=1): solve A*X = B for X.
//   A: m x m lower triangular, column-major, leading dimension lda (= m); the strict upper
//      triangle is never read (it may hold anything, NaN included).
//   B: m x n, column-major, leading dimension ldb (= m); X overwrites B in place.
//   1 <= m, n <= 64; scalar type chosen at compile time by -DKERNEVO_DTYPE
//   (0 float32, 1 float64, 2 complex64, 3 complex128).
//
// Algorithm: the shared-memory direct solve of the HSMA-TRSM paper's small-scale regime
// (section "small-scale regime, m, n <= 64"): the whole triangle of A is staged in shared memory
// once per block, the right-hand sides stay on chip, and forward substitution runs without
// touching device memory. Here each warp owns TRSM_COLS_PER_WARP columns of B; lane l holds rows
// l and l + 32 of each column in registers, so a substitution step is one warp shuffle (broadcast
// of the solved x_k) plus one fused multiply-subtract per held row: no block-wide barrier inside
// the solve loop.
//
// Launch geometry (the one mechanism kernevo uses): the driver calls kernevo_launch_config(m, n,
// cfg) once per shape; it writes grid xyz, block xyz and dynamic shared-memory bytes to cfg[0..6].
// Dynamic shared memory holds the triangle of A (m * m scalars) and 1/diag(A) (m scalars):
// 65 KB for complex128 at m = 64, past the 48 KB static limit, so the driver opts the kernel in.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   TRSM_WARPS          warps per block (block = 32 x TRSM_WARPS threads)
//   TRSM_COLS_PER_WARP  right-hand-side columns each warp solves together (independent chains
//                       interleave, hiding shuffle latency)
//   TRSM_UNROLL         unroll factor of the substitution loop
//   TRSM_INV_DIAG       1: multiply by a precomputed 1/a_kk; 0: divide at each step

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
#define KV_MAX_M 64
#define KV_ROWS_PER_LANE (KV_MAX_M / KV_WARP)

// EVOLVE-BLOCK-START
#define TRSM_WARPS 4          // tune: 1 2 4 8 16
#define TRSM_COLS_PER_WARP 1  // tune: 1 2 4 8
#define TRSM_UNROLL 1         // tune: 1 2 4 8
#define TRSM_INV_DIAG 0       // tune: 0 1

extern "C" __global__ void kernevo_launch_config(int m, int n, int* cfg) {
  const int cols_per_block = TRSM_WARPS * TRSM_COLS_PER_WARP;
  cfg[0] = (n + cols_per_block - 1) / cols_per_block;
  cfg[1] = 1;
  cfg[2] = 1;
  cfg[3] = KV_WARP;
  cfg[4] = TRSM_WARPS;
  cfg[5] = 1;
  cfg[6] = (m * m + m) * (int)sizeof(scalar_t);
}

extern "C" __global__ void __launch_bounds__(KV_WARP * TRSM_WARPS)
trsm_small_kernel(const scalar_t* __restrict__ A, scalar_t* __restrict__ B, int m, int n, int lda,
                  int ldb) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  scalar_t* sA = reinterpret_cast<scalar_t*>(kv_smem);  // column-major, leading dimension m
  scalar_t* sDiag = sA + m * m;                          // 1/a_kk or a_kk

  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int tid = warp * KV_WARP + lane;

  // Stage the lower triangle of A; the strict upper triangle is never read from device memory.
  for (int idx = tid; idx < m * m; idx += KV_WARP * TRSM_WARPS) {
    const int r = idx % m;
    const int c = idx / m;
    if (r >= c) sA[c * m + r] = A[(long)c * lda + r];
  }
  for (int k = tid; k < m; k += KV_WARP * TRSM_WARPS) {
    const scalar_t d = A[(long)k * lda + k];
#if TRSM_INV_DIAG
    sDiag[k] = kv_recip(d);
#else
    sDiag[k] = d;
#endif
  }

  // Right-hand sides in registers: b[c][s] is row lane + 32 * s of this warp's column c.
  const int col0 = (blockIdx.x * TRSM_WARPS + warp) * TRSM_COLS_PER_WARP;
  scalar_t b[TRSM_COLS_PER_WARP][KV_ROWS_PER_LANE];
#pragma unroll
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
      const int row = lane + KV_WARP * s;
      const int col = col0 + c;
      b[c][s] = (row < m && col < n) ? B[(long)col * ldb + row] : kv_zero();
    }
  }
  __syncthreads();
  if (col0 >= n) return;

  KV_UNROLL(TRSM_UNROLL)
  for (int k = 0; k < m; ++k) {
    const int owner = k & (KV_WARP - 1);
    const bool high = k >= KV_WARP;
    const scalar_t d = sDiag[k];
    scalar_t a_k[KV_ROWS_PER_LANE];
#pragma unroll
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
      const int row = lane + KV_WARP * s;
      a_k[s] = (row > k && row < m) ? sA[k * m + row] : kv_zero();
    }
#pragma unroll
    for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
      scalar_t x = kv_shfl(high ? b[c][1] : b[c][0], owner);
#if TRSM_INV_DIAG
      x = kv_mul(x, d);
#else
      x = kv_div(x, d);
#endif
      if (lane == owner) {
        if (high) b[c][1] = x; else b[c][0] = x;
      }
      // Only rows below k: a solved row is final, and 0 * x would turn it into NaN wherever x is
      // not finite (a non-finite entry of A must not reach rows that do not depend on it).
#pragma unroll
      for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
        if (lane + KV_WARP * s > k) b[c][s] = kv_fms(b[c][s], a_k[s], x);
      }
    }
  }

#pragma unroll
  for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
    for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
      const int row = lane + KV_WARP * s;
      const int col = col0 + c;
      if (row < m && col < n) B[(long)col * ldb + row] = b[c][s];
    }
  }
}
// EVOLVE-BLOCK-END
