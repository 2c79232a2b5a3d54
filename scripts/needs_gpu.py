"""The one-line refusal of a script that needs a GPU, before any long work (fresh-user trial:
``bench_batched_loader.py`` ended in a CUDARuntimeError traceback, ``bench_band_bidiag.py`` ran
for minutes on the CPU without saying it had found no GPU).

The check is the loader's own (``kernevo.device.gpu_info``: the CUDA device's properties, the
reason in ``seeds.hardware.no_gpu_reason``'s words), so a script says what ``kernevo
bench-loader`` says: ``bench_blocked.py needs a GPU: no CUDA GPU found: no NVIDIA driver (…)``.
Imported by the scripts beside it (a script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def exit_without_gpu(script: str, index: int = 0, hint: str = "") -> None:
    """Return when CUDA device ``index`` can be used; else print one line on stderr and exit 1.

    ``script`` is the script's ``__file__`` (its file name starts the line); ``hint``, when
    given, ends it (``bench_band_bidiag.py``: what runs without a GPU).

    Raises:
        SystemExit: 1, no usable device ``index`` (no NVIDIA driver, a driver older than the
            CUDA runtime, no device, an index past the devices).
    """
    from kernevo.device import NoGpuError, gpu_info

    try:
        gpu_info(index)
    except NoGpuError as error:
        print(f"{Path(script).name} needs a GPU: {error}{hint}", file=sys.stderr)
        raise SystemExit(1) from None
