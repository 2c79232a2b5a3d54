"""Write a path's seed with some of its tunables moved, for an A/B bench of one option.

    python3 scripts/seed_variant.py --path solve_tri --set ST_RECIP_DIAG=1 ST_STAGE_VEC=4 \\
        --out /tmp/variant.cu

Each ``NAME=VALUE`` must name a tunable of the seed's EVOLVE-BLOCK (``// tune:`` lines) and one
of its declared values: the same moves the offline mutator makes, so the file is a program an
evolution job could reach. Errors are one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seeds.registry import UnknownPathError, get_path
from seeds.tunables import parse_tunables


def variant(source: str, moves: dict[str, str]) -> str:
    """``source`` with each tunable in ``moves`` set to its value.

    Raises:
        ValueError: a name that is not a tunable, or a value outside its declared choices.
    """
    tunables = {t.name: t for t in parse_tunables(source)}
    lines = source.splitlines(keepends=True)
    for name, value in moves.items():
        if name not in tunables:
            raise ValueError(f"{name} is not a tunable of this seed ({', '.join(tunables)})")
        tunable = tunables[name]
        if value not in tunable.choices:
            raise ValueError(f"{name}={value}: the choices are {' '.join(tunable.choices)}")
        lines[tunable.line_no] = tunable.with_value(value) + "\n"
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and write the variant; 0, or 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--set", nargs="+", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        spec = get_path(args.path)
        moves = dict(item.split("=", 1) for item in args.set if "=" in item)
        if len(moves) != len(args.set):
            raise ValueError("each --set item is NAME=VALUE")
        args.out.write_text(variant(spec.seed_source(), moves))
    except (UnknownPathError, ValueError, OSError) as exc:
        print(f"seed_variant: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
