// band_bidiag: reduction of an upper band matrix to upper bidiagonal form by Householder bulge
// chasing, one kernel launch per cycle of the paper's pipelined sweeps.
//
// Operation: A is n x n upper banded with bandwidth BW (a_ij = 0 unless 0 <= j - i <= BW). The
// reduction applies orthogonal transformations from both sides, Q^T A P = B, until B is upper
// bidiagonal; its diagonal d and superdiagonal e (the driver reads them) have A's singular
// values. Real only: scalar type by -DKERNEVO_DTYPE (0 float32, 1 float64).
//
// Storage (the padded band layout, seeds/band_bidiag/layout.py): column-major, column j at
// ab + j * ldab, a_ij at row ku + i - j of it, ku = 2 * BW - 1, ldab = 3 * BW. A stage's fill
// reaches b + t <= 2 * BW - 1 above the diagonal and t <= BW - 1 below it; everything outside
// the band is zero on entry. d_i = ab[ku + i * ldab], e_i = ab[ku - 1 + (i + 1) * ldab].
//
// Algorithm (Ringoot et al., "Accelerating Bidiagonalization of Banded Matrices through
// Memory-Aware Bulge-Chasing on GPUs", Algorithms 1-2; schedule.py has the full notation):
//   stages: the bandwidth b goes from BW to 1 by t = min(TW, b - 1) per stage (successive band
//     reduction); the driver runs the stages one after the other.
//   sweep R of a stage (0 <= R <= n - 2 - (b - t)): step k works on the block
//     c0 = R - t + (k + 1) * b, c1 = min(c0 + t, n - 1):
//     row task: a right reflector on columns c0..c1 annihilates a(row, c0+1..c1) (row = R at
//       k = 0, else R - t + k * b) and is applied to rows row+1..c1 (it fills a bulge below
//       the diagonal of the block);
//     column task: a left reflector on rows c0..c1 annihilates the bulge's first column
//       a(c0+1..c1, c0) and is applied to columns c0+1..min(c1 + b, n - 1) (it fills row c0
//       past the band: the next step's row task).
//   The rest of each bulge is annihilated by the next sweep, whose blocks are these shifted by
//   one row and column.
//   cycle (one launch): sweep R runs its step k = cycle - 3 * R. Three cycles between the
//     starts of consecutive sweeps keep the blocks of one launch on disjoint rows (the paper's
//     rule: R + 3 * b > R + 1 + b + t always holds since t <= b - 1). A stage is
//     3 * (n - 2 - (b - t)) + 1 launches; the launch boundary is the only synchronization
//     between sweeps.
//   Householder reflectors follow LAPACK's xLARFG: H = I - tau v v^T, v_0 = 1, H x = beta e_1,
//   beta = -sign(x_0) ||x||, ||x|| scaled by max |x_i| so it neither overflows nor underflows.
//
// Inside a block (the paper's Algorithm 2): warp 0 loads the t + 1 entries to reduce into
// shared memory, computes the reflector with warp shuffles and writes beta and the zeros back;
// after a barrier every thread takes one row (row task) or one column (column task) of the
// block, loads its t + 1 entries into registers, applies the reflector and stores them, in
// chunks of BB_THREADS rows or columns.
//
// Launch geometry: kernevo_launch_config(n, bw, cfg) writes grid xyz, block xyz and dynamic
// shared bytes (0) into cfg[0..6]: min(BB_MAX_BLOCKS, most sweeps active in any launch) blocks
// of BB_THREADS threads; block x runs the x-th active sweep of a launch, then every gridDim.x-th.
// kernevo_tile_width(cfg) writes TW into cfg[0]: the driver forms the stages from it.
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values; the paper's three):
//   BB_TW          inner tile width TW: entries annihilated per reflector, the bandwidth one
//                  stage removes (the paper's best: 32 in float32, 16 in float64)
//   BB_THREADS     threads per block (a multiple of 32: warp 0 computes the reflectors)
//   BB_MAX_BLOCKS  most thread blocks per launch

