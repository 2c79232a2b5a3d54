"""``limit``/``offset`` query parameters of the listings and the header carrying their total.

Listings answer a JSON array (what ``GET /v1/jobs`` always answered) and put the number of rows
the filters match, over all pages, in ``X-Total-Count``; a client pages with ``offset +=
limit`` until ``offset >= total``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from api.query_params import DecimalOnly

TOTAL_HEADER = "X-Total-Count"
# Rows per page at most: a page of programs without sources is about 0.5 KB a row.
MAX_LIMIT = 1000
# Row ids are 32-bit, so no listing has more rows than this.
MAX_OFFSET = 2**31 - 1

Limit = Annotated[
    int, DecimalOnly, Query(ge=1, le=MAX_LIMIT, description=f"rows per page, 1..{MAX_LIMIT}")
]
Offset = Annotated[
    int, DecimalOnly, Query(ge=0, le=MAX_OFFSET, description="rows skipped before the page")
]


def total_header(what: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entry documenting ``X-Total-Count`` on a listing's 200."""
    return {
        200: {
            "headers": {
                TOTAL_HEADER: {
                    "description": f"number of {what} the filters match, over all pages",
                    "schema": {"type": "integer", "minimum": 0},
                }
            }
        }
    }
