"""The GPU key of a query's ``gpu`` parameter, one way for every route that takes one
(``GET /v1/kernels/best``, ``/v1/manifest``, ``/v1/champions``, ``/v1/jobs``).

A name is normalized by ``seeds.hardware.normalize_gpu_name`` ("NVIDIA H200" → "nvidia-h200",
"nvidia-h200" → itself), and nothing more: "H200" is the key "h200", which no CUDA device's name
gives, but the service does not guess the rest of a name (an H100's key is
"nvidia-h100-80gb-hbm3", not "nvidia-h100"); the best-kernel route's 404 names the keys that do
have champions instead (``api.routes.kernels``).
"""

from __future__ import annotations

from fastapi import HTTPException, status

from api.validation import refuse_control_characters
from seeds.hardware import normalize_gpu_name


def gpu_key_of(name: str) -> str:
    """The GPU key of the ``gpu`` query parameter ``name``.

    Raises:
        HTTPException: 422 with a text ``detail``: ``gpu: must be printable text (no control
            characters), not '\\x01'`` (``api.validation.refuse_control_characters``: refused,
            never rewritten into another key), or ``not a GPU name: '--'`` for a name without
            a letter or digit.
    """
    refuse_control_characters("gpu", name)
    try:
        return normalize_gpu_name(name)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
