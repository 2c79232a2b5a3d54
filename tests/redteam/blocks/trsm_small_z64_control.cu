// Red-team control: the EVOLVE-BLOCK of seeds/trsm_small_z64/kernel.cu as of commit 808cb18, frozen
// (tests/redteam/z64.py derives its faulty candidates from this text, so they stay
// one fault away from a known-good kernel when the seed itself is tuned).
#define TZ_CB_PER_CTA 2  // tune: 1 2
#define TZ_UNROLL 1      // tune: 1 2 4 8
#define TZ_INV_DIAG 0    // tune: 0 1

#define TZ_HALF 32                            // rows of a diagonal block, columns of a B block
#define TZ_TILE (TZ_HALF * TZ_HALF)           // scalars in one 16 KB region
#define TZ_LOAD_WARPS 2                       // warps 0-1 load
#define TZ_COMPUTE_WARPS 2                    // warps 2-3 compute
#define TZ_THREADS (KV_WARP * (TZ_LOAD_WARPS + TZ_COMPUTE_WARPS))
#define TZ_LOADERS (KV_WARP * TZ_LOAD_WARPS)
#define TZ_COLS (TZ_HALF / TZ_COMPUTE_WARPS)  // columns of a B block per compute warp

extern "C" __global__ void kernevo_launch_config(int m, int n, int* cfg) {
  const int cols_per_cta = TZ_HALF * TZ_CB_PER_CTA;
  // m outside 1..64 gets an empty grid, which the driver refuses before launching.
  cfg[0] = (m >= 1 && m <= KV_MAX_M) ? (n + cols_per_cta - 1) / cols_per_cta : 0;
  cfg[1] = 1;
  cfg[2] = 1;
  cfg[3] = TZ_THREADS;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = 4 * TZ_TILE * (int)sizeof(scalar_t);  // A11, A21, A22, B: 64 KB
}

// A hand-over between the groups: every thread of the block arrives, so whatever one group
// wrote to shared memory before it is visible to the other after it. Ids 1-4 name the phases
// (0 is __syncthreads').
__device__ __forceinline__ void tz_barrier(int id) {
  asm volatile("bar.sync %0, %1;" : : "r"(id), "r"(TZ_THREADS) : "memory");
}

// Loading group: the lower triangle of the diagonal block of A at (off, off), `rows` rows and
// columns of it, into a 32 x 32 region (column-major, leading dimension 32). The strict upper
// triangle of the region is neither loaded nor read. With TZ_INV_DIAG the diagonal slot holds
// 1/a_kk.
__device__ __forceinline__ void tz_load_triangle(scalar_t* dst, const scalar_t* __restrict__ A,
                                                 int off, int rows, int lda, int lt) {
  for (int idx = lt; idx < TZ_TILE; idx += TZ_LOADERS) {
    const int r = idx & (TZ_HALF - 1);
    const int c = idx / TZ_HALF;
    if (c <= r && r < rows) {
      const scalar_t v = A[(long)(off + c) * lda + off + r];
#if TZ_INV_DIAG
      dst[idx] = (r == c) ? kv_recip(v) : v;
#else
      dst[idx] = v;
#endif
    }
  }
}

// Loading group: rows [r0, r0 + rows) x columns [c0, c0 + cols) of a column-major matrix into a
// 32 x 32 region, zero outside (padding rows and columns then need no test when read).
__device__ __forceinline__ void tz_load_block(scalar_t* dst, const scalar_t* __restrict__ src,
                                              long ld, int r0, int c0, int rows, int cols,
                                              int lt) {
  for (int idx = lt; idx < TZ_TILE; idx += TZ_LOADERS) {
    const int r = idx & (TZ_HALF - 1);
    const int c = idx / TZ_HALF;
    dst[idx] = (r < rows && c < cols) ? src[(long)(c0 + c) * ld + r0 + r] : kv_zero();
  }
}

// Compute warp: forward substitution of the `rows` x `rows` lower triangle in region sL on the
// 16 columns of v (lane l holds row l). Step k updates only rows below k: a solved row is final,
// and 0 * x_k would turn it into NaN wherever x_k is not finite (a non-finite entry of A must not
// reach rows that do not depend on it).
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
  scalar_t* sB = sA22 + TZ_TILE;    // the B block in flight

  const int lane = threadIdx.x & (KV_WARP - 1);
  const int warp = threadIdx.x / KV_WARP;
  const bool loader = warp < TZ_LOAD_WARPS;
  const int lt = threadIdx.x;                           // loader index (loading group)
  const int wc = (warp - TZ_LOAD_WARPS) * TZ_COLS;      // first column of this compute warp
  const int mt = m < TZ_HALF ? m : TZ_HALF;             // rows of the top half
  const int mb = m - TZ_HALF;                           // rows of the bottom half (<= 0: none)
  const int cta_col0 = blockIdx.x * TZ_HALF * TZ_CB_PER_CTA;
  const int left = (n - cta_col0 + TZ_HALF - 1) / TZ_HALF;
  const int nblocks = left < TZ_CB_PER_CTA ? left : TZ_CB_PER_CTA;  // uniform in the block

  scalar_t x[TZ_COLS];  // top rows (lane) of this warp's columns: B_top, then X_top
  scalar_t b[TZ_COLS];  // bottom rows (32 + lane): B_bot, then X_bot

  // Phase 1: A11 and the first top block.
  if (loader) {
    tz_load_triangle(sA11, A, 0, mt, lda, lt);
    tz_load_block(sB, B, ldb, 0, cta_col0, mt, n - cta_col0, lt);
  }
  tz_barrier(1);

  for (int cb = 0; cb < nblocks; ++cb) {
    const int col0 = cta_col0 + cb * TZ_HALF;

    // Phase 2: the top block into registers, while A21 streams in.
    if (!loader) {
#pragma unroll
      for (int c = 0; c < TZ_COLS; ++c) x[c] = sB[(wc + c) * TZ_HALF + lane];
    } else if (cb == 0 && mb > 0) {
      tz_load_block(sA21, A, lda, TZ_HALF, 0, mb, TZ_HALF, lt);
    }
    tz_barrier(2);

    // Phase 3: X_top = A11^-1 B_top, written back, while the bottom block (and A22) stream in.
    if (!loader) {
      tz_solve(x, sA11, mt, lane);
#pragma unroll
      for (int c = 0; c < TZ_COLS; ++c) {
        const int col = col0 + wc + c;
        if (lane < mt && col < n) B[(long)col * ldb + lane] = x[c];
      }
    } else if (mb > 0) {
      tz_load_block(sB, B, ldb, TZ_HALF, col0, mb, n - col0, lt);
      if (cb == 0) tz_load_triangle(sA22, A, TZ_HALF, mb, lda, lt);
    }
    tz_barrier(3);

    if (mb > 0) {
      // Phase 4: the bottom block into registers.
      if (!loader) {
#pragma unroll
        for (int c = 0; c < TZ_COLS; ++c) b[c] = sB[(wc + c) * TZ_HALF + lane];
      }
      tz_barrier(4);
    }

    // Phase 5: B_bot -= A21 X_top, X_bot = A22^-1 B_bot, written back, while the next column
    // block's top streams in.
    if (!loader) {
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
    } else if (cb + 1 < nblocks) {
      tz_load_block(sB, B, ldb, 0, col0 + TZ_HALF, mt, n - col0 - TZ_HALF, lt);
    }
    if (cb + 1 < nblocks) tz_barrier(1);
  }
}
