"""422 answers that say where and what, without echoing the request back.

FastAPI's default handler returns every validation error with its ``input``: a 20 MB body with
one bad field comes back as a 20 MB answer (and a body of many bad items as one error each).
This handler keeps the convention (``{"detail": [{"loc", "msg", "type"}, …]}``) but cuts every
echoed text, keeps ``input`` only as a short text of a scalar, and reports at most
``MAX_ERRORS`` errors. Echoed text is made encodable first: JSON's ``\ud800`` escape gives a lone
surrogate, which UTF-8 cannot encode (the answer would have been a 500 with a traceback).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from kernevo.environment import without_credentials

# Enough to fix a request; a body with thousands of bad items needs the first few only.
MAX_ERRORS = 10
# Characters kept of a location part, a message or an input value (the one-line CLI limit).
ECHO_LIMIT = 60
MESSAGE_LIMIT = 300


def encodable(text: str) -> str:
    """``text`` with every lone surrogate written as its escape (``\\ud800``): what a client's
    text becomes before an answer echoes it, so that encoding the answer as UTF-8 cannot fail."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cut(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters (its length said), then made encodable."""
    cut = text if len(text) <= limit else f"{text[: limit // 2]}…({len(text)} characters)"
    return encodable(cut)


def refuse_control_characters(name: str, value: str | None) -> None:
    """Refuse a query parameter holding a control character (a GPU name ``x\x1b[2J``): 422
    ``{"detail": "<name>: must be printable text (no control characters), not '…'"}``, the
    words ``POST /v1/jobs`` uses for its ``gpu``, rather than letting a normalization rewrite
    it into another name (``x-2j``).

    Raises:
        HTTPException: 422, when ``value`` is not printable.
    """
    if value is None or value.isprintable():
        return
    shown = _cut(value.encode("unicode_escape").decode("ascii"), ECHO_LIMIT)
    raise HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=f"{name}: must be printable text (no control characters), not '{shown}'",
    )


def brief(error: dict[str, Any]) -> dict[str, Any]:
    """One pydantic/FastAPI validation error as ``loc`` (parts cut to ``ECHO_LIMIT``), ``msg``
    (cut to ``MESSAGE_LIMIT``), ``type`` and, for a scalar input only, ``input`` as cut text,
    a URL's credentials in it as ``***`` (``kernevo.environment.without_credentials``: an
    ``llm.base_url`` refused for its port is not echoed with its password)."""
    loc = [part if isinstance(part, int) else _cut(str(part), ECHO_LIMIT) for part in error["loc"]]
    message = str(error.get("msg", ""))
    found = (error.get("ctx") or {}).get("error")
    if error.get("type") == "json_invalid" and isinstance(found, str):
        message = f"{message}: {found}"  # FastAPI's "JSON decode error" alone says not what
    out: dict[str, Any] = {
        "loc": loc,
        "msg": _cut(message, MESSAGE_LIMIT),
        "type": encodable(str(error.get("type", ""))),
    }
    given = error.get("input")
    if isinstance(given, str | int | float | bool):
        out["input"] = _cut(without_credentials(str(given)), ECHO_LIMIT)
    return out


def validation_response(errors: list[dict[str, Any]]) -> JSONResponse:
    """The 422 answer for ``errors`` (pydantic/FastAPI validation errors): each :func:`brief`,
    at most ``MAX_ERRORS`` of them then a ``more`` entry counting the rest."""
    detail = [brief(error) for error in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        detail.append(
            {"loc": [], "msg": f"and {len(errors) - MAX_ERRORS} more errors", "type": "more"}
        )
    return JSONResponse(
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content={"detail": detail}
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_response(list(exc.errors()))


def install_validation_handler(app: FastAPI) -> None:
    """Answer request validation errors with the short 422 of :func:`brief`."""
    app.add_exception_handler(RequestValidationError, _validation_error)
