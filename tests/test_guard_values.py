"""The guard values around every verified and timed array (``evaluator.checks.integrity``):
tagged signaling NaNs, so that a write into a guard band changes its bytes even when the value
written was computed from the band itself.

RESULTS 24: with quiet-NaN guards, a trsm_small_batched kernel whose spare slots solved the
matrices past the batch (reading B's guard band, writing the solution back there) passed every
check on the H200 in float64: the device's arithmetic kept the guard's payload, so the band's
bytes were unchanged. Arithmetic on a signaling NaN delivers a quiet NaN (IEEE 754-2019, 6.2),
so the quiet bit now flips. On CPU: the pattern's bits, and what NumPy's arithmetic (x86, IEEE)
makes of it as the guard check sees it; on the GPU (``gpu``): what the device's float32 and
float64 multiply, add and FMA make of it, the property the check relies on.
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.checks.integrity import GUARD_ELEMENTS, check_guards, guard_pattern

# (dtype of the word, exponent mask, quiet bit) per word width.
_WORDS = {
    4: (np.uint32, 0x7F80_0000, 0x0040_0000),
    8: (np.uint64, 0x7FF0_0000_0000_0000, 0x0008_0000_0000_0000),
}
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
# NaNs arithmetic makes from no NaN input: CUDA's canonical float32 NaN, NumPy's default ones.
MADE_NANS = {4: (0x7FFF_FFFF, 0x7FC0_0000), 8: (0x7FFF_FFFF_FFFF_FFFF, 0x7FF8_0000_0000_0000)}


def _words(dtype: type) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    width = np_dtype.itemsize // 2 if np_dtype.kind == "c" else np_dtype.itemsize
    return np.frombuffer(guard_pattern(np_dtype, 8), dtype=_WORDS[width][0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_guard_word_is_a_tagged_signaling_nan(dtype):
    words = _words(dtype)
    bits_type, exponent, quiet = _WORDS[words.itemsize]
    assert len(words) == 8 * np.dtype(dtype).itemsize // words.itemsize
    assert (words & bits_type(exponent) == exponent).all()  # all-ones exponent
    assert (words & bits_type(quiet) == 0).all()  # quiet bit clear: signaling
    payload = words & ~bits_type(exponent | quiet) & ~(bits_type(1) << (words.itemsize * 8 - 1))
    assert (payload != 0).all()  # a NaN, not an infinity
    assert not set(words.tolist()) & set(MADE_NANS[words.itemsize])
    assert np.isnan(np.frombuffer(guard_pattern(np.dtype(dtype), 8), dtype=dtype)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "computed",
    [
        lambda g: g * 1.0,  # the identity, done in arithmetic
        lambda g: g - 0.0 * g,  # a substitution step whose update is zero
        lambda g: g / g,  # x = b / a with both read past the end
        lambda g: np.conj(g) if np.iscomplexobj(g) else -g,  # a sign flipped
    ],
    ids=["times_one", "zero_update", "divided", "negated"],
)
def test_a_value_computed_from_the_band_and_written_back_is_caught(dtype, computed):
    """The red-team kind of RESULTS 24 on the host: the band is read, something is computed from
    it and the result is stored where it was read; ``check_guards`` names the write."""
    before = guard_pattern(np.dtype(dtype), GUARD_ELEMENTS)
    band = np.frombuffer(before, dtype=dtype).copy()
    with np.errstate(invalid="ignore"):
        band[...] = computed(band)
    failure = check_guards(before, band.tobytes(), (7, 5))
    assert failure is not None and failure.check == "out_of_bounds_write"
    assert failure.detail.startswith("guard band byte ")


# y = x * one, x + zero and fma(x, one, zero) on the device: `one` and `zero` are arguments, so
# NVRTC cannot fold the arithmetic away.
_DEVICE_OPS = """
extern "C" __global__ void guard_ops(const T* x, T one, T zero, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[3 * i] = x[i] * one;
    y[3 * i + 1] = x[i] + zero;
    y[3 * i + 2] = fma(x[i], one, zero);
  }
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_devices_arithmetic_on_a_guard_word_changes_its_bits(dtype):
    """What the guard check relies on, on this GPU: multiply, add and FMA of a guard word give
    a NaN whose bits differ from it (complex arithmetic is real arithmetic on its two words)."""
    import cupy

    name = "float" if dtype is np.float32 else "double"
    kernel = cupy.RawKernel(f"#define T {name}\n{_DEVICE_OPS}", "guard_ops")
    guard = np.frombuffer(guard_pattern(np.dtype(dtype), 64), dtype=dtype)
    x = cupy.asarray(guard)
    y = cupy.empty(3 * guard.size, dtype=dtype)
    kernel((1,), (64,), (x, dtype(1), dtype(0), y, np.int32(guard.size)))
    out = cupy.asnumpy(y)
    bits_type = _WORDS[np.dtype(dtype).itemsize][0]
    assert np.isnan(out).all()
    assert (out.view(bits_type) != guard.view(bits_type)[0]).all(), hex(out.view(bits_type)[0])
