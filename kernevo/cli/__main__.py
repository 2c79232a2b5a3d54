"""``python3 -m kernevo.cli``: the ``kernevo`` console script without its installed launcher
(scripts/device_env.sh runs the CLI so)."""

import importlib.util
import sys

from kernevo.cli import main

# A spawned child of this process (a process-pool worker of ``kernevo evolve``, the evaluator's
# GPU child) runs the main module again by its spec's name, before anything else, but never a
# module named ``….__main__`` (multiprocessing.spawn._fixup_main_from_name). Named as the
# package, the main module makes the child import ``kernevo.cli``, which sets SIGINT aside in
# such a child, as the console script's children do (they run the script, which imports it).
__spec__ = importlib.util.find_spec("kernevo.cli")

if __name__ == "__main__":
    sys.exit(main())
