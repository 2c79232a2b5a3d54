"""What a path is: its operation, dtypes, shapes, seed kernel, compile options, and the parts
that launch it (driver), time it against the vendor library (baseline) and judge its output
(reference check).

A new path is one folder ``seeds/<path>/`` (kernel.cu, spec.py, the driver and baseline modules)
plus one entry in ``seeds.registry.PATHS``: the evaluator, the evolver, the API and the loader
reach every part through the :class:`PathSpec`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

DTYPES: tuple[str, ...] = ("float32", "float64", "complex64", "complex128")

# The macro value each dtype is compiled with (-DKERNEVO_DTYPE=<code>); the seed's fixed prelude
# maps it to `scalar_t` and its arithmetic.
DTYPE_CODES: dict[str, int] = {"float32": 0, "float64": 1, "complex64": 2, "complex128": 3}

Shape = tuple[int, int]


class UnknownDtypeError(ValueError):
    """A dtype name that no path knows."""


def check_dtype(dtype: str, allowed: tuple[str, ...] = DTYPES) -> str:
    """Return ``dtype`` if it is one of ``allowed``.

    Raises:
        UnknownDtypeError: with a one-line message naming the allowed dtypes.
    """
    if dtype not in allowed:
        raise UnknownDtypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(allowed)}")
    return dtype


class PathDriver(Protocol):
    """A compiled candidate loaded on the current device, as the evaluator and the loader use it.

    ``solve_raw`` launches on raw device pointers (column-major A m×m, B m×n, X overwrites B) on
    ``stream`` (a CuPy stream; ``None``: the current one) and raises
    ``seeds.driver.GeometryError`` before launching when the candidate asks for a launch the
    device cannot run. ``solve`` does the same on CuPy arrays after checking their shapes,
    dtype and order, and returns ``b``.
    """

    def solve_raw(
        self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int, stream: Any = None
    ) -> None: ...

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any: ...


def close_driver(driver: object) -> None:
    """Release what ``driver`` holds beyond its module, where it has a ``close()`` (a driver
    that calls cuBLAS keeps a handle and a workspace); a driver without one holds nothing
    (its module goes with it)."""
    close = getattr(driver, "close", None)
    if callable(close):
        close()


class Baseline(Protocol):
    """The vendor library solving the path's problem, timed against the candidate
    (``evaluator.timing.time_shape``): bound to a stream, launched on raw pointers, closed."""

    def set_stream(self, stream: Any) -> None: ...

    def solve_raw(self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int) -> None: ...

    def close(self) -> None: ...


def resolve(name: str) -> Any:
    """The attribute a ``"module:attribute"`` name gives, the module relative to the path package
    (``"<path>.driver:<class>"``), imported on first use: importing the registry
    imports no driver, no baseline and nothing of CUDA. Relative, so that it resolves the same
    under ``seeds`` and under the loader's vendored ``kernevo._seeds``.

    Raises:
        ValueError: ``name`` is not of the form ``module:attribute``.
        ModuleNotFoundError, AttributeError: no such module or attribute.
    """
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{name!r} is not a 'module:attribute' name")
    return getattr(importlib.import_module(f"{__package__}.{module_name}"), attribute)


@dataclass(frozen=True)
class PathSpec:
    """One algorithmic path: a seed kernel plus everything needed to check and time it.

    Shapes are ``(m, n)``: A is m×m, B and X are m×n, column-major, lda = ldb = m.

    The parts, named so that the registry stays cheap to import (:func:`resolve`):
    ``driver_factory`` is a callable ``(cubin, dtype, spec) -> PathDriver`` (:meth:`driver`),
    ``baseline_factory`` a callable ``(dtype) -> Baseline`` (:meth:`baseline`), both
    ``"module:attribute"`` names in the path package; ``reference_check`` names the evaluator's
    check of one output against the problem (``evaluator.checks.accuracy.SOLUTION_CHECKS``: the
    check lives in the evaluator, since ``seeds`` imports nothing of ours).
    """

    path_id: str
    op: str
    dtypes: tuple[str, ...]
    seed_file: Path
    kernel_name: str
    config_kernel_name: str
    shape_bucket: str
    envelope: dict[str, int]
    quick_shapes: tuple[Shape, ...]
    verify_shapes: tuple[Shape, ...]
    timed_shapes: tuple[Shape, ...]
    held_out_shapes: tuple[Shape, ...]
    semantics: str
    driver_factory: str
    baseline_factory: str
    reference_check: str
    extra_options: tuple[str, ...] = field(default=())
    # Where compute-sanitizer runs racecheck, synccheck and initcheck and the determinism
    # repeats (and memcheck before a new best, besides the largest timed shape): ragged in both
    # dimensions and crossing every hand-over the path's kernel has (trsm_small: 33x31 spans
    # both rows a lane holds; trsm_small_z64: m is 64 and n = 33 spans two column blocks).
    sanitizer_shape: Shape = (33, 31)

    def seed_source(self) -> str:
        """The seed kernel's CUDA source text."""
        return self.seed_file.read_text()

    def compile_options(self, dtype: str, arch: str) -> list[str]:
        """NVRTC options for ``dtype`` on ``arch`` (e.g. ``"sm_90"``): a cubin for the real arch.

        Raises:
            UnknownDtypeError: ``dtype`` is not one this path supports.
        """
        check_dtype(dtype, self.dtypes)
        return [
            f"-arch={arch}",
            "-std=c++17",
            f"-DKERNEVO_DTYPE={DTYPE_CODES[dtype]}",
            *self.extra_options,
        ]

    def serves(self, m: int, n: int) -> bool:
        """Whether (m, n) lies inside this path's shape envelope: ``m_min`` ≤ m ≤ ``m_max`` and
        ``n_min`` ≤ n ≤ ``n_max``, a missing lower bound being 1 (``trsm_small_z64`` serves
        m = 64 only)."""
        env = self.envelope
        return env.get("m_min", 1) <= m <= env["m_max"] and env.get("n_min", 1) <= n <= env["n_max"]

    def driver(self, cubin: bytes, dtype: str) -> PathDriver:
        """This path's driver over ``cubin`` (compiled for ``dtype``), loaded in the current CUDA
        context.

        Raises:
            UnknownDtypeError: ``dtype`` is not one this path supports.
            cupy.cuda.driver.CUDADriverError: the cubin does not load or lacks an entry.
        """
        return resolve(self.driver_factory)(cubin, dtype, self)

    def baseline(self, dtype: str) -> Baseline:
        """The vendor baseline for ``dtype`` on the legacy default stream (``close()`` it).

        Raises:
            OSError: the vendor library cannot be loaded.
        """
        return resolve(self.baseline_factory)(dtype)
