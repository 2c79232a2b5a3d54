"""One value per query parameter: ``?dtype=float32&dtype=float64`` is a 422, not the last one;
an integer in decimal digits only: ``?limit=+5``, ``?m=20_49``, ``?m=2049.0`` are 422s.

FastAPI reads a scalar query parameter from the last of its repeated values (Starlette's
``QueryParams[name]``), so a client that built ``dtype`` twice got one of them silently, and a
cache or a proxy may have keyed the request on the other. Every query parameter of this API is
a scalar, so a repeated one is refused for every route, in this one dependency installed on the
application (``api.app``), before the route's own parameters are read.

Pydantic's lax integer parsing (what FastAPI applies to an ``int`` query parameter) takes
``+2049``, ``20_49``, ``2049.0`` and `` 2049 ``, which the CLI refuses (``kernevo.cli``: "decimal
digits only"), so one request spelled two ways could mean one problem to the service and be
refused by the CLI. :data:`DecimalOnly` goes into every integer parameter's ``Annotated`` (the
query's, the shape's of ``api.shape_query``, the paths' ids of ``api.deps``): ASCII decimal
digits and a minus sign at most (so that a negative value is told its range), else a 422 in the
validation-list form, type ``int_parsing`` as pydantic's own, naming the parameter.
"""

from __future__ import annotations

import re
from collections import Counter

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

# An integer in a request: ASCII decimal digits, a minus sign at most (as the CLI's _DECIMAL).
_DECIMAL = re.compile(r"-?[0-9]+")
DIGITS_ONLY_MESSAGE = "Input should be an integer in decimal digits only"


def _decimal_only(value: object) -> object:
    """``value`` unchanged when it is not text or is plain decimal digits (pydantic then reads
    it, its range checked as before).

    Raises:
        PydanticCustomError: ``int_parsing``, :data:`DIGITS_ONLY_MESSAGE`, for any other text
            (``+64``, ``6_4``, ``64.0``, ``1e3``, `` 64``, other scripts' digits).
    """
    if isinstance(value, str) and not _DECIMAL.fullmatch(value):
        raise PydanticCustomError("int_parsing", DIGITS_ONLY_MESSAGE)
    return value


# In an integer parameter's Annotated: ``Annotated[int, DecimalOnly, Query(...)]``.
DecimalOnly = BeforeValidator(_decimal_only)


def refuse_repeated_query(request: Request) -> None:
    """Refuse a request whose query string gives a parameter more than once.

    Raises:
        RequestValidationError: 422 (``api.validation``'s short answer), one error per repeated
            parameter: ``loc`` ``["query", name]``, ``type`` ``repeated_parameter``, ``msg``
            ``given N times; give it once``.
    """
    counts = Counter(name for name, _ in request.query_params.multi_items())
    repeated = [(name, count) for name, count in counts.items() if count > 1]
    if repeated:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"given {count} times; give it once",
                    "type": "repeated_parameter",
                }
                for name, count in repeated
            ]
        )
