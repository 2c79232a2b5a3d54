"""kernevo's runtime loader: ``kernevo.load(op, dtype)`` returns a callable that runs the
service's verified champion kernel inside its envelope and cuBLAS everywhere else.

Importing this package is light (no OpenEvolve, FastAPI, SQLAlchemy; CuPy only when a solver
is used).
"""

from kernevo.device import NoGpuError
from kernevo.resolver import Decision
from kernevo.solver import TrsmSolver, load

__all__ = ["Decision", "NoGpuError", "TrsmSolver", "load"]
