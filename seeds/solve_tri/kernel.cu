// solve_tri: ggml's SOLVE_TRI, a batched lower-triangular solve, float32.
//
// Operation: for every batch index (i2, i3), 0 <= i2 < b2, 0 <= i3 < b3, solve A * X = B for X.
//   A: n x n lower triangular with a non-unit diagonal (each x_i is divided by a_ii); its strict
//      upper triangle is never read (it may hold anything, NaN included).
//   B, X: n x k. X is written to its own tensor (ggml's dst); B is only read.
//   Every matrix is row-major (the column index is the fastest), as ggml tensors are:
//      ne_lhs = [n, n, b2, b3], ne_rhs = ne_dst = [k, n, b2, b3] in ggml's notation (ne[0]
//      fastest). Strides are ggml's nb[1..3] in BYTES, per tensor, not necessarily packed:
//      element (r, c) of batch (i2, i3) of A is at (char*)A + i3*nb_a3 + i2*nb_a2 + r*nb_a1 + 4*c
//      (nb[0] = 4: elements of a row are adjacent). nb[1] must be a multiple of 4 (the driver
//      checks it, with everything else about the layout).
//   X may alias B only exactly (same pointer and strides: an in-place solve): every element of B
//   is read by the one thread that later writes the same element of X, before it writes it. Any
//   other overlap of X with A or B is refused by the driver.
//
// Algorithm: one thread block per matrix (blockIdx.x = i3 * b2 + i2); blockIdx.y splits the
// columns of X between blocks (gridDim.y = 1, one block solving all k columns, unless
// ST_FILL_BLOCKS asks for more). Left-looking blocked forward substitution over row tiles of ST_TILE rows:
//   for each row tile R (rows r0 .. r0 + ST_TILE - 1):
//     for each column tile J left of it (j0 < r0): X_R -= A(R, J) * X_J   (off-diagonal update)
//     X_R = A(R, R)^-1 * X_R                                               (diagonal solve)
// Each tile of A is staged once in shared memory by the whole block (transposed, leading
// dimension ST_TILE + 1, so that both the staging writes and the lanes' reads of one column are
// free of bank conflicts) and then used by every warp for every column it owns.
// Column ownership: warp w owns column groups cg = blockIdx.y * ST_WARPS + w (+ gridDim.y *
// ST_WARPS per round) of ST_COLS_PER_WARP columns each; lane l holds rows r0 + l + 32 s
// (s < ST_TILE / 32) of each owned column in registers. A substitution step is one warp shuffle
// (broadcast of the solved x_j from its owner lane) and one multiply-subtract per held row: no
// block-wide barrier inside the solve. The partial sums of a row tile live in X between column
// tiles (B is read at the first one), and the solved rows of X are read back from X by the
// off-diagonal updates: in both, an element of X is only ever touched by the one lane that owns
// its (row mod 32, column), so no thread reads another's global writes.
//
// Race freedom by construction, for every warp count (the published kernel raced when its warp
// count was not a power of two): there is no early return; every __syncthreads() sits in control
// flow that depends only on n (the same in every thread); shared memory is written only between
// the two barriers around a staging loop (which strides over the block's ST_WARP * ST_WARPS
// threads, whatever that number is) and read only after the second; data moves between lanes
// only through __shfl_sync with the full mask, under warp-uniform conditions.
//
// Launch geometry (kernevo's one mechanism): the driver calls kernevo_launch_config(n, k, b2, b3,
// cfg) once per shape; it writes grid xyz, block xyz and dynamic shared-memory bytes to
// cfg[0..6]. Dynamic shared memory holds one tile of A: min(n, ST_TILE) * (ST_TILE + 1) floats
// (16.6 KB at ST_TILE = 64; 66 KB at 128, past the 48 KB default, so the driver opts in).
//
// Tunables (inside the EVOLVE-BLOCK, "// tune:" lists the legal values):
//   ST_WARPS           warps per block (block = 32 x ST_WARPS threads); powers of two or not
//   ST_COLS_PER_WARP   right-hand-side columns each warp solves together (independent chains
//                      interleave, hiding shuffle latency)
//   ST_TILE            rows (and columns) of a tile of A staged in shared memory, a multiple of 32
//   ST_UNROLL          unroll factor of the substitution and update loops
//   ST_RECIP_DIAG      1: the staging stores 1 / a_jj in the diagonal tile, so a substitution
//                      step multiplies instead of dividing (an IEEE float32 division is a
//                      multi-instruction sequence on every step of the serial chain); 0: divide
//   ST_STAGE_VEC       4: stage A with 16-byte loads where the block's rows allow it (lda a
//                      multiple of 4, 16-byte aligned, tile width a multiple of 4), else as 1;
//                      1: 4-byte loads
//   ST_STAGE_BATCH     loads each thread issues before it stores any to shared memory: the
//                      staging is latency-bound (one block per matrix), so more loads in
//                      flight means fewer round trips to memory
//   ST_PREFETCH_B      1: each warp reads its first column group of B for a row tile before the
//                      tile of A is staged, so the two loads overlap; 0: after
//   ST_FILL_BLOCKS     0: one block per matrix; N: split each matrix's columns over gridDim.y
//                      blocks so that the grid holds about N blocks (at most as many per matrix
//                      as its column groups keep busy): a few matrices of many columns then use
//                      more than b2 * b3 SMs, each block staging the same tiles of A

