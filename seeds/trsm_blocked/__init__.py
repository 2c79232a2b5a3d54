"""The `trsm_blocked` path: TRSM for 128 ≤ m ≤ 16384 by the HSMA-TRSM paper's blocked algorithm
(diagonal blocks inverted in parallel, block-row updates as cuBLAS GEMMs)."""
