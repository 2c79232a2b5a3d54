"""kernevo's runtime loader: ``kernevo.load(op, dtype)`` returns a callable with the op's
signature that runs the service's verified champion kernel inside its envelope and the op's
library fallback everywhere else (cuBLAS for trsm and solve_tri, LAPACK for band_bidiag).

Importing this package is light (no OpenEvolve, FastAPI, SQLAlchemy; CuPy only when a solver
is used), and its public names are imported on first use (PEP 562): the ``kernevo`` console
script starts from this package too, and until its SIGTERM handler is in place a signal would
end it without a word, so nothing heavy may run before ``kernevo.cli.main``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernevo.decision import Decision
    from kernevo.device import NoGpuError
    from kernevo.solver import OpSolver, TrsmSolver, load

__all__ = ["Decision", "NoGpuError", "OpSolver", "TrsmSolver", "load"]

# Public name → the module that defines it.
_HOMES = {
    "Decision": "kernevo.decision",
    "NoGpuError": "kernevo.device",
    "OpSolver": "kernevo.solver",
    "TrsmSolver": "kernevo.solver",
    "load": "kernevo.solver",
}


def __dir__() -> list[str]:
    """What ``dir(kernevo)`` lists: the public names, the lazy ones too (``load`` before its first
    use), and the module's dunders; not this file's own imports (``Any``, ``importlib``), which
    a user exploring the package took for its API."""
    dunders = {name for name in globals() if name.startswith("__") and name.endswith("__")}
    return sorted(dunders | set(__all__))


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kernevo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
