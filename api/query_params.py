"""One value per query parameter: ``?dtype=float32&dtype=float64`` is a 422, not the last one;
a parameter the route does not take is a 422, not ignored: ``/v1/champions?dtyp=float32``
(a misspelt filter answered with every dtype's champions) names ``dtyp`` and the route's
parameters; an integer in decimal digits only: ``?limit=+5``, ``?m=20_49``, ``?m=2049.0`` are
422s, and a float in decimal notation only: ``?min_score=1_0`` (read as 10) is a 422.

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
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
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

# A number in a request: an optional sign, digits, an optional fraction, an optional exponent.
_DECIMAL_FLOAT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
DECIMAL_NOTATION_MESSAGE = "Input should be a number in decimal notation only (-1.5, 2, 3e-4)"


def _decimal_float_only(value: object) -> object:
    """``value`` unchanged when it is not text or is a number in decimal notation (pydantic
    then reads it; ``allow_inf_nan=False`` still refuses one past the float range, ``1e400``).

    Raises:
        PydanticCustomError: ``float_parsing``, :data:`DECIMAL_NOTATION_MESSAGE`, for any other
            text (``1_0``, `` 1``, ``.5``, ``1.``, ``inf``, ``nan``, ``0x1``, other scripts'
            digits), which pydantic's lax parsing took (``1_0`` as 10) or named unhelpfully.
    """
    if isinstance(value, str) and not _DECIMAL_FLOAT.fullmatch(value):
        raise PydanticCustomError("float_parsing", DECIMAL_NOTATION_MESSAGE)
    return value


# In a float parameter's Annotated: ``Annotated[float, DecimalFloatOnly, Query(...)]``.
DecimalFloatOnly = BeforeValidator(_decimal_float_only)


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


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters ``dependant`` and its dependencies read, by their names in a URL."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def refuse_unknown_query(request: Request) -> None:
    """Refuse a request to a route of the API (one in its OpenAPI document) whose query string
    gives a parameter the route does not read (its own, its dependencies', the shape's of
    ``api.shape_query``). FastAPI ignores such a parameter, so a misspelt filter or one of
    another route widened the answer silently. The web page and the docs pages (outside the
    document) keep their query strings for their scripts.

    Raises:
        RequestValidationError: 422 (``api.validation``'s short answer), one error per unknown
            parameter: ``loc`` ``["query", name]``, ``type`` ``extra_forbidden`` (pydantic's
            name), ``msg`` naming the parameters the route takes.
    """
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not route.include_in_schema:
        return
    known = _query_names(route.dependant)
    unknown = [name for name in dict.fromkeys(request.query_params) if name not in known]
    if unknown:
        takes = f"this route takes {', '.join(sorted(known))}" if known else "this route takes none"
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"unknown query parameter; {takes}",
                    "type": "extra_forbidden",
                }
                for name in unknown
            ]
        )
