"""The op ``band_bidiag``: reduce an upper-banded n×n matrix of bandwidth BW to upper bidiagonal
form B = Qᵀ·A·P (Q, P orthogonal), returning B's diagonal d (n) and superdiagonal e (n − 1); its
shapes are ``(n, bandwidth)``. Singular values are what a reduction must keep: the bidiagonal
form itself is not unique (signs, and the order of the rotations or reflections).

The band is given in LAPACK's band storage (``?gbbrd`` with kl = 0, ku = BW): an array ``ab``
of shape (BW + 1, n) with ``ab[BW + i - j, j] = A[i, j]`` for max(0, j − BW) ≤ i ≤ j, the
diagonal in the last row; column-major (Fortran order, ldab = BW + 1) for a champion kernel.
The loader's callable (:class:`BandBidiagCall`) is ``solver(band) -> (d, e)``, never writing
``band``; its fallback is LAPACK ``?gbbrd`` on the host's CPU (SciPy's LAPACK, the
single-threaded reference code), with the band copied from the device and d, e copied back.
The binding is the band_bidiag path's (``seeds.band_bidiag.lapack.gbbrd``), the one its
reference and its baseline call.
"""

from __future__ import annotations

from typing import Any

from .spec import INT32_MAX, OpSpec, ShapeParam, ShapeRelation, device_index

BAND_BIDIAG = OpSpec(
    name="band_bidiag",
    params=(
        ShapeParam("n", 1, INT32_MAX, "order of the square band matrix"),
        ShapeParam("bandwidth", 0, INT32_MAX, "superdiagonals of the upper band"),
    ),
    dtypes=("float32", "float64"),
    semantics=(
        "band to upper bidiagonal reduction: A n x n upper banded with bandwidth BW, in LAPACK "
        "band storage (BW + 1) x n; returns d (n) and e (n - 1) of B = Q^T A P with the "
        "singular values of A."
    ),
    shape_words="upper band {n}x{n} of bandwidth {bandwidth}",
    call_factory="ops.band_bidiag:BandBidiagCall",
    fallback_library="LAPACK ?gbbrd on the host CPU (SciPy's LAPACK, single-threaded)",
    fallback_route="lapack",
    relations=(ShapeRelation("bandwidth <= n - 1", lambda s: s["bandwidth"] <= s["n"] - 1),),
)


def check_band(band: Any) -> tuple[int, int]:
    """Check the band operand and return (n, bandwidth).

    ``band`` must be a 2-D device array (CuPy) of float32 or float64 in LAPACK upper band
    storage: shape (BW + 1, n) with n ≥ 1 and BW ≤ n − 1.

    Raises:
        TypeError: a host array or another dtype.
        ValueError: not 2-D, empty, or more superdiagonals than the matrix has.
    """
    if device_index(band) is None:
        raise TypeError(f"expected a CuPy array, got {type(band).__name__}")
    if band.dtype.char not in "fd":
        raise TypeError(f"band must be float32 or float64, got {band.dtype}")
    if band.ndim != 2 or band.shape[0] < 1 or band.shape[1] < 1:
        raise ValueError(f"band must be (bandwidth + 1, n) with n >= 1, got shape {band.shape}")
    n, bandwidth = int(band.shape[1]), int(band.shape[0]) - 1
    if bandwidth > n - 1:
        raise ValueError(f"a {n}x{n} matrix has at most {n - 1} superdiagonals; got {bandwidth}")
    return n, bandwidth


class BandBidiagCall:
    """The loader's call of ``band_bidiag`` (``seeds.ops.spec.OpCall``): ``solver(band)``
    returns (d, e) as device arrays of ``band``'s dtype and never writes ``band``. A champion
    kernel takes a Fortran-ordered band (ldab = BW + 1) of the loaded dtype on the solver's
    device; LAPACK on the host takes the rest.

    Raises:
        ModuleNotFoundError: SciPy, whose LAPACK the fallback calls, is not installed (the
            light ``kernevo`` wheel does not depend on it: ``pip install scipy``).
    """

    def __init__(self) -> None:
        try:
            import scipy.linalg.cython_lapack  # noqa: F401  the fallback's LAPACK
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "band_bidiag's fallback is LAPACK ?gbbrd through SciPy, which is not installed "
                "(pip install scipy)",
                name=error.name,
            ) from None

    def shape(self, band: Any) -> tuple[int, int]:
        """(n, bandwidth) (:func:`check_band`)."""
        return check_band(band)

    def kernel_ready(self, dtype: str, device: int, band: Any) -> bool:
        """The loaded dtype, Fortran order, the solver's device."""
        return band.dtype == dtype and band.flags.f_contiguous and device_index(band) == device

    def run(self, driver: Any, band: Any) -> tuple[Any, Any]:
        """The path driver's ``solve(band)``: (d, e), ``band`` not written."""
        d, e = driver.solve(band)
        return d, e

    def fallback(self, band: Any) -> tuple[Any, Any]:
        """LAPACK ``?gbbrd`` on the host (``seeds.band_bidiag.lapack.gbbrd``), d and e copied
        to ``band``'s device."""
        import cupy

        # Here, as CuPy is: the registry imports this module, and the binding imports NumPy.
        from ..band_bidiag.lapack import gbbrd

        check_band(band)
        d, e = gbbrd(cupy.asnumpy(band))
        with cupy.cuda.Device(device_index(band)):
            return cupy.asarray(d), cupy.asarray(e)

    def snapshot(self, band: Any) -> None:
        """Nothing: the solver never writes ``band``."""
        return None

    def restore(self, snapshot: Any, band: Any) -> None:
        """Nothing to put back."""
