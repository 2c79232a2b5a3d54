"""``kernevo --version`` (a trial found it a usage error): the installed distribution's version."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_version_prints_the_installed_distributions_version():
    done = subprocess.run(
        [sys.executable, "-m", "kernevo.cli", "--version"], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"kernevo {version('kernevo-service')}"
