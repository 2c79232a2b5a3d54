"""What a path is: its operation, dtypes, shapes, seed kernel, compile options, and the parts
that launch it (driver), time it against the vendor library (baseline) and judge its output
(reference check).

A path serves one op (``seeds.ops``): its shapes are tuples of the op's shape parameters in
order (trsm: ``(m, n)``), and its envelope and buckets bound each parameter ``p`` by ``p_min``
(optional, 1 when absent) and ``p_max``.

A new path is one folder ``seeds/<path>/`` (kernel.cu, spec.py, the driver and baseline modules)
plus one entry in ``seeds.registry.PATHS``: the evaluator, the evolver, the API and the loader
reach every part through the :class:`PathSpec`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import ops
from .ops import spec as op_spec
from .ops.spec import envelope_params

DTYPES: tuple[str, ...] = ("float32", "float64", "complex64", "complex128")

# The macro value each dtype is compiled with (-DKERNEVO_DTYPE=<code>); the seed's fixed prelude
# maps it to `scalar_t` and its arithmetic.
DTYPE_CODES: dict[str, int] = {"float32": 0, "float64": 1, "complex64": 2, "complex128": 3}

# A problem shape: the values of the path's op's shape parameters, in order (trsm: (m, n)).
Shape = tuple[int, ...]


class UnknownDtypeError(ValueError):
    """A dtype name that no path knows (``float16``), or, as :class:`MissingDtypeError`, a
    known one that a path or op does not implement."""


class MissingDtypeError(UnknownDtypeError):
    """A known dtype (one of :data:`DTYPES`) that a path or an op has no kernel for:
    ``path solve_tri has no float64 kernel; it implements float32``. An
    :class:`UnknownDtypeError` still, so every ``except UnknownDtypeError`` catches it.
    ``dtype`` is the dtype asked for, ``owner`` who lacks it (``path solve_tri``, ``op
    solve_tri``; ``None`` when the caller did not say) and ``implemented`` its dtypes."""

    def __init__(self, dtype: str, implemented: tuple[str, ...], owner: str | None) -> None:
        listed = ", ".join(implemented)
        if owner is None:
            message = f"no {dtype} kernel here; implemented: {listed}"
        else:
            message = f"{owner} has no {dtype} kernel; it implements {listed}"
        super().__init__(message)
        self.dtype = dtype
        self.owner = owner
        self.implemented = implemented


class UnknownBucketError(ValueError):
    """A shape bucket name that the path does not have."""


def check_dtype(dtype: str, allowed: tuple[str, ...] = DTYPES, *, owner: str | None = None) -> str:
    """Return ``dtype`` if it is one of ``allowed`` (the dtypes of ``owner``, a path or op named
    as ``path solve_tri`` / ``op solve_tri``).

    Raises:
        MissingDtypeError: a known dtype (:data:`DTYPES`) that is not in ``allowed``: ``path
            solve_tri has no float64 kernel; it implements float32``.
        UnknownDtypeError: a dtype no path knows: ``unknown dtype 'float16'; expected one of``
            and the allowed dtypes.
    """
    if dtype in allowed:
        return dtype
    if dtype in DTYPES:
        raise MissingDtypeError(dtype, allowed, owner)
    raise UnknownDtypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(allowed)}")


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
class ShapeBucket:
    """One shape bucket of a path: the problems it serves and the shapes a job on it checks and
    times. A job targets one (dtype, bucket); its champion is that bucket's (a champion's key is
    (path, dtype, GPU, bucket)), so a tunable such as a block size is chosen per bucket.

    ``envelope`` (keys as :attr:`PathSpec.envelope`): the shapes the bucket serves, inside the
    path's; buckets of one path do not overlap, so routing puts a shape in one of them. The shape
    sets may lie anywhere inside the path's envelope: a kernel tuned for large m must still be
    right at small m, and small shapes are where the host reference can check it row by row.
    """

    name: str
    envelope: dict[str, int]
    quick_shapes: tuple[Shape, ...]
    verify_shapes: tuple[Shape, ...]
    timed_shapes: tuple[Shape, ...]
    held_out_shapes: tuple[Shape, ...]
    sanitizer_shape: Shape

    def serves(self, *shape: int, params: Sequence[str] | None = None) -> bool:
        """Whether ``shape`` lies inside the bucket's envelope. ``params``: the op's parameter
        names in order (:attr:`PathSpec.params`, which the spec passes); ``None``: the ones its
        envelope bounds, in the order its keys first appear (``envelope_params``)."""
        names = envelope_params(self.envelope) if params is None else params
        return op_spec.serves(self.envelope, names, shape)


@dataclass(frozen=True)
class PathSpec:
    """One algorithmic path: a seed kernel plus everything needed to check and time it.

    Shapes are tuples of the op's shape parameters (:attr:`params`; ``seeds.ops``): trsm's are
    ``(m, n)``, A m×m, B and X m×n, column-major, lda = ldb = m. Every shape set must hold
    shapes of that length, and ``envelope`` must bound every parameter (``p_max``, optional
    ``p_min``).

    The parts, named so that the registry stays cheap to import (:func:`resolve`):
    ``driver_factory`` is a callable ``(cubin, dtype, spec) -> PathDriver`` (:meth:`driver`),
    ``baseline_factory`` a callable ``(dtype) -> Baseline`` (:meth:`baseline`), both
    ``"module:attribute"`` names in the path package; ``reference_check`` names the evaluator's
    check of one output against the problem (``evaluator.checks.accuracy.SOLUTION_CHECKS``: the
    check lives in the evaluator, since ``seeds`` imports nothing of ours).

    Shape buckets: a path without ``buckets`` has one, ``shape_bucket``, serving its whole
    ``envelope`` with the shape sets above. A path with ``buckets`` (``trsm_blocked``) has
    several; its spec's ``shape_bucket`` and shape sets are those of one of them (the registry's
    spec holds the first), and :meth:`for_bucket` gives the spec of another. ``envelope`` stays
    the path's whole envelope in every bucket's spec: where any of its kernels may run (the
    driver's shape check, the champion's signed envelope); routing sends a shape to the bucket
    that serves it (:meth:`bucket_of`). ``verify_kinds``: the kinds of
    ``evaluator.inputs.make_problem`` the full verification adds at every shape with m ≥ 16,
    beside the bounded problems of its seeds.
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
    buckets: tuple[ShapeBucket, ...] = field(default=())
    verify_kinds: tuple[str, ...] = ("growth", "trap")

    def __post_init__(self) -> None:
        """Refuse buckets that overlap, leave the path's envelope, or disagree with the spec's
        own shape fields (which are one bucket's).

        Raises:
            seeds.ops.UnknownOpError: ``op`` is not an op of ``seeds.ops.OPS``.
            ValueError: naming the bucket and what is wrong, or a shape of the wrong length.
        """
        params = self.params
        if missing := [p for p in params if f"{p}_max" not in self.envelope]:
            raise ValueError(f"{self.path_id}: the envelope has no bound {missing[0]}_max")
        shape_sets = (self.quick_shapes, self.verify_shapes, self.timed_shapes,
                      self.held_out_shapes, (self.sanitizer_shape,))  # fmt: skip
        for bucket in self.buckets:
            shape_sets += (bucket.quick_shapes, bucket.verify_shapes, bucket.timed_shapes,
                           bucket.held_out_shapes, (bucket.sanitizer_shape,))  # fmt: skip
        for shapes in shape_sets:
            if wrong := [shape for shape in shapes if len(shape) != len(params)]:
                raise ValueError(
                    f"{self.path_id}: shape {wrong[0]} is not a shape of {self.op} "
                    f"({', '.join(params)})"
                )
        names = [bucket.name for bucket in self.buckets]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.path_id}: bucket names repeat: {names}")
        for bucket in self.buckets:
            try:
                corners = op_spec.corners(bucket.envelope, params)
            except KeyError as missing:
                raise ValueError(
                    f"{self.path_id}: bucket {bucket.name}'s envelope has no bound {missing}"
                ) from None
            if not all(self.serves(*corner) for corner in corners):
                raise ValueError(f"{self.path_id}: bucket {bucket.name} leaves the envelope")
        for i, first in enumerate(self.buckets):
            for second in self.buckets[i + 1 :]:
                if op_spec.overlap(first.envelope, second.envelope, params):
                    raise ValueError(f"{self.path_id}: buckets {first.name}, {second.name} overlap")
        if self.buckets and self._own_bucket() not in self.buckets:
            raise ValueError(
                f"{self.path_id}: shape_bucket {self.shape_bucket!r} and the shape sets are not "
                f"those of one of its buckets ({', '.join(names)})"
            )

    def _own_bucket(self) -> ShapeBucket:
        """The spec's own shape fields as a bucket (its envelope: the bucket's of that name)."""
        envelope = next((b.envelope for b in self.buckets if b.name == self.shape_bucket), {})
        return ShapeBucket(
            self.shape_bucket, envelope, self.quick_shapes, self.verify_shapes,
            self.timed_shapes, self.held_out_shapes, self.sanitizer_shape,
        )  # fmt: skip

    @property
    def params(self) -> tuple[str, ...]:
        """The names of the op's shape parameters, in the order of this path's shapes
        (``seeds.ops``; trsm: ``("m", "n")``).

        Raises:
            seeds.ops.UnknownOpError: ``op`` is not an op of ``seeds.ops.OPS``.
        """
        return ops.get_op(self.op).param_names

    def shape_text(self, shape: Shape) -> str:
        """``shape`` in the op's own terms: ``"m=64 n=64"`` for trsm, ``"n=64 k=6 b2=4 b3=2"``
        for solve_tri, ``"n=1024 bandwidth=32"`` for band_bidiag.

        Raises:
            ValueError: ``shape`` has another length than the op has parameters.
        """
        names = self.params
        if len(shape) != len(names):
            raise ValueError(f"{self.path_id}: shape {tuple(shape)} is not ({', '.join(names)})")
        return " ".join(f"{name}={value}" for name, value in zip(names, shape, strict=True))

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The names of the path's shape buckets, in order (one: ``shape_bucket``)."""
        return tuple(b.name for b in self.buckets) if self.buckets else (self.shape_bucket,)

    def for_bucket(self, name: str) -> PathSpec:
        """This path's spec with the shape bucket ``name``'s name and shape sets (the envelope
        stays the path's); ``self`` when that is its bucket already.

        Raises:
            UnknownBucketError: the path has no bucket of that name (one line naming them).
        """
        if name == self.shape_bucket:
            return self
        bucket = next((b for b in self.buckets if b.name == name), None)
        if bucket is None:
            raise UnknownBucketError(
                f"unknown shape bucket {name!r} of path {self.path_id}; its buckets: "
                f"{', '.join(self.bucket_names)}"
            )
        return dataclasses.replace(
            self,
            shape_bucket=bucket.name,
            quick_shapes=bucket.quick_shapes,
            verify_shapes=bucket.verify_shapes,
            timed_shapes=bucket.timed_shapes,
            held_out_shapes=bucket.held_out_shapes,
            sanitizer_shape=bucket.sanitizer_shape,
        )

    def bucket_of(self, *shape: int) -> str | None:
        """The name of the bucket that serves ``shape`` (trsm: ``bucket_of(m, n)``), or
        ``None`` outside the envelope (a path without buckets: ``shape_bucket`` wherever
        :meth:`serves`)."""
        if not self.serves(*shape):
            return None
        if not self.buckets:
            return self.shape_bucket
        params = self.params
        return next((b.name for b in self.buckets if b.serves(*shape, params=params)), None)

    def seed_source(self) -> str:
        """The seed kernel's CUDA source text."""
        return self.seed_file.read_text()

    def compile_options(self, dtype: str, arch: str) -> list[str]:
        """NVRTC options for ``dtype`` on ``arch`` (e.g. ``"sm_90"``): a cubin for the real arch.

        Raises:
            UnknownDtypeError: ``dtype`` is not one this path supports.
        """
        check_dtype(dtype, self.dtypes, owner=f"path {self.path_id}")
        return [
            f"-arch={arch}",
            "-std=c++17",
            f"-DKERNEVO_DTYPE={DTYPE_CODES[dtype]}",
            *self.extra_options,
        ]

    def serves(self, *shape: int) -> bool:
        """Whether ``shape`` (the op's parameters in order; trsm: ``serves(m, n)``) lies inside
        this path's envelope: ``p_min`` ≤ value ≤ ``p_max`` for every parameter ``p``, a missing
        lower bound being 1 (``trsm_small_z64`` serves m = 64 only). A shape of another length
        is not served."""
        return op_spec.serves(self.envelope, self.params, shape)

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