// ---- fixed prelude: scalar type (header-free: NVRTC ships no CUDA headers) ----
#ifndef KERNEVO_DTYPE
#error "compile with -DKERNEVO_DTYPE=0 (float32) or 1 (float64)"
#endif
#if KERNEVO_DTYPE == 0
typedef float scalar_t;
#elif KERNEVO_DTYPE == 1
typedef double scalar_t;
#else
#error "band_bidiag is real: KERNEVO_DTYPE must be 0 (float32) or 1 (float64)"
#endif
#define KV_WARP 32
// a_ij in the padded band layout.
#define KV_AB(i, j) ab[(long)(j) * ldab + ku + (i) - (j)]

// EVOLVE-BLOCK-START
#define BB_TW 32           // tune: 4 8 16 32 64
#define BB_THREADS 128     // tune: 32 64 128 256 512
#define BB_MAX_BLOCKS 192  // tune: 48 96 192 384 768

static_assert(BB_THREADS % KV_WARP == 0, "warp 0 computes the reflectors: whole warps only");

extern "C" __global__ void kernevo_tile_width(int* cfg) { cfg[0] = BB_TW; }

// Most sweeps active in one launch over all stages: ceil(K0 / 3), K0 = floor((n - 2 + t) / b)
// the first sweep's step count (schedule.max_active).
extern "C" __global__ void kernevo_launch_config(int n, int bw, int* cfg) {
  int most = 1;
  int b = min(bw, n - 1);
  while (b > 1) {
    const int t = min(BB_TW, b - 1);
    if (n - 2 - (b - t) >= 0) most = max(most, ((n - 2 + t) / b + 2) / 3);
    b -= t;
  }
  cfg[0] = min(most, BB_MAX_BLOCKS);
  cfg[1] = 1;
  cfg[2] = 1;
  cfg[3] = BB_THREADS;
  cfg[4] = 1;
  cfg[5] = 1;
  cfg[6] = 0;
}

