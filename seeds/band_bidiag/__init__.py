"""The `band_bidiag` path: an n×n upper band matrix of bandwidth BW reduced to upper bidiagonal
form by Householder bulge chasing on the GPU (Ringoot et al.'s pipelined sweeps), float32 and
float64; its reference is LAPACK ?gbbrd + ?bdsqr in float64 on the host."""
