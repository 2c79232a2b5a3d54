// Red-team control: the EVOLVE-BLOCK of seeds/trsm_blocked/kernel.cu as of commit 6822b47, frozen
// (tests/redteam/blocked.py derives its faulty candidates from this text, so they stay
// one fault away from a known-good kernel when the seed itself is tuned).
#define TB_NB 256       // tune: 128 256 512
#define TB_IB 32        // tune: 16 32 64
#define TB_THREADS 256  // tune: 128 256 512 1024
#define TB_UNROLL 1     // tune: 1 2 4

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

  KV_UNROLL(TB_UNROLL)
  for (int k = k0; k < mb; ++k) {
    if (g == k % TB_GROUPS) {
      const scalar_t d = D[(long)k * lda + k];
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        if (g + TB_GROUPS * s == k) {
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
      const scalar_t* dk = D + (long)k * lda;
#pragma unroll
      for (int s = 0; s < TB_ROWS; ++s) {
        const int row = g + TB_GROUPS * s;
        if (row > k && row < mb) y[s] = kv_fms(y[s], dk[row], x);
      }
    }
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
