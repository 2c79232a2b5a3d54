"""The allow-listed environment of every process that runs a candidate (the GPU worker child).

A process's initial environment stays readable in ``/proc/<pid>/environ`` for its whole life,
whatever it later does to ``os.environ``; a kernel cannot read it, but anything that makes the
worker print or return its environment (a bug of ours, a tool's crash dump) would carry the
job's API keys and tokens. So the child is *started* with only what running CUDA and Python
needs. ``multiprocessing``'s spawn start method copies the parent's ``os.environ`` into the new
process and has no ``env=`` argument, so :func:`allow_listed_environ` swaps ``os.environ`` for
the allow-list around the spawn, under a lock, and puts it back (a few milliseconds, during
which another thread of this process reading ``os.environ`` sees only the allow-list; the
evaluator reads its job settings before it starts a worker).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

# What a CUDA + CuPy + Python child needs, by name. Locale and paths for Python and the loader;
# CUDA_* / NVIDIA_* choose and configure the device; CUPY_CACHE_DIR keeps CuPy's kernel cache
# where the operator put it; KERNEVO_PROFILE_DIR asks the child to profile its tasks.
ALLOWED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
        "PYTHONPATH", "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH",
        "CUDA_MODULE_LOADING", "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE",
        "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUPY_CACHE_DIR",
        "KERNEVO_PROFILE_DIR",
    }
)  # fmt: skip
# Set for the child whatever the parent has: its host work is many NumPy/SciPy reference solves of
# at most 64x64, where BLAS thread pools cost more than they save (issue 6's verification of the
# seed on the H200's 16 cores: complex64 1.82 s with OpenBLAS's default threads, 0.10 s with 1).
WORKER_SETTINGS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Never passed on, even under an allowed name (a credential parked in a variable we allow).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")

_SWAP_LOCK = threading.Lock()


def allowed_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of ``environ`` (default ``os.environ``): names in
    :data:`ALLOWED_NAMES` whose name holds none of the credential words."""
    source = os.environ if environ is None else environ
    return {
        name: value
        for name, value in source.items()
        if name in ALLOWED_NAMES and not any(w in name.upper() for w in _SECRET_WORDS)
    }


def _clear_c_environ() -> None:
    """Empty the C library's ``environ`` too: a library may have put variables there with
    ``setenv`` that ``os.environ`` never saw (pytest's terminal sets COLUMNS and LINES), and a
    spawned child inherits ``environ``, not ``os.environ``. They are not put back afterwards."""
    import ctypes

    # Without clearenv (not glibc/musl), os.environ.clear() has still unset every known name.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).clearenv()


@contextmanager
def allow_listed_environ() -> Iterator[None]:
    """Inside the block ``os.environ`` holds only :func:`allowed_environment` and
    :data:`WORKER_SETTINGS`; a process spawned there starts with that environment. Restored
    afterwards, also on error."""
    with _SWAP_LOCK:
        saved = dict(os.environ)
        allowed = allowed_environment(saved) | WORKER_SETTINGS
        os.environ.clear()
        _clear_c_environ()
        os.environ.update(allowed)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
