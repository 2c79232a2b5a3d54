"""The path descriptions the loader routes and launches through: ``seeds``' registry, specs
(whose drivers it launches), ops (shape parameters, the call of each op and its library
fallback) and GPU keys, under whichever name this install gives them.

In the repository and in the ``kernevo-service`` distribution they are the top-level ``seeds``
package. The light ``kernevo`` wheel for applications (``loader/pyproject.toml``) vendors the same
files as ``kernevo._seeds``, so an application's site-packages gains no generic top-level name;
``seeds`` uses relative imports only so that both names work. The vendored copy is tried first:
next to the light wheel, a top-level ``seeds`` may be someone else's package.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def _package() -> ModuleType:
    try:
        return importlib.import_module("kernevo._seeds")
    except ModuleNotFoundError as error:
        if error.name != "kernevo._seeds":
            raise  # the vendored copy exists but is broken: say so, don't mask it
        return importlib.import_module("seeds")


package = _package()
registry = importlib.import_module(f"{package.__name__}.registry")
spec = importlib.import_module(f"{package.__name__}.spec")
hardware = importlib.import_module(f"{package.__name__}.hardware")
ops = importlib.import_module(f"{package.__name__}.ops")
ops_spec = importlib.import_module(f"{package.__name__}.ops.spec")
