"""The options of ``best`` and ``export`` that name a problem of an op, checked against the op
(``seeds.ops``): ``--dtype`` against ``--op``, and ``best``'s shape (``--shape``, ``--m``,
``--n``): its argparse types, its check once ``--op`` is known, and its help texts.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from kernevo.cli.arguments import _DECIMAL, _DIGITS_ONLY, _text
from kernevo.environment import shorten


def _op_has_dtype(args: argparse.Namespace) -> None:
    """Refuse ``--dtype`` when ``--op`` has no kernel in it (``best``, ``export``): a usage
    error (exit 2), one line, as ``evolve --path P --dtype D`` of a dtype P lacks, before the
    GPU, the service or the database is asked (``seeds.spec.MissingDtypeError``'s words)."""
    from seeds.ops import get_op
    from seeds.spec import UnknownDtypeError, check_dtype

    try:
        check_dtype(args.dtype, get_op(args.op).dtypes, owner=f"op {args.op}")
    except UnknownDtypeError as error:
        args.parser.error(f"argument --dtype: {error}")


# A shape parameter's name in ``--shape`` (seeds.ops.spec's rule for parameter names).
_PARAM_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")
# Digits past which a shape value is not converted to an int: it is out of every op's range.
_SHAPE_DIGITS_MAX = 30


def _shape_number(text: str, name: str) -> str:
    """A shape value of the parameter ``name`` as given (``--shape``'s values, ``--m``, ``--n``):
    plain decimal digits (``arguments._DECIMAL``: no space, sign or separator; a minus sign is read,
    so that a negative value is told the range). Its range is the op's, known once ``--op`` is
    (:func:`_shape_problems`), so the text is kept as it is until then.

    Raises:
        argparse.ArgumentTypeError: anything else, in one wording for every way of giving a
            shape value: ``expected an integer value of m, not ' 4096' (decimal digits only)``.
    """
    if not _DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected an integer value of {name}, not {shorten(text)!r} ({_DIGITS_ONLY})"
        )
    return text


def _dimension(name: str) -> Callable[[str], str]:
    """``best --m`` and ``--n``'s argparse type: :func:`_shape_number` of ``name``, the value
    then checked as ``--shape``'s (the same range, the op's, and the same words)."""

    def parse(text: str) -> str:
        return _shape_number(text, name)

    return parse


def _shape_values(text: str) -> dict[str, str]:
    """An argparse type: ``--shape n=64,k=6,b2=4,b3=2``, an op's shape parameters by name, as
    written: no space anywhere (`` m=4096`` and ``m= 4096`` are refused, as ``--m ' 4096'``
    is), each value in plain decimal digits (:func:`_shape_number`). Which op's parameters,
    and each value's range, are checked with ``--op`` (:func:`_best_shape`: the op's own range,
    ``solve_tri takes 1 <= n <= 2147483647``); the text is at most 256 characters
    (``arguments._text``)."""
    values: dict[str, str] = {}
    for item in _text("a shape")(text).split(","):
        name, equals, number = item.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(
                f"expected name=value pairs such as n=64,k=6, not {shorten(text)!r}"
            )
        if not _PARAM_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"expected a parameter name such as n or b2, not {shorten(name)!r} (lowercase "
                "letters and digits only)"
            )
        if name in values:
            raise argparse.ArgumentTypeError(f"{name} given twice in --shape")
        values[name] = _shape_number(number, name)
    return values


def _best_shape(args: argparse.Namespace) -> dict[str, int]:
    """The shape ``kernevo best`` asks for, by parameter name in the op's order: ``--shape``'s
    pairs, with ``--m`` and ``--n`` as the parameters ``m`` and ``n`` (trsm's and
    trsm_batched's), checked against the op alike (:func:`_shape_problems`: the op's ranges,
    ``seeds.ops``; then ``seeds.ops.OpSpec.shape_from`` for the relations between valid
    values). Refused as a usage error (exit 2), every problem in one line, as ``GET
    /v1/kernels/best``'s 422 names them all."""
    from seeds.ops import ShapeError, get_op

    values = dict(args.shape or {})
    for name in ("m", "n"):
        given = getattr(args, name)
        if given is not None:
            if name in values:
                args.parser.error(f"argument --{name}: {name} is also given by --shape")
            values[name] = given
    spec = get_op(args.op)
    usage = f"(--shape {','.join(f'{p}=…' for p in spec.param_names)})"
    problems = _shape_problems(spec, values)
    if problems:
        args.parser.error(f"{'; '.join(problems)} {usage}")
    try:
        shape = spec.shape_from({name: int(text) for name, text in values.items()})
    except ShapeError as error:
        args.parser.error(f"{error} {usage}")
    return dict(zip(spec.param_names, shape, strict=True))


def _shape_problems(spec: Any, values: dict[str, str]) -> list[str]:
    """Every problem of the shape ``values`` (parameter name → its decimal text) for the op
    ``spec`` (a ``seeds.ops.OpSpec``), those ``api.shape_query.op_shape`` finds: each name that
    is not one of the op's parameters (``seeds.ops.not_a_param``'s line, the service's), the
    missing parameters together (``solve_tri needs k
    (…), b2 (…) and b3 (…)``), each value outside its parameter's range (``ShapeParam``'s own
    words; a value of more than 30 digits is told by its length, not converted). Empty when
    every parameter is given and in range (a relation between them is ``shape_from``'s to
    check)."""
    from seeds.ops import not_a_param

    problems = [not_a_param(spec, name) for name in values if name not in spec.param_names]
    missing = [f"{p.name} ({p.meaning})" for p in spec.params if p.name not in values]
    if missing:
        listed = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        problems.append(f"{spec.name} needs {listed}")
    for p in spec.params:
        text = values.get(p.name)
        if text is None:
            continue
        digits = len(text.removeprefix("-"))
        if digits > _SHAPE_DIGITS_MAX:
            problems.append(
                f"{p.name} is out of range: {spec.name} takes {p.low} <= {p.name} <= {p.high} "
                f"({p.meaning}), not a {digits}-digit number"
            )
        elif problem := p.out_of_range(int(text), spec.name):
            problems.append(problem)
    return problems


def _param_ranges(spec: Any) -> str:
    """The op's shape parameters with their ranges, for a help text: ``m,n 1..64, batch
    1..2147483647`` (neighbours of one range together)."""
    groups: list[tuple[list[str], str]] = []
    for p in spec.params:
        bounds = f"{p.low}..{p.high}"
        if groups and groups[-1][1] == bounds:
            groups[-1][0].append(p.name)
        else:
            groups.append(([p.name], bounds))
    return ", ".join(f"{','.join(names)} {bounds}" for names, bounds in groups)


def _shape_help() -> str:
    """``best --shape``'s help: each op's parameters and ranges, from ``seeds.ops``."""
    from seeds.ops import OPS

    ranges = "; ".join(f"{name} {_param_ranges(spec)}" for name, spec in OPS.items())
    return (
        "the op's shape parameters by name, name=value pairs without spaces, each value in "
        f"decimal digits within its range: {ranges} (e.g. --op solve_tri --shape "
        "n=64,k=6,b2=4,b3=2; m and n also as --m, --n)"
    )


def _dimension_help(name: str) -> str:
    """``best --m``/``--n``'s help: the range of ``name`` in each op that has it."""
    from seeds.ops import OPS

    ranges = [
        f"{op} {p.low}..{p.high}" for op, spec in OPS.items() for p in spec.params if p.name == name
    ]
    return f"{name}, as --shape {name}=… (decimal digits): {', '.join(ranges)}"
