"""One value per query parameter: ``?dtype=float32&dtype=float64`` is a 422, not the last one.

FastAPI reads a scalar query parameter from the last of its repeated values (Starlette's
``QueryParams[name]``), so a client that built ``dtype`` twice got one of them silently, and a
cache or a proxy may have keyed the request on the other. Every query parameter of this API is
a scalar, so a repeated one is refused for every route, in this one dependency installed on the
application (``api.app``), before the route's own parameters are read.
"""

from __future__ import annotations

from collections import Counter

from fastapi import Request
from fastapi.exceptions import RequestValidationError


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
