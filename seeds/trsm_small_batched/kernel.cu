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
// Algorithm: the shared-memory direct solve of the HSMA-TRSM paper's small-scale regime
// (section "small-scale regime, m, n <= 64"), as trsm_small runs it, with the batch index as the
// grid's x dimension: a block stages the lower triangle of A_i in shared memory (transposed to
// column order, so a warp reads a column of A without bank conflicts) and its slice of B_i's
// columns (read row by row, so global loads are coalesced on row-major B), then each warp solves
// TRSM_COLS_PER_WARP columns in registers: lane l holds rows l and l + 32, a substitution step
// is one warp shuffle (broadcast of the solved x_k) plus one fused multiply-subtract per held
// row, no block-wide barrier inside the solve loop. X goes back through shared memory, written
// row by row. A block solves TRSM_BATCH_TILE consecutive matrices one after the other.
//
// Launch geometry (the one mechanism kernevo uses): the driver calls
// kernevo_launch_config(m, n, batch, cfg) once per shape; it writes grid xyz, block xyz and
// dynamic shared-memory bytes to cfg[0..6]. Grid: x = ceil(batch / TRSM_BATCH_TILE) (up to
// 2^31 - 1), y = ceil(n / (TRSM_WARPS * TRSM_COLS_PER_WARP)). Dynamic shared memory holds A's
// triangle (m * m scalars), the diagonal (m) and B's column slice ((m + 1) * columns per block,
// padded by one row against bank conflicts on the transposed stores): 70 KB for complex128 at
// m = 64 and 4 columns per block, past the 48 KB static limit, so the driver opts the kernel in.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   TRSM_WARPS          warps per block (block = 32 x TRSM_WARPS threads)
//   TRSM_COLS_PER_WARP  right-hand-side columns each warp solves together (independent chains
//                       interleave, hiding shuffle latency)
//   TRSM_UNROLL         unroll factor of the substitution loop
//   TRSM_INV_DIAG       1: multiply by a precomputed 1/a_kk; 0: divide at each step
//   TRSM_BATCH_TILE     matrices one block solves in turn (fewer, longer blocks for tiny m)

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
#define TRSM_BATCH_TILE 1     // tune: 1 2 4 8

#define TRSM_COLS_PER_BLOCK (TRSM_WARPS * TRSM_COLS_PER_WARP)

extern "C" __global__ void kernevo_launch_config(int m, int n, int batch, int* cfg) {
  cfg[0] = (batch + TRSM_BATCH_TILE - 1) / TRSM_BATCH_TILE;
  cfg[1] = (n + TRSM_COLS_PER_BLOCK - 1) / TRSM_COLS_PER_BLOCK;
  cfg[2] = 1;
  cfg[3] = KV_WARP;
  cfg[4] = TRSM_WARPS;
  cfg[5] = 1;
  cfg[6] = (m * m + m + (m + 1) * TRSM_COLS_PER_BLOCK) * (int)sizeof(scalar_t);
}

extern "C" __global__ void __launch_bounds__(KV_WARP * TRSM_WARPS)
trsm_small_batched_kernel(const scalar_t* __restrict__ A, scalar_t* __restrict__ B, int m, int n,
                          int batch) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  scalar_t* sA = reinterpret_cast<scalar_t*>(kv_smem);  // column-major, leading dimension m
  scalar_t* sDiag = sA + m * m;                          // 1/a_kk or a_kk
  scalar_t* sB = sDiag + m;                              // column-major, leading dimension m + 1
  const int ldsb = m + 1;

  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int tid = warp * KV_WARP + lane;
  const int threads = KV_WARP * TRSM_WARPS;
  const int block_col0 = blockIdx.y * TRSM_COLS_PER_BLOCK;
  const int warp_col0 = warp * TRSM_COLS_PER_WARP;  // within the block's slice
  const bool active = block_col0 + warp_col0 < n;

  for (int t = 0; t < TRSM_BATCH_TILE; ++t) {
    const long long i = (long long)blockIdx.x * TRSM_BATCH_TILE + t;
    if (i >= batch) break;  // the same for every thread of the block: no barrier is skipped
    const scalar_t* Ai = A + i * m * m;
    scalar_t* Bi = B + i * m * n;
    if (t > 0) __syncthreads();  // every warp is done with the previous matrix's shared data

    // Stage the lower triangle of A_i, read row by row (coalesced); the strict upper triangle is
    // never read from device memory.
    for (int idx = tid; idx < m * m; idx += threads) {
      const int r = idx / m;
      const int c = idx - r * m;
      if (c <= r) sA[c * m + r] = Ai[idx];
    }
    for (int k = tid; k < m; k += threads) {
      const scalar_t d = Ai[k * m + k];
#if TRSM_INV_DIAG
      sDiag[k] = kv_recip(d);
#else
      sDiag[k] = d;
#endif
    }
    // Stage the block's columns of B_i, read row by row.
    for (int idx = tid; idx < m * TRSM_COLS_PER_BLOCK; idx += threads) {
      const int r = idx / TRSM_COLS_PER_BLOCK;
      const int c = idx - r * TRSM_COLS_PER_BLOCK;
      if (block_col0 + c < n) sB[c * ldsb + r] = Bi[(long long)r * n + block_col0 + c];
    }
    __syncthreads();

    if (active) {
      // Right-hand sides in registers: b[c][s] is row lane + 32 * s of this warp's column c.
      scalar_t b[TRSM_COLS_PER_WARP][KV_ROWS_PER_LANE];
#pragma unroll
      for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
        for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
          const int row = lane + KV_WARP * s;
          const bool held = row < m && block_col0 + warp_col0 + c < n;
          b[c][s] = held ? sB[(warp_col0 + c) * ldsb + row] : kv_zero();
        }
      }

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
          // Only rows below k: a solved row is final, and 0 * x would turn it into NaN wherever
          // x is not finite.
#pragma unroll
          for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
            if (lane + KV_WARP * s > k) b[c][s] = kv_fms(b[c][s], a_k[s], x);
          }
        }
      }

      // Back to the warp's own columns of the staging tile.
#pragma unroll
      for (int c = 0; c < TRSM_COLS_PER_WARP; ++c) {
#pragma unroll
        for (int s = 0; s < KV_ROWS_PER_LANE; ++s) {
          const int row = lane + KV_WARP * s;
          if (row < m && block_col0 + warp_col0 + c < n) sB[(warp_col0 + c) * ldsb + row] = b[c][s];
        }
      }
    }
    __syncthreads();

    // X_i over B_i, row by row.
    for (int idx = tid; idx < m * TRSM_COLS_PER_BLOCK; idx += threads) {
      const int r = idx / TRSM_COLS_PER_BLOCK;
      const int c = idx - r * TRSM_COLS_PER_BLOCK;
      if (block_col0 + c < n) Bi[(long long)r * n + block_col0 + c] = sB[c * ldsb + r];
    }
  }
}
// EVOLVE-BLOCK-END
