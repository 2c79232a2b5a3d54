"""``kernevo lock``: pin the trusted champions of the loader's disk cache in a lock file."""

from __future__ import annotations

import argparse

from kernevo.cli.errors import CliError


def _cmd_lock(args: argparse.Namespace) -> int:
    """Pin every champion in the loader's disk cache that the trust policy accepts."""

    from kernevo.cache import ChampionCache
    from kernevo.lockfile import lock_key, write_lock_file
    from kernevo.settings import LoaderSettings
    from kernevo.text import printable
    from kernevo.trust import policy_from_settings

    # Pin what this machine's keys accept: an existing lock file (often the very file being
    # rewritten, perhaps missing yet) must neither decide what is new nor be read at all.
    settings = LoaderSettings().model_copy(update={"lock_file": None})
    policy = policy_from_settings(settings)
    root = (args.cache_dir or settings.cache_dir).expanduser()
    if not root.is_dir():  # say so, rather than "no trusted champion in" a folder that is not
        what = "does not exist" if not root.exists() else "is not a folder"
        raise CliError(
            f"disk cache folder {printable(str(root), 300)} {what} (--cache-dir, else "
            "KERNEVO_CACHE_DIR; a loader fills it on its first fetch)"
        )
    cache = ChampionCache(root)
    pinned = []
    for key in cache.stored_keys():
        name = f"{key.gpu}/{key.path}/{key.dtype}/{key.shape_bucket}"
        lookup = cache.load(key)
        champion = lookup.champion
        refusal = None if champion is None else policy.check(champion)
        if champion is None or refusal is not None:
            print(f"skipped {name}: {lookup.detail if refusal is None else refusal.detail}")
            continue
        pinned.append(champion)
        print(f"pinned  {lock_key(champion)}: program {champion.program_id}")
    if not pinned:
        raise CliError(f"no trusted champion in the disk cache {cache.root}; nothing pinned")
    write_lock_file(args.output, pinned)
    print(f"wrote {args.output} ({len(pinned)} champions); loaders use it with KERNEVO_LOCK_FILE")
    return 0
