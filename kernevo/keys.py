"""Ed25519 key files: the signing key where promotion runs, the public keys a loader trusts.

The local key pair (the default when nothing is configured) lives in a private folder, by
default ``~/.config/kernevo/keys`` (mode 0700)::

    champion-signing.key   PKCS#8 PEM private key, mode 0600 (written by ``kernevo evolve`` on
                           its first promotion, or by ``kernevo keys generate``)
    champion-signing.pub   SubjectPublicKeyInfo PEM public key

A loader on the same machine trusts ``champion-signing.pub`` only when the file and its folder
belong to the current user and nobody else can write them (otherwise anyone who could replace
the file could sign kernels for this user).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernevo.files import read_regular_file, write_atomically
from kernevo.signature import key_id
from kernevo.text import printable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_KEY_DIR = Path("~/.config/kernevo/keys")
PRIVATE_KEY_FILE = "champion-signing.key"
PUBLIC_KEY_FILE = "champion-signing.pub"
# base64 of 32 raw bytes: 43 characters of the alphabet and one "=" of padding.
_RAW_KEY_B64 = re.compile(r"^[A-Za-z0-9+/]{43}=$")


# A PEM Ed25519 key is under 200 bytes; 64 KiB refuses a wrong file long before it costs memory.
KEY_FILE_MAX_BYTES = 64 * 1024


class KeyFileError(ValueError):
    """A key file or key text that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key and the id (sha256 of the raw public key) the loader knows it by."""

    private_key: Ed25519PrivateKey = field(repr=False)
    key_id: str
    public_raw: bytes = field(repr=False)
    path: Path


def public_raw_of(private_key: Ed25519PrivateKey) -> bytes:
    """The 32 raw bytes of ``private_key``'s public key."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def load_signing_key(path: Path) -> SigningKey:
    """The Ed25519 private key in the PEM file ``path`` (unencrypted PKCS#8).

    Raises:
        KeyFileError: the file cannot be read, is not PEM, or holds another kind of key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path).expanduser()
    shown = printable(str(path), 500)  # names may hold anything
    try:
        data = read_regular_file(path, KEY_FILE_MAX_BYTES, follow_symlinks=True)
    except OSError as error:
        raise KeyFileError(f"signing key {shown}: {error.strerror or error}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise KeyFileError(f"signing key {shown}: not an unencrypted PEM key ({error})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"signing key {shown}: {type(key).__name__}, expected Ed25519")
    raw = public_raw_of(key)
    return SigningKey(private_key=key, key_id=key_id(raw), public_raw=raw, path=path)


def generate_key_pair(folder: Path) -> SigningKey:
    """Create ``folder`` (mode 0700) with a new key pair, or return the pair already there.

    The private key is written under a temporary name and hard-linked to its final name, so of
    two processes creating the pair at once exactly one wins and both end with the same key;
    an existing private key is never overwritten. The public key file is (re)written from the
    private key.

    Raises:
        KeyFileError: an existing private key file that cannot be used.
        OSError: the folder cannot be created or written.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder = Path(folder).expanduser()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_file = folder / PRIVATE_KEY_FILE
    if not private_file.exists():
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=".signing.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(pem)
            # FileExistsError: another process created the pair first; its key is used.
            with contextlib.suppress(FileExistsError):
                os.link(tmp_name, private_file)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
    key = load_signing_key(private_file)
    write_public_key(folder / PUBLIC_KEY_FILE, key.public_raw)
    return key


def write_public_key(path: Path, public_raw: bytes) -> None:
    """Write the public key ``public_raw`` as PEM to ``path`` (mode 0644, atomically)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    pem = Ed25519PublicKey.from_public_bytes(public_raw).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_atomically(path, pem, mode=0o644)


def parse_public_key(text: str) -> bytes:
    """The 32 raw bytes of an Ed25519 public key given as PEM text or as base64 of the raw key.

    Raises:
        KeyFileError: neither form, or a key of another kind.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as error:
            raise KeyFileError(f"not a PEM public key ({error})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"public key is {type(key).__name__}, expected Ed25519")
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError("not a PEM public key nor base64 of 32 raw bytes") from None
    if len(raw) != 32:
        raise KeyFileError(f"base64 key decodes to {len(raw)} bytes, an Ed25519 key has 32")
    return raw


def trusted_keys(entries: Iterable[str]) -> dict[str, bytes]:
    """Key id → raw public key for each entry of ``KERNEVO_TRUSTED_KEYS`` (comma-separated):
    base64 of the 32 raw bytes (44 characters), or else a path to a PEM (or base64) key file.

    Raises:
        KeyFileError: an entry that is neither a key nor a readable key file (one line naming
            the entry as given; :func:`kernevo.trust.policy_from_settings` adds the variable or
            argument it came from).
    """
    found: dict[str, bytes] = {}
    for entry in (text.strip() for text in entries):
        if not entry:
            continue
        try:
            raw = parse_public_key(entry) if _RAW_KEY_B64.match(entry) else None
        except KeyFileError:
            raw = None
        if raw is None:
            path = Path(entry).expanduser()
            # The entry as given, not the Path's text: a Path folds "//" (an URL pasted here,
            # http://127.0.0.1:9, would read http:/127.0.0.1:9); names may hold anything.
            shown = printable(entry, 500)
            try:
                text = read_regular_file(path, KEY_FILE_MAX_BYTES, follow_symlinks=True)
                raw = parse_public_key(text.decode("ascii"))
            except OSError as error:
                reason = error.strerror or str(error)
                raise KeyFileError(f"trusted key {shown}: cannot read ({reason})") from None
            except UnicodeDecodeError as error:
                raise KeyFileError(f"trusted key {shown}: cannot read ({error})") from None
            except KeyFileError as error:
                raise KeyFileError(f"trusted key {shown}: {error}") from None
        found[key_id(raw)] = raw
    return found


def local_public_key(folder: Path) -> tuple[bytes | None, str]:
    """The local public key in ``folder`` if it is safe to trust, with a note saying why not.

    Safe: the folder and ``champion-signing.pub`` are owned by the current user and neither is
    writable by group or others. Returns ``(raw, "")`` or ``(None, reason)``; a missing file is
    ``(None, "no local key at <file>")``.
    """
    folder = Path(folder).expanduser()
    public_file = folder / PUBLIC_KEY_FILE
    try:
        folder_stat = folder.stat()
        file_stat = public_file.stat()
    except FileNotFoundError:
        return None, f"no local key at {public_file}"
    except OSError as error:
        return None, f"local key {public_file} unreadable ({error.strerror or error})"
    for what, info in ((folder, folder_stat), (public_file, file_stat)):
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            return None, f"local key ignored: {what} belongs to another user"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None, f"local key ignored: {what} is writable by others"
    try:
        text = read_regular_file(public_file, KEY_FILE_MAX_BYTES, follow_symlinks=True)
        return parse_public_key(text.decode("ascii")), ""
    except (OSError, UnicodeDecodeError, KeyFileError) as error:
        return None, f"local key {public_file} unusable ({error})"
