"""The `solve_tri` path: ggml's SOLVE_TRI (batched lower-triangular solve, float32, row-major,
byte strides per tensor), one thread block per matrix (``kernel.cu``)."""
