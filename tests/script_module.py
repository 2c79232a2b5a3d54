"""Import a file of ``scripts/`` (not a package) as a module, for the tests of the scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(file_name: str, module_name: str) -> ModuleType:
    """``scripts/<file_name>`` executed as the module ``module_name``, registered in
    ``sys.modules`` under that name (dataclasses resolve their annotations through it, and a
    forked worker process finds the module's functions by it).

    Raises:
        FileNotFoundError: no such script.
    """
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
