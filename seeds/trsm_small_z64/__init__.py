"""The `trsm_small_z64` path: complex128 TRSM at m = 64, n ≤ 64, by the HSMA-TRSM paper's
shared-memory-partitioned two-group pipeline (``kernel.cu``)."""
