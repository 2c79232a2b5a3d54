"""``kernevo keys``: the key pair signing champions, created if missing and shown."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernevo.cli.errors import CliError
from kernevo.cli.folders import _file_in_the_way


def _cmd_keys(args: argparse.Namespace) -> int:
    """Create the local signing key pair if missing (the first line then begins ``created``);
    print its id and public key."""
    import base64

    from evolver.settings import EvolverSettings
    from kernevo.keys import (
        PRIVATE_KEY_FILE,
        KeyFileError,
        generate_key_pair,
        load_signing_key,
    )

    settings = EvolverSettings()
    folder = None
    created = False
    try:
        if args.dir is None and settings.signing_key is not None:
            key = load_signing_key(settings.signing_key)
        else:
            folder = args.dir or settings.key_dir
            where = "--dir, else KERNEVO_KEY_DIR"
            if (problem := _file_in_the_way("key folder", folder, where)) is not None:
                raise CliError(problem)
            # Said on the first line: a first run made a pair, a later one shows it (another
            # process creating it at this moment is rare and only makes this say "created").
            created = not (Path(folder).expanduser() / PRIVATE_KEY_FILE).exists()
            key = generate_key_pair(folder)
    except KeyFileError as error:
        raise CliError(str(error)) from None
    except OSError as error:  # the folder cannot be created or written: one line, not errno's
        from kernevo.text import printable

        where = printable(str(error.filename or folder or settings.key_dir), 300)
        raise CliError(
            f"key folder {where} cannot be created or written: {error.strerror or error}"
        ) from None
    public = base64.b64encode(key.public_raw).decode("ascii")
    print(f"{'created ' if created else ''}signing key {key.path} (id {key.key_id})")
    print(f"public key: {public}")
    print(f"loaders elsewhere trust it with KERNEVO_TRUSTED_KEYS={public}")
    if folder is not None:
        _warn_untrusted_local_key(folder)
    return 0


def _warn_untrusted_local_key(folder: Any) -> None:
    """Say on stderr when a loader on this machine would not trust the local public key in
    ``folder`` (``kernevo.keys.local_public_key``: the folder or the file writable by group or
    others, or another user's), so that its champions would all route to cuBLAS."""
    from kernevo.keys import local_public_key
    from kernevo.text import printable

    raw, reason = local_public_key(folder)
    if raw is None:
        print(
            f"kernevo: warning: a loader with KERNEVO_KEY_DIR={printable(str(folder), 300)} "
            f"will not trust this key ({printable(reason, 400)}): make the folder and key "
            "writable only by you (chmod 700 / 644), or give loaders KERNEVO_TRUSTED_KEYS",
            file=sys.stderr,
        )
