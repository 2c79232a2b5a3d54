"""The `trsm_small_batched` path: batched small TRSM (op ``trsm_batched``) in one launch."""