// ---- fixed prelude (header-free: NVRTC ships no CUDA headers) ----
#ifndef KERNEVO_DTYPE
#error "compile with -DKERNEVO_DTYPE=0 (solve_tri is float32 only)"
#endif
#if KERNEVO_DTYPE != 0
#error "solve_tri is a float32 path: compile with -DKERNEVO_DTYPE=0"
#endif
#define ST_STR(x) #x
#define ST_PRAGMA_UNROLL(n) _Pragma(ST_STR(unroll n))
#define ST_WARP 32

// EVOLVE-BLOCK-START
#define ST_WARPS 6          // tune: 1 2 3 4 5 6 7 8 12 16
#define ST_COLS_PER_WARP 1  // tune: 1 2 4
#define ST_TILE 64          // tune: 32 64 128
#define ST_UNROLL 4         // tune: 1 2 4 8
#define ST_RECIP_DIAG 1     // tune: 0 1
#define ST_STAGE_VEC 4      // tune: 1 4
#define ST_STAGE_BATCH 8    // tune: 1 2 4 8
#define ST_PREFETCH_B 1     // tune: 0 1
#define ST_FILL_BLOCKS 132  // tune: 0 132 264 528

#define ST_ROWS_PER_LANE (ST_TILE / ST_WARP)
#define ST_LDS (ST_TILE + 1)
#define ST_THREADS (ST_WARP * ST_WARPS)

// Four floats read with one 16-byte load (header-free: NVRTC's float4 needs no header either,
// but this keeps the prelude's promise of nothing implicit).
struct __align__(16) st_quad {
  float v[4];
};

// Stages rows x cols of A at (r0, j0) into sA transposed (sA[j * ST_LDS + i] = A(r0 + i, j0 + j)),
// by the whole block. In the diagonal tile (diag) only the lower triangle is read; its strict
// upper triangle is stored as 0, and with ST_RECIP_DIAG its diagonal as 1 / a_jj. Loads are
// issued ST_STAGE_BATCH at a time per thread before their stores, 16 bytes each where `vec`.
// Called between the two barriers of a staging phase only.
__device__ __forceinline__ void st_stage_tile(float* sA, const float* __restrict__ a, long long lda,
                                              int r0, int j0, int rows, int cols, bool diag,
                                              bool vec, int tid) {
  const int width = vec ? 4 : 1;           // floats per load
  const int units_per_row = cols / width;  // cols is a multiple of 4 where vec
  const int units = rows * units_per_row;
  for (int base = tid; base < units; base += ST_THREADS * ST_STAGE_BATCH) {
    st_quad q[ST_STAGE_BATCH];
#pragma unroll
    for (int u = 0; u < ST_STAGE_BATCH; ++u) {
      const int idx = base + u * ST_THREADS;
      q[u].v[0] = q[u].v[1] = q[u].v[2] = q[u].v[3] = 0.0f;
      if (idx < units) {
        const int i = idx / units_per_row;
        const int j = (idx - i * units_per_row) * width;
        const float* src = a + (long long)(r0 + i) * lda + j0 + j;
        if (vec && (!diag || j + 3 <= i)) {
          q[u] = *(const st_quad*)src;
        } else {
          // One float, or the quad the diagonal crosses: its elements right of the diagonal are
          // never read (they may be NaN, or anything).
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (e < width && (!diag || j + e <= i)) q[u].v[e] = src[e];
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < ST_STAGE_BATCH; ++u) {
      const int idx = base + u * ST_THREADS;
      if (idx < units) {
        const int i = idx / units_per_row;
        const int j = (idx - i * units_per_row) * width;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (e < width) {
            float v = q[u].v[e];
            if (ST_RECIP_DIAG && diag && j + e == i) v = 1.0f / v;
            sA[(j + e) * ST_LDS + i] = v;
          }
        }
      }
    }
  }
}

// Loads the accumulators of one column group (columns c0 ..) of a row tile from `src` (B or X):
// acc[c][s] = row r0 + lane + 32 s, 0 outside the matrix.
__device__ __forceinline__ void st_load_group(float (&acc)[ST_COLS_PER_WARP][ST_ROWS_PER_LANE],
                                              const float* src, long long ld, int r0, int rows,
                                              int c0, int k, int lane) {
#pragma unroll
  for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
#pragma unroll
    for (int s = 0; s < ST_ROWS_PER_LANE; ++s) {
      const int row = lane + ST_WARP * s;
      const int col = c0 + c;
      acc[c][s] = (row < rows && col < k) ? src[(long long)(r0 + row) * ld + col] : 0.0f;
    }
  }
}

