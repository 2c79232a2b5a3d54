"""What an operation is: its shape parameters and their valid ranges, its dtypes, how a shape
reads in words, and how the loader calls it (operands, the library fallback, what a failed
kernel call must restore).

An op is above its paths: ``trsm`` is served by three paths (``trsm_small``, ``trsm_small_z64``,
``trsm_blocked``), each a seed kernel with its own envelope and shape buckets, and every path of
an op takes the op's shapes: tuples of its parameters in order (trsm: ``(m, n)``; solve_tri:
``(n, k, b2, b3)``; band_bidiag: ``(n, bandwidth)``). Envelopes and shape buckets bound each
parameter ``p`` by ``p_min`` (optional, 1 when absent) and ``p_max``, so trsm's
``{"m_max": 64, "n_max": 64}`` is what it was.

Nothing here imports CuPy: the loader's call adapter of an op (:class:`OpCall`) is a
``"module:attribute"`` name resolved on first use (:meth:`OpSpec.call`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# cuBLAS, LAPACK and ggml's CUDA back end take dimensions as 32-bit signed integers.
INT32_MAX = 2**31 - 1

# Names a shape parameter may not take: the best-kernel query's own parameters and the keyword
# arguments of ``kernevo.client.fetch_champion``, which receives the shape as keywords.
RESERVED_NAMES = frozenset(
    {"op", "dtype", "gpu", "path", "key", "timeout_s", "transport", "api_url", "shape"}
)
_PARAM_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
# An envelope bound: "<parameter>_min" or "<parameter>_max".
BOUND_KEY = re.compile(r"^([a-z][a-z0-9]{0,15})_(min|max)$")

Shape = tuple[int, ...]


class UnknownOpError(ValueError):
    """An operation name that no op of the registry has."""


class ShapeError(ValueError):
    """A shape the op's interface does not take: a parameter missing, one of another op, a value
    out of its range or breaking a relation between parameters. ``param`` names the parameter
    (``None`` for a relation or a shape of the wrong length), ``kind`` says what is wrong:
    ``missing``, ``extra``, ``range`` or ``relation``."""

    def __init__(self, message: str, *, param: str | None, kind: str) -> None:
        super().__init__(message)
        self.param = param
        self.kind = kind


@dataclass(frozen=True)
class ShapeParam:
    """One shape parameter of an op: its name, the range its interface accepts (``low`` ≤ value
    ≤ ``high``, inclusive) and what it means. Which values a path serves is its envelope's
    business: the range is what the op takes at all (trsm takes m = 0, BLAS's quick return)."""

    name: str
    low: int
    high: int
    meaning: str

    def __post_init__(self) -> None:
        if not _PARAM_NAME.match(self.name) or self.name in RESERVED_NAMES:
            raise ValueError(f"shape parameter name {self.name!r} is not allowed")
        if not 0 <= self.low <= self.high:
            raise ValueError(f"shape parameter {self.name}: range [{self.low}, {self.high}]")

    def out_of_range(self, value: int, op: str) -> str | None:
        """Why ``value`` is outside this parameter's range for the op ``op``, one line; ``None``
        when it is inside."""
        if self.low <= value <= self.high:
            return None
        return (
            f"{self.name}={value} is out of range: {op} takes {self.low} <= {self.name} <= "
            f"{self.high} ({self.meaning})"
        )


@dataclass(frozen=True)
class ShapeRelation:
    """A condition between an op's parameters (band_bidiag: ``bandwidth <= n - 1``): ``text``
    says it, ``holds`` checks it on the values by name."""

    text: str
    holds: Callable[[Mapping[str, int]], bool]


class OpCall(Protocol):
    """How the loader calls one op (``kernevo.load(op, dtype)`` returns a callable taking the
    op's operands). The champion kernel runs through its path driver (:meth:`run`, which knows
    how the op's drivers take the operands); everything else goes to :meth:`fallback`.

    - ``shape(*operands)``: the operands' shape in the op's parameter order, after checking that
      they form a problem of the op (``TypeError``: not device arrays, wrong dtype;
      ``ValueError``: inconsistent dimensions);
    - ``kernel_ready(dtype, device, *operands)``: whether a champion kernel compiled for
      ``dtype`` on device ``device`` may take these arrays as they are (dtype, memory layout,
      device); when not, the call goes to the fallback;
    - ``run(driver, *operands)``: the champion's path driver on the operands, returning what
      the op's callable returns (trsm: ``driver.solve(a, b, None)``, X in ``b``; solve_tri:
      ``driver.solve(a, b, out=b)``; band_bidiag: ``driver.solve(band)``);
    - ``fallback(*operands)``: the library path (the op's ``fallback_library``), returning what
      the op's callable returns;
    - ``snapshot(*operands)``: a copy of what a kernel overwrites (``None``: nothing), taken
      before the first kernel call of a shape; ``restore(snapshot, *operands)`` puts it back
      when that call raised, so the fallback starts from the operands as given.
    """

    def shape(self, *operands: Any) -> Shape: ...

    def kernel_ready(self, dtype: str, device: int, *operands: Any) -> bool: ...

    def run(self, driver: Any, *operands: Any) -> Any: ...

    def fallback(self, *operands: Any) -> Any: ...

    def snapshot(self, *operands: Any) -> Any: ...

    def restore(self, snapshot: Any, *operands: Any) -> None: ...


@dataclass(frozen=True)
class OpSpec:
    """One operation: its shape parameters in order, the dtypes it is defined for, its
    semantics, how a shape reads in words, and the loader's call adapter and fallback.

    ``shape_words`` is a format string over the parameter names (trsm: ``"A {m}x{m}, B
    {m}x{n}"``). ``call`` names the loader's :class:`OpCall` class (``"module:attribute"``, the
    module relative to the seeds package: ``"ops.trsm:TrsmCall"``), constructed with no
    argument. ``fallback_library`` says in words what answers outside the champions (``explain()``
    states it) and ``fallback_route`` is the route the loader's decisions name for it
    (``"cublas"``, ``"lapack"``).
    """

    name: str
    params: tuple[ShapeParam, ...]
    dtypes: tuple[str, ...]
    semantics: str
    shape_words: str
    call_factory: str
    fallback_library: str
    fallback_route: str = "cublas"
    relations: tuple[ShapeRelation, ...] = field(default=())

    def __post_init__(self) -> None:
        names = self.param_names
        if not names or len(set(names)) != len(names):
            raise ValueError(f"op {self.name}: parameters {names} must be distinct and not empty")
        if self.fallback_route == "kernel":
            raise ValueError(f"op {self.name}: the fallback route cannot be 'kernel'")

    @property
    def param_names(self) -> tuple[str, ...]:
        """The names of the shape parameters, in the order of the op's shapes."""
        return tuple(param.name for param in self.params)

    def check_shape(self, shape: Sequence[int]) -> Shape:
        """``shape`` as a tuple, once every value is an int inside its parameter's range and
        every relation holds.

        Raises:
            ShapeError: the first problem, one line naming the parameter and its range.
        """
        if len(shape) != len(self.params):
            raise ShapeError(
                f"{self.name} takes {len(self.params)} shape values "
                f"({', '.join(self.param_names)}); got {len(shape)}",
                param=None,
                kind="relation",
            )
        for param, value in zip(self.params, shape, strict=True):
            if isinstance(value, bool) or not isinstance(value, int):
                message = f"{param.name} must be an integer; got {value!r}"
                raise ShapeError(message, param=param.name, kind="range")
            if problem := param.out_of_range(value, self.name):
                raise ShapeError(problem, param=param.name, kind="range")
        values = dict(zip(self.param_names, shape, strict=True))
        for relation in self.relations:
            if not relation.holds(values):
                raise ShapeError(
                    f"{self.name} needs {relation.text}; got {self.assignments(shape, ', ')}",
                    param=None,
                    kind="relation",
                )
        return tuple(shape)

    def shape_from(self, values: Mapping[str, int | None]) -> Shape:
        """The shape given by name (the best-kernel query's parameters, ``--shape n=64,k=6``),
        checked by :meth:`check_shape`. A name ``values`` holds with a ``None`` value counts as
        absent.

        Raises:
            ShapeError: a parameter of the op missing, a name that is not one of its
                parameters (``extra``), or a value :meth:`check_shape` refuses.
        """
        given = {name: value for name, value in values.items() if value is not None}
        for name in given:
            if name not in self.param_names:
                raise ShapeError(
                    f"{name} is not a shape parameter of {self.name} "
                    f"(its parameters: {', '.join(self.param_names)})",
                    param=name,
                    kind="extra",
                )
        for name in self.param_names:
            if name not in given:
                raise ShapeError(
                    f"{self.name} needs {name} ({self.param(name).meaning})",
                    param=name,
                    kind="missing",
                )
        return self.check_shape([given[name] for name in self.param_names])

    def param(self, name: str) -> ShapeParam:
        """The parameter called ``name``.

        Raises:
            KeyError: the op has no such parameter.
        """
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(name)

    def assignments(self, shape: Sequence[int], separator: str = " ") -> str:
        """``m=48 n=64`` (trsm; ``separator`` between the pairs)."""
        return separator.join(
            f"{name}={value}" for name, value in zip(self.param_names, shape, strict=True)
        )

    def describe(self, shape: Sequence[int]) -> str:
        """The shape in words from :attr:`shape_words` (trsm (48, 64): ``A 48x48, B 48x64``)."""
        return self.shape_words.format(**dict(zip(self.param_names, shape, strict=True)))

    def call(self) -> OpCall:
        """A new instance of the op's loader call adapter (:class:`OpCall`).

        Raises:
            ValueError: ``call_factory`` is not a ``module:attribute`` name.
            ModuleNotFoundError, AttributeError: no such module or attribute.
        """
        return resolve(self.call_factory)()


def resolve(name: str) -> Any:
    """The attribute a ``"module:attribute"`` name gives, the module relative to the seeds
    package (``seeds`` or the loader's vendored ``kernevo._seeds``), imported on first use.

    Raises:
        ValueError: ``name`` is not of the form ``module:attribute``.
        ModuleNotFoundError, AttributeError: no such module or attribute.
    """
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{name!r} is not a 'module:attribute' name")
    seeds_package = __package__.rpartition(".")[0]
    return getattr(importlib.import_module(f"{seeds_package}.{module_name}"), attribute)


# --- envelopes --------------------------------------------------------------------------------


def lower(envelope: Mapping[str, Any], name: str) -> int:
    """The least value of ``name`` an envelope admits: its ``<name>_min``, 1 when absent."""
    low = envelope.get(f"{name}_min")
    return 1 if low is None else int(low)


def serves(envelope: Mapping[str, Any], params: Sequence[str], shape: Sequence[int]) -> bool:
    """Whether ``shape`` (values of ``params`` in order) lies inside ``envelope``: for every
    parameter ``p``, ``p_min`` ≤ value ≤ ``p_max``, a missing ``p_min`` being 1. A missing
    ``p_max`` admits nothing (an envelope must bound every parameter), and so does a shape of
    another length."""
    if len(shape) != len(params):
        return False
    for name, value in zip(params, shape, strict=True):
        high = envelope.get(f"{name}_max")
        if high is None or not lower(envelope, name) <= value <= high:
            return False
    return True


def corners(envelope: Mapping[str, Any], params: Sequence[str]) -> tuple[Shape, Shape]:
    """The least and the largest shape of an envelope (every ``p_min``, every ``p_max``).

    Raises:
        KeyError: a parameter has no ``p_max``.
    """
    low = tuple(lower(envelope, name) for name in params)
    high = tuple(int(envelope[f"{name}_max"]) for name in params)
    return low, high


def overlap(first: Mapping[str, Any], second: Mapping[str, Any], params: Sequence[str]) -> bool:
    """Whether two envelopes share a shape (their ranges intersect in every parameter)."""
    return all(
        max(lower(first, name), lower(second, name))
        <= min(first[f"{name}_max"], second[f"{name}_max"])
        for name in params
    )


def envelope_params(envelope: Mapping[str, Any]) -> tuple[str, ...]:
    """The parameters an envelope bounds, in the order their keys first appear
    (``{"m_min": 128, "m_max": 2048, "n_max": 16384}``: ``("m", "n")``)."""
    found: list[str] = []
    for key in envelope:
        match = BOUND_KEY.match(key) if isinstance(key, str) else None
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return tuple(found)


def describe_envelope(envelope: Mapping[str, Any], params: Sequence[str] | None = None) -> str:
    """An envelope in words, one clause per parameter: ``m <= 64, n <= 64``, or
    ``64 <= m <= 64, n <= 64`` where a lower bound is set (a bound missing or ``None`` is left
    out). ``params``: the op's parameters in order; ``None``: the parameters the envelope's
    bound keys name, in the order they first appear."""
    if params is None:
        params = envelope_params(envelope)
    return ", ".join(
        f"{envelope[f'{name}_min']} <= {name} <= {envelope.get(f'{name}_max')}"
        if envelope.get(f"{name}_min") is not None
        else f"{name} <= {envelope.get(f'{name}_max')}"
        for name in params
    )


def device_index(x: Any) -> int | None:
    """The CUDA device id of an array (``x.device.id`` for CuPy), ``None`` for host arrays."""
    index = getattr(getattr(x, "device", None), "id", None)
    return index if isinstance(index, int) else None


def device_copy(x: Any) -> Any:
    """A copy of the array ``x`` with its strides, on the current stream: one device-to-device
    memcpy when ``x`` is a C- or F-contiguous CuPy array (what a kernel call's snapshot copies),
    ``x.copy(order="K")`` otherwise (other strides; host arrays in tests). ``copy`` may launch
    CuPy's elementwise copy kernel, which NVRTC compiles on its first use in a process whose CuPy
    kernel cache is cold: a cost the loader's first call must not carry."""
    import cupy

    if not isinstance(x, cupy.ndarray) or not (x.flags.c_contiguous or x.flags.f_contiguous):
        return x.copy(order="K")
    out = cupy.empty_like(x, order="K")
    out.data.copy_from_device_async(x.data, x.nbytes)
    return out
