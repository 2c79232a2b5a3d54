"""The ``argparse.ArgumentParser`` every ``kernevo`` parser is (:class:`_Parser`): one-line usage
errors, arguments that look like negative numbers read as values, an option given twice refused.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from kernevo.cli.errors import EXIT_USAGE, _short_tokens

# An argument that starts with a minus and a digit (``--shapes -1x16``, ``--shape`` aside): no
# kernevo option is spelt so, so it is a value. argparse takes only ``-5`` and ``-1.5`` for
# values and would call ``-1x16`` an unknown option ("expected at least one argument"); as a
# value, the option's type refuses it in its own words (``m must be 1..2147483647, not -1``).
_NEGATIVE_VALUE = re.compile(r"-[0-9].*", re.DOTALL)


# The actions of an option that holds one value, one flag or one list: given twice, argparse
# keeps the last and drops the first silently (``--iterations 1 --iterations 2`` ran 2,
# ``--shapes 16x16 --shapes 32x32`` timed 32x32 only), where a REST query refuses a repeated
# parameter and a job file a duplicate key. ``None`` is add_argument's default.
_STORE_ACTIONS = (None, "store", "store_const", "store_true", "store_false")
# nargs of an option that takes a list (``bench-loader --dtype``, ``--shapes``): its repeat is
# refused too, as ``--gpus 0,1 --gpus 2`` is, its line saying to give all the values at once.
_LIST_NARGS = ("+", "*")


def _given_once(base: type[argparse.Action]) -> type[argparse.Action]:
    """``base`` (a storing action) refusing an option given a second time in one parse, in any
    spelling that reaches the same action (``--opt v``, ``--opt=v``, an abbreviation, ``-o``
    and ``--output``); a value from a ``KERNEVO_*`` default is no repeat (it is not parsed). An
    option taking a list (``nargs`` ``+`` or ``*``) is refused alike: its repeat replaced the
    first list, not added to it.

    The class's call raises ``argparse.ArgumentError`` (``argument --path: given twice; give it
    once``; for a list option ``argument --shapes: given twice; give it once, with all its
    values``) on the repeat: the parsing parser's usage error, exit 2, before anything runs."""

    class GivenOnce(base):  # type: ignore[misc,valid-type]
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            given = getattr(parser, "given", None)
            if self.option_strings and given is not None:
                if self in given:
                    values_too = ", with all its values" if self.nargs in _LIST_NARGS else ""
                    # Raised, not parser.error: argparse names the option ("argument --path: …")
                    # and the subcommand's parser (the one parsing) prints the line.
                    raise argparse.ArgumentError(self, f"given twice; give it once{values_too}")
                given.add(self)
            super().__call__(parser, namespace, values, option_string)

    GivenOnce.__name__ = GivenOnce.__qualname__ = f"GivenOnce{base.__name__}"
    return GivenOnce


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (argparse prints the whole usage by default),
    arguments that start with a minus and a digit read as values (:data:`_NEGATIVE_VALUE`), and
    an option given twice refused (:func:`_given_once`), as every subcommand's parser is one
    of these."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The actions given so far in the current parse (parse_known_args resets it).
        self.given: set[argparse.Action] | None = None
        for name in _STORE_ACTIONS:
            self.register("action", name, _given_once(self._registry_get("action", name)))

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.given = set()
        try:
            parsed = super().parse_known_args(args, namespace)
            self._check_exclusive(self.given)
            return parsed
        finally:
            self.given = None

    def _check_exclusive(self, given: set[argparse.Action]) -> None:
        """Refuse two options of one mutually exclusive group given together, whatever their
        values: argparse counts an option only when its value differs from the default, so
        ``best --gpu x --device 0`` passed (``--device 1`` did not)."""
        for group in self._mutually_exclusive_groups:
            named = [action for action in group._group_actions if action in given]
            if len(named) > 1:
                first, second = (argparse._get_action_name(action) for action in named[:2])
                self.error(f"argument {second}: not allowed with argument {first}")

    def error(self, message: str) -> NoReturn:
        message = _short_tokens(" ".join(message.split()))
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse's own hook (Python 3.11 to 3.13): None means "a value, not an option".
        if _NEGATIVE_VALUE.fullmatch(arg_string):
            return None
        return super()._parse_optional(arg_string)
