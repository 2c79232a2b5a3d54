"""What a path is: its operation, dtypes, shapes, seed kernel and compile options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True)
class PathSpec:
    """One algorithmic path: a seed kernel plus everything needed to check and time it.

    Shapes are ``(m, n)``: A is m×m, B and X are m×n, column-major, lda = ldb = m.
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
    extra_options: tuple[str, ...] = field(default=())

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
        """Whether (m, n) lies inside this path's shape envelope."""
        return 1 <= m <= self.envelope["m_max"] and 1 <= n <= self.envelope["n_max"]
