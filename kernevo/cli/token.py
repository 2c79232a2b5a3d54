"""``kernevo token create|list|revoke``: the API's bearer tokens in the database
(``db.tokens``)."""

from __future__ import annotations

import argparse
import sys

from kernevo.cli.store import _store_url


def _cmd_token(args: argparse.Namespace) -> int:
    """Create, list or revoke the API's bearer tokens in the database (``db.tokens``): a new
    token's secret is printed once, alone on stdout (``T=$(kernevo token create --scope read)``),
    what it is on stderr; the database keeps only its SHA-256."""

    from db import tokens
    from db.session import read_scope, session_scope
    from evolver.store import open_existing_store, open_store

    url = _store_url(args)
    if args.token_command == "list":
        engine = open_existing_store(url)  # read-only: lists nothing it would have to create
        try:
            with read_scope(engine) as s:
                rows = tokens.list_tokens(s, include_revoked=args.all)
                listed = [(t.id, t.scope, t.created_at, t.revoked_at, t.name) for t in rows]
        finally:
            engine.dispose()
        if not listed:
            print("no tokens" if args.all else "no active tokens")
            return 0
        print(f"{'id':>4}  {'scope':<5}  {'created (UTC)':<19}  {'revoked (UTC)':<19}  name")
        for token_id, scope, created, revoked, name in listed:
            when = "-" if revoked is None else f"{revoked:%Y-%m-%d %H:%M:%S}"
            print(f"{token_id:>4}  {scope:<5}  {created:%Y-%m-%d %H:%M:%S}  {when:<19}  {name}")
        return 0
    # Creating or revoking needs the table: migrate an existing kernevo database first, but
    # never create one, nor write the schema into an empty or foreign file (a token in a new
    # database no service reads is a mistake: a mistyped path).
    engine = open_store(url, create=False)
    already = False  # the token revoked was revoked before
    try:
        with session_scope(engine) as s:
            if args.token_command == "create":
                name = args.name or f"{args.scope} token"
                row, secret = tokens.create_token(s, scope=args.scope, name=name)
                token_id, scope, name = row.id, row.scope, row.name
            else:
                # A second revoke keeps the first time, and says so rather than claim one.
                row, already = tokens.revoke_token(s, args.id)
                token_id, name, revoked = row.id, row.name, row.revoked_at
    finally:
        engine.dispose()
    if args.token_command == "create":
        print(secret)
        print(
            f"token {token_id} ({name}, scope {scope}) created: shown only now, the database "
            "keeps its SHA-256; clients send it as 'Authorization: Bearer <token>'",
            file=sys.stderr,
        )
    else:
        when = f"revoked at {revoked:%Y-%m-%d %H:%M:%S} UTC"
        if not already:
            print(f"token {token_id} ({name}) {when}")
        else:
            print(f"token {token_id} ({name}) was already {when}; nothing changed")
    return 0