extern "C" __global__ void kernevo_launch_config(int n, int k, int b2, int b3, int* cfg) {
  const int tile_rows = n < ST_TILE ? n : ST_TILE;
  // Blocks per matrix, splitting its columns: with ST_FILL_BLOCKS, as many as bring the grid to
  // about that many blocks (a few matrices of many columns would leave most SMs idle: 8 blocks
  // on 132 at (256, 128, 4, 2)), never more than its column groups can keep busy; else one.
  int split = 1;
  if (ST_FILL_BLOCKS > 0) {
    const int matrices = b2 * b3;
    const int groups = (k + ST_COLS_PER_WARP - 1) / ST_COLS_PER_WARP;
    const int busy = (groups + ST_WARPS - 1) / ST_WARPS;
    const int fill = (ST_FILL_BLOCKS + matrices - 1) / matrices;
    split = max(1, min(busy, fill));
  }
  cfg[0] = b2 * b3;  // one thread block per matrix along x (the driver bounds b2 * b3)
  cfg[1] = split;
  cfg[2] = 1;
  cfg[3] = ST_WARP;
  cfg[4] = ST_WARPS;
  cfg[5] = 1;
  cfg[6] = tile_rows * ST_LDS * (int)sizeof(float);
}

extern "C" __global__ void __launch_bounds__(ST_THREADS)
solve_tri_kernel(const float* __restrict__ A, const float* B, float* X, int n, int k, int b2,
                 long long nb_a1, long long nb_a2, long long nb_a3,
                 long long nb_b1, long long nb_b2, long long nb_b3,
                 long long nb_x1, long long nb_x2, long long nb_x3) {
  // sA[j * ST_LDS + i] = A(r0 + i, j0 + j): one tile of A, transposed.
  extern __shared__ __align__(16) float st_smem[];
  float* sA = st_smem;

  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int tid = warp * ST_WARP + lane;
  const long long i2 = blockIdx.x % b2;
  const long long i3 = blockIdx.x / b2;
  const float* a = (const float*)((const char*)A + i2 * nb_a2 + i3 * nb_a3);
  const float* b = (const float*)((const char*)B + i2 * nb_b2 + i3 * nb_b3);
  float* x = (float*)((char*)X + i2 * nb_x2 + i3 * nb_x3);
  const long long lda = nb_a1 / 4, ldb = nb_b1 / 4, ldx = nb_x1 / 4;

  // 16-byte staging loads need every row of this block's A 16-byte aligned (the same in every
  // thread of the block: a barrier-safe condition).
  const bool a_rows_aligned =
      ST_STAGE_VEC == 4 && lda % 4 == 0 && ((unsigned long long)a & 15ull) == 0ull;
  const int cg_first = blockIdx.y * ST_WARPS + warp;  // this warp's first column group

  for (int r0 = 0; r0 < n; r0 += ST_TILE) {
    const int rows = min(ST_TILE, n - r0);  // rows of this row tile
    // With ST_PREFETCH_B the first column group's B is in registers before A is staged.
    float pre[ST_COLS_PER_WARP][ST_ROWS_PER_LANE];
    if (ST_PREFETCH_B) st_load_group(pre, b, ldb, r0, rows, cg_first * ST_COLS_PER_WARP, k, lane);
    for (int j0 = 0; j0 <= r0; j0 += ST_TILE) {
      const bool diag = j0 == r0;
      const int cols = diag ? rows : ST_TILE;  // a tile left of the diagonal is full
      __syncthreads();  // every warp is done with the previous tile
      st_stage_tile(sA, a, lda, r0, j0, rows, cols, diag, a_rows_aligned && cols % 4 == 0, tid);
      __syncthreads();  // the tile is complete

      for (int cg = cg_first; cg * ST_COLS_PER_WARP < k; cg += gridDim.y * ST_WARPS) {
        const int c0 = cg * ST_COLS_PER_WARP;
        // acc[c][s]: row r0 + lane + 32 s of column c0 + c: B at the first column tile, the
        // partial sums this lane left in X otherwise.
        float acc[ST_COLS_PER_WARP][ST_ROWS_PER_LANE];
        if (j0 != 0) {
          st_load_group(acc, x, ldx, r0, rows, c0, k, lane);
        } else if (ST_PREFETCH_B && cg == cg_first) {
#pragma unroll
          for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
#pragma unroll
            for (int s = 0; s < ST_ROWS_PER_LANE; ++s) acc[c][s] = pre[c][s];
          }
        } else {
          st_load_group(acc, b, ldb, r0, rows, c0, k, lane);
        }

        if (!diag) {
          // X_R -= A(R, J) * X_J. Rows j0 + lane + 32 s of X_J were stored by this lane.
          float xj[ST_COLS_PER_WARP][ST_ROWS_PER_LANE];
#pragma unroll
          for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
#pragma unroll
            for (int s = 0; s < ST_ROWS_PER_LANE; ++s) {
              const int col = c0 + c;
              xj[c][s] = col < k ? x[(long long)(j0 + lane + ST_WARP * s) * ldx + col] : 0.0f;
            }
          }
#pragma unroll
          for (int t = 0; t < ST_ROWS_PER_LANE; ++t) {
            ST_PRAGMA_UNROLL(ST_UNROLL)
            for (int jj = 0; jj < ST_WARP; ++jj) {
              const int j = ST_WARP * t + jj;
              float av[ST_ROWS_PER_LANE];
#pragma unroll
              for (int s = 0; s < ST_ROWS_PER_LANE; ++s) {
                const int row = lane + ST_WARP * s;
                av[s] = row < rows ? sA[j * ST_LDS + row] : 0.0f;
              }
#pragma unroll
              for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
                const float v = __shfl_sync(0xffffffffu, xj[c][t], jj);
#pragma unroll
                for (int s = 0; s < ST_ROWS_PER_LANE; ++s) acc[c][s] = fmaf(-av[s], v, acc[c][s]);
              }
            }
          }
        } else {
          // X_R = A(R, R)^-1 X_R: step j solves row j (held by lane j mod 32 at s = j / 32),
          // broadcasts it and updates the rows below it.
#pragma unroll
          for (int t = 0; t < ST_ROWS_PER_LANE; ++t) {
            const int steps = min(ST_WARP, rows - ST_WARP * t);  // the same in every lane
            ST_PRAGMA_UNROLL(ST_UNROLL)
            for (int jj = 0; jj < steps; ++jj) {
              const int j = ST_WARP * t + jj;
              const float d = sA[j * ST_LDS + j];  // 1 / a_jj with ST_RECIP_DIAG
              float av[ST_ROWS_PER_LANE];
#pragma unroll
              for (int s = 0; s < ST_ROWS_PER_LANE; ++s) {
                const int row = lane + ST_WARP * s;
                av[s] = (s >= t && row > j && row < rows) ? sA[j * ST_LDS + row] : 0.0f;
              }
#pragma unroll
              for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
                const float held = __shfl_sync(0xffffffffu, acc[c][t], jj);
                const float v = ST_RECIP_DIAG ? held * d : held / d;
                if (lane == jj) acc[c][t] = v;
                // Only the rows below j: a solved row is final.
#pragma unroll
                for (int s = t; s < ST_ROWS_PER_LANE; ++s) {
                  if (lane + ST_WARP * s > j) acc[c][s] = fmaf(-av[s], v, acc[c][s]);
                }
              }
            }
          }
        }

#pragma unroll
        for (int c = 0; c < ST_COLS_PER_WARP; ++c) {
#pragma unroll
          for (int s = 0; s < ST_ROWS_PER_LANE; ++s) {
            const int row = lane + ST_WARP * s;
            const int col = c0 + c;
            if (row < rows && col < k) x[(long long)(r0 + row) * ldx + col] = acc[c][s];
          }
        }
      }
    }
  }
}
// EVOLVE-BLOCK-END
