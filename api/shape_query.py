"""The shape of a problem in a query: each op's own shape parameters by name
(``?op=trsm&m=48&n=64``, ``?op=solve_tri&n=64&k=6&b2=4&b3=2``,
``?op=band_bidiag&n=4096&bandwidth=32``).

:func:`shape_parameters` is a FastAPI dependency whose signature is built from the op registry
(``seeds.ops``): one optional integer query parameter per shape parameter name of any op, so
the OpenAPI document lists them, a value not in decimal digits only is refused as the CLI
refuses it (``api.query_params.DecimalOnly``: a 422 naming the parameter), and a new op's
parameters appear without a change here. :func:`op_shape` then
checks the given values against the one op asked for and refuses, as FastAPI's own validation
errors (``loc``, ``msg``, ``type``, ``input``; ``api.validation`` shortens them), a parameter of
the op that is missing, one that belongs to another op, a value outside its range, and a
relation between parameters that does not hold.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query
from fastapi.exceptions import RequestValidationError

from api.query_params import DecimalOnly
from seeds import ops
from seeds.ops import OpSpec, ShapeError

ShapeValues = dict[str, int | None]

# The validation error type of each kind of ShapeError (pydantic's names where one fits).
_ERROR_TYPES = {
    "missing": "missing",
    "extra": "extra_forbidden",
    "range": "value_out_of_range",
    "relation": "shape_relation",
}


def _description(name: str) -> str:
    """What the query parameter ``name`` is, per op that has it."""
    uses = [
        f"{spec.name}: {spec.param(name).meaning} ({spec.param(name).low}..{spec.param(name).high})"
        for spec in ops.OPS.values()
        if name in spec.param_names
    ]
    return "shape parameter of " + "; ".join(uses)


def _build() -> Callable[..., ShapeValues]:
    """The dependency, with one keyword-only ``int | None`` query parameter per name of
    ``seeds.ops.param_names()``, in registry order."""

    def shape_parameters(**values: int | None) -> ShapeValues:
        """The shape parameters the query gives, by name (``None``: not given)."""
        return dict(values)

    parameters = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[int | None, DecimalOnly, Query(description=_description(name))],
        )
        for name in ops.param_names()
    ]
    shape_parameters.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=ShapeValues
    )
    return shape_parameters


shape_parameters = _build()


def op_shape(spec: OpSpec, values: ShapeValues) -> tuple[int, ...]:
    """The shape the query gives for ``spec``'s op, in its parameter order.

    Raises:
        RequestValidationError: every problem found, each as ``{"loc": ["query", name], "msg",
            "type", "input"}`` (a relation's ``loc`` is ``["query"]``): a missing parameter
            (``missing``), one of another op (``extra_forbidden``, naming the ops it belongs
            to), a value out of its range (``value_out_of_range``), a relation that does not
            hold (``shape_relation``).
    """
    errors: list[dict[str, Any]] = []
    given = {name: value for name, value in values.items() if value is not None}
    for name, value in given.items():
        if name not in spec.param_names:
            errors.append(_issue(name, ops.not_a_param(spec, name), "extra", value))
    for param in spec.params:
        if param.name not in given:
            message = f"{spec.name} needs {param.name} ({param.meaning})"
            errors.append(_issue(param.name, message, "missing", None))
            continue
        if problem := param.out_of_range(given[param.name], spec.name):
            errors.append(_issue(param.name, problem, "range", given[param.name]))
    if errors:
        raise RequestValidationError(errors)
    try:
        return spec.shape_from(given)
    except ShapeError as error:  # a relation between valid values
        raise RequestValidationError([_issue(None, str(error), error.kind, None)]) from None


def _issue(name: str | None, message: str, kind: str, value: int | None) -> dict[str, Any]:
    """One validation error in FastAPI's form."""
    issue: dict[str, Any] = {
        "loc": ["query"] if name is None else ["query", name],
        "msg": message,
        "type": _ERROR_TYPES[kind],
    }
    if value is not None:
        issue["input"] = value
    return issue