__device__ __forceinline__ scalar_t bb_warp_max(scalar_t x) {
#pragma unroll
  for (int o = KV_WARP / 2; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ scalar_t bb_warp_sum(scalar_t x) {
#pragma unroll
  for (int o = KV_WARP / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Warp 0 only: v[0..w] holds x on entry; on return v holds the reflector's vector (v[0] = 1)
// and *tau its scale; beta is returned to every lane. w >= 1.
__device__ __forceinline__ scalar_t bb_householder(scalar_t* v, int w, scalar_t* tau) {
  const int lane = threadIdx.x;
  const scalar_t alpha = v[0];
  // Lane l touches only v[i] with i = l (mod 32), as it loaded them.
  scalar_t amax = scalar_t(0);
  for (int i = lane; i <= w; i += KV_WARP) {
    if (i > 0) amax = fmax(amax, fabs(v[i]));
  }
  amax = bb_warp_max(amax);
  if (amax == scalar_t(0)) {  // nothing to annihilate: H = I
    __syncwarp();
    if (lane == 0) {
      v[0] = scalar_t(1);
      *tau = scalar_t(0);
    }
    __syncwarp();
    return alpha;
  }
  const scalar_t scale = fmax(amax, fabs(alpha));
  scalar_t ssq = scalar_t(0);
  for (int i = lane; i <= w; i += KV_WARP) {
    const scalar_t r = v[i] / scale;
    ssq += r * r;
  }
  ssq = bb_warp_sum(ssq);
  const scalar_t norm = scale * sqrt(ssq);
  const scalar_t beta = alpha >= scalar_t(0) ? -norm : norm;
  const scalar_t denom = alpha - beta;  // |alpha| + |beta|: no cancellation
  for (int i = lane; i <= w; i += KV_WARP) {
    if (i > 0) v[i] = v[i] / denom;
  }
  __syncwarp();
  if (lane == 0) {
    v[0] = scalar_t(1);
    *tau = (beta - alpha) / beta;
  }
  __syncwarp();
  return beta;
}

// One launch (cycle `cycle`) of the stage that reduces bandwidth b to b - t.
extern "C" __global__ void __launch_bounds__(BB_THREADS)
band_bidiag_kernel(scalar_t* __restrict__ ab, int ldab, int ku, int n, int b, int t, int cycle) {
  __shared__ scalar_t v[BB_TW + 1];
  __shared__ scalar_t tau_s;
  const int last = n - 2 - (b - t);
  const int first_active = min(last, cycle / 3);
  for (int R = first_active - (int)blockIdx.x; R >= 0; R -= (int)gridDim.x) {
    const int k = cycle - 3 * R;
    if (k >= (n - 2 - R + t) / b) break;  // sweeps below R are past their last step too
    const int c0 = R - t + (k + 1) * b;
    const int c1 = min(c0 + t, n - 1);
    const int w = c1 - c0;  // entries to annihilate, 1..t
    const int row = k == 0 ? R : c0 - b;

    // ---- row task: right reflector on columns c0..c1 annihilates a(row, c0+1..c1) ----
    if (threadIdx.x < KV_WARP) {
      for (int i = threadIdx.x; i <= w; i += KV_WARP) v[i] = KV_AB(row, c0 + i);
      __syncwarp();
      const scalar_t beta = bb_householder(v, w, &tau_s);
      for (int i = threadIdx.x; i <= w; i += KV_WARP) KV_AB(row, c0 + i) = i == 0 ? beta : scalar_t(0);
    }
    __syncthreads();
    {
      const scalar_t tau = tau_s;
      const long step = ldab - 1;  // a(i, j) to a(i, j + 1)
      for (int i = row + 1 + (int)threadIdx.x; i <= c1; i += BB_THREADS) {
        scalar_t* p = &KV_AB(i, c0);
        scalar_t a[BB_TW + 1];
        scalar_t s = scalar_t(0);
#pragma unroll
        for (int jj = 0; jj <= BB_TW; ++jj) {
          if (jj <= w) {
            a[jj] = p[jj * step];
            s += a[jj] * v[jj];
          }
        }
        s *= tau;
#pragma unroll
        for (int jj = 0; jj <= BB_TW; ++jj) {
          if (jj <= w) p[jj * step] = a[jj] - s * v[jj];
        }
      }
    }
    __syncthreads();

    // ---- column task: left reflector on rows c0..c1 annihilates a(c0+1..c1, c0) ----
    if (threadIdx.x < KV_WARP) {
      for (int i = threadIdx.x; i <= w; i += KV_WARP) v[i] = KV_AB(c0 + i, c0);
      __syncwarp();
      const scalar_t beta = bb_householder(v, w, &tau_s);
      for (int i = threadIdx.x; i <= w; i += KV_WARP) KV_AB(c0 + i, c0) = i == 0 ? beta : scalar_t(0);
    }
    __syncthreads();
    {
      const scalar_t tau = tau_s;
      const int cend = min(c1 + b, n - 1);
      for (int j = c0 + 1 + (int)threadIdx.x; j <= cend; j += BB_THREADS) {
        scalar_t* p = &KV_AB(c0, j);  // a(c0..c1, j) is contiguous
        scalar_t a[BB_TW + 1];
        scalar_t s = scalar_t(0);
#pragma unroll
        for (int ii = 0; ii <= BB_TW; ++ii) {
          if (ii <= w) {
            a[ii] = p[ii];
            s += v[ii] * a[ii];
          }
        }
        s *= tau;
#pragma unroll
        for (int ii = 0; ii <= BB_TW; ++ii) {
          if (ii <= w) p[ii] = a[ii] - s * v[ii];
        }
      }
    }
    __syncthreads();  // v and tau_s are reused by this block's next sweep
  }
}
// EVOLVE-BLOCK-END
