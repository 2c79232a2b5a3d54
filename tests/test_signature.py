"""The signed payload, Ed25519 sign/verify, key files, the lock file and the option allow-list.

Keys are generated per test (in memory or under tmp_path); nothing touches the home folder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from kernevo.client import ChampionKernel, Envelope
from kernevo.kernel import refused_option
from kernevo.keys import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    KeyFileError,
    generate_key_pair,
    load_signing_key,
    local_public_key,
    parse_public_key,
    public_raw_of,
    trusted_keys,
)
from kernevo.lockfile import LOCK_FORMAT, LockFile, LockFileError, write_lock_file
from kernevo.settings import LoaderSettings
from kernevo.signature import (
    PAYLOAD_FORMAT,
    champion_payload,
    key_id,
    sign,
    signature_valid,
    signed_payload,
)
from kernevo.trust import policy_from_settings

CUBIN = b"\x7fELF cubin"
SOURCE = "// EVOLVE-BLOCK-START\n// EVOLVE-BLOCK-END\n"


def fields(**change: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "path": "trsm_small",
        "dtype": "float64",
        "gpu": "nvidia-h200",
        "shape_bucket": "m64n64",
        "program_id": 17,
        "arch": "sm_90",
        "cubin_sha256": hashlib.sha256(CUBIN).hexdigest(),
        "source_sha256": hashlib.sha256(SOURCE.encode()).hexdigest(),
        "launch": {"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
        "envelope": {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]},
        "compile_options": ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"],
        "nvrtc_version": "13.0",
    }
    return {**base, **change}


def champion(**change: Any) -> ChampionKernel:
    made = ChampionKernel(
        path="trsm_small",
        dtype="float64",
        gpu="nvidia-h200",
        shape_bucket="m64n64",
        program_id=17,
        arch="sm_90",
        nvrtc_version="13.0",
        cubin_sha256=hashlib.sha256(CUBIN).hexdigest(),
        source_sha256=hashlib.sha256(SOURCE.encode()).hexdigest(),
        compile_options=("-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"),
        kernel_name="trsm_small_kernel",
        config_kernel_name="kernevo_launch_config",
        envelope=Envelope({"m_max": 64, "n_max": 64}, ((1, 1), (64, 64))),
        promoted_at=None,
        source=SOURCE,
        cubin=CUBIN,
    )
    return replace(made, **change)


# --- the payload ------------------------------------------------------------------------------


def test_payload_is_canonical_json_of_the_signed_fields() -> None:
    payload = signed_payload(**fields())

    document = json.loads(payload)
    assert document["format"] == PAYLOAD_FORMAT
    assert list(document) == sorted(document)
    assert b" " not in payload
    assert document["envelope"] == {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]}


def test_the_signer_and_the_verifier_compute_the_same_payload() -> None:
    # What promotion signs (the row's fields) and what the loader recomputes (from the bytes).
    assert signed_payload(**fields()) == champion_payload(champion())


def test_fields_the_loader_does_not_use_are_not_signed() -> None:
    extra = fields(
        launch={**fields()["launch"], "note": "x"},
        envelope={**fields()["envelope"], "comment": "y"},
    )
    assert signed_payload(**extra) == signed_payload(**fields())


@pytest.mark.parametrize(
    "change",
    [
        {"path": "trsm_blocked"},
        {"dtype": "float32"},
        {"gpu": "nvidia-h100"},
        {"shape_bucket": "m32n32"},
        {"program_id": 18},
        {"arch": "sm_80"},
        {"cubin_sha256": "0" * 64},
        {"source_sha256": "1" * 64},
        {"launch": {"kernel": "k", "config_kernel": "kernevo_launch_config"}},
        {"envelope": {"m_max": 65, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]}},
        {"envelope": {"m_max": 64, "n_max": 64, "verified_shapes": [[64, 64], [1, 1]]}},
        {"compile_options": ["-arch=sm_90", "-std=c++17"]},
        {"nvrtc_version": None},
    ],
)
def test_every_signed_field_changes_the_payload(change: dict[str, Any]) -> None:
    assert signed_payload(**fields(**change)) != signed_payload(**fields())


def test_the_verifier_hashes_the_bytes_not_the_announced_digest() -> None:
    lying = champion(cubin=b"\x7fELF other")  # cubin_sha256 still names CUBIN
    assert champion_payload(lying) != champion_payload(champion())


@pytest.mark.parametrize("bad", [64.0, "64", True, None])
def test_envelope_bounds_must_be_integers(bad: object) -> None:
    with pytest.raises(TypeError, match="expected an integer"):
        signed_payload(**fields(envelope={"m_max": bad, "n_max": 64}))


# --- Ed25519 ----------------------------------------------------------------------------------


def test_sign_and_verify_roundtrip() -> None:
    key = Ed25519PrivateKey.generate()
    payload = signed_payload(**fields())
    signature = sign(key, payload)

    assert len(base64.b64decode(signature)) == 64
    assert signature_valid(public_raw_of(key), payload, signature)
    assert not signature_valid(public_raw_of(key), payload + b" ", signature)
    other = Ed25519PrivateKey.generate()
    assert not signature_valid(public_raw_of(other), payload, signature)


@pytest.mark.parametrize("signature", ["", "!!!", base64.b64encode(b"short").decode()])
def test_malformed_signatures_are_invalid_not_errors(signature: str) -> None:
    key = Ed25519PrivateKey.generate()
    assert not signature_valid(public_raw_of(key), b"payload", signature)


def test_key_id_is_the_sha256_of_the_raw_public_key() -> None:
    key = Ed25519PrivateKey.generate()
    raw = public_raw_of(key)
    assert len(raw) == 32
    assert key_id(raw) == hashlib.sha256(raw).hexdigest()


# --- key files --------------------------------------------------------------------------------


def test_generate_key_pair_writes_a_private_folder_and_is_idempotent(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    first = generate_key_pair(folder)
    second = generate_key_pair(folder)

    assert first.key_id == second.key_id
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / PRIVATE_KEY_FILE).stat().st_mode) == 0o600
    assert parse_public_key((folder / PUBLIC_KEY_FILE).read_text()) == first.public_raw
    assert sorted(p.name for p in folder.iterdir()) == [PRIVATE_KEY_FILE, PUBLIC_KEY_FILE]
    assert local_public_key(folder) == (first.public_raw, "")


def test_an_existing_private_key_is_never_replaced(tmp_path: Path) -> None:
    key = generate_key_pair(tmp_path)
    (tmp_path / PUBLIC_KEY_FILE).unlink()

    again = generate_key_pair(tmp_path)

    assert again.key_id == key.key_id
    assert (tmp_path / PUBLIC_KEY_FILE).exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a key", "not an unencrypted PEM key"),
        (
            X25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            "X25519PrivateKey, expected Ed25519",
        ),
    ],
)
def test_a_bad_signing_key_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match=message) as info:
        load_signing_key(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_missing_signing_key_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="No such file"):
        load_signing_key(tmp_path / "absent.pem")


def test_trusted_keys_from_base64_and_pem_files(tmp_path: Path) -> None:
    first, second = generate_key_pair(tmp_path / "a"), Ed25519PrivateKey.generate()
    second_raw = public_raw_of(second)
    entries = [str(tmp_path / "a" / PUBLIC_KEY_FILE), base64.b64encode(second_raw).decode()]

    keys = trusted_keys(entries)

    assert keys == {first.key_id: first.public_raw, key_id(second_raw): second_raw}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("/nonexistent/key.pub", "trusted key /nonexistent/key.pub: cannot read"),
        (base64.b64encode(b"x" * 31).decode(), "cannot read"),  # not 32 bytes: read as a path
    ],
)
def test_a_bad_trusted_key_is_one_line(entry: str, message: str) -> None:
    with pytest.raises(KeyFileError, match=message) as info:
        trusted_keys([entry])
    assert "\n" not in str(info.value)


def test_a_trusted_key_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x25519.pub"
    path.write_bytes(
        X25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(KeyFileError, match="expected Ed25519"):
        trusted_keys([str(path)])


@pytest.mark.parametrize(
    ("target", "mode", "reason"),
    [("folder", 0o770, "writable by others"), ("file", 0o646, "writable by others")],
)
def test_a_local_key_others_can_write_is_not_trusted(
    tmp_path: Path, target: str, mode: int, reason: str
) -> None:
    folder = tmp_path / "keys"
    generate_key_pair(folder)
    os.chmod(folder if target == "folder" else folder / PUBLIC_KEY_FILE, mode)

    raw, note = local_public_key(folder)

    assert raw is None and reason in note


def test_no_local_key_says_where_it_looked(tmp_path: Path) -> None:
    assert local_public_key(tmp_path) == (None, f"no local key at {tmp_path / PUBLIC_KEY_FILE}")


# --- the policy from settings -----------------------------------------------------------------


def test_the_local_key_is_trusted_by_default(tmp_path: Path) -> None:
    key = generate_key_pair(tmp_path / "keys")

    policy = policy_from_settings(LoaderSettings(key_dir=tmp_path / "keys"))

    assert dict(policy.keys) == {key.key_id: key.public_raw}


def test_trust_local_key_false_ignores_it(tmp_path: Path) -> None:
    generate_key_pair(tmp_path / "keys")

    policy = policy_from_settings(LoaderSettings(key_dir=tmp_path / "keys", trust_local_key=False))

    assert dict(policy.keys) == {}
    assert policy.no_key_hint == "set KERNEVO_TRUSTED_KEYS"


def test_with_nothing_configured_the_hint_names_the_local_key_file(tmp_path: Path) -> None:
    policy = policy_from_settings(LoaderSettings(key_dir=tmp_path / "none"))

    assert dict(policy.keys) == {}
    assert policy.no_key_hint == (
        f"set KERNEVO_TRUSTED_KEYS; no local key at {tmp_path / 'none' / PUBLIC_KEY_FILE}"
    )


# --- the lock file ----------------------------------------------------------------------------


def test_lock_file_roundtrip(tmp_path: Path) -> None:
    path = write_lock_file(tmp_path / "kernevo.lock", [champion()])

    lock = LockFile.load(path)

    assert json.loads(path.read_text())["format"] == LOCK_FORMAT
    entry = lock.pinned(champion())
    assert entry is not None and entry.cubin_sha256 == hashlib.sha256(CUBIN).hexdigest()
    assert entry.payload_sha256 == hashlib.sha256(champion_payload(champion())).hexdigest()
    assert lock.pinned(champion(dtype="float32")) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not JSON"),
        ('{"format": "other", "champions": {}}', "expected format 'kernevo.lock.v1'"),
        ('{"format": "kernevo.lock.v1", "champions": []}', "'champions' must be an object"),
        (
            '{"format": "kernevo.lock.v1", "champions": {"a/b/c/d": {"cubin_sha256": "x"}}}',
            "a/b/c/d: needs hex cubin_sha256 and payload_sha256",
        ),
    ],
)
def test_a_bad_lock_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "kernevo.lock"
    path.write_text(content)
    with pytest.raises(LockFileError, match=message) as info:
        LockFile.load(path)
    assert "\n" not in str(info.value)


def test_a_missing_lock_file_is_an_error_at_load(tmp_path: Path) -> None:
    with pytest.raises(LockFileError, match="No such file"):
        policy_from_settings(LoaderSettings(lock_file=tmp_path / "absent.lock"))


# --- the NVRTC option allow-list ------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ("-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"),
        ("--gpu-architecture=sm_100a", "-DKERNEVO_DTYPE=1", "-std=c++17"),
        ("-std=c++17", "-DKERNEVO_DTYPE=1"),
    ],
)
def test_the_options_our_specs_produce_are_allowed(options: tuple[str, ...]) -> None:
    assert refused_option(champion(compile_options=options)) is None


@pytest.mark.parametrize(
    "option",
    [
        "-I/etc",
        "-I",
        "--include-path=/etc",
        "-include",
        "--pre-include=/etc/passwd",
        "-DKERNEVO_DTYPE=3",
        "-DKERNEVO_DTYPE=1 -I/etc",
        "-std=c++20",
        "--std=c++17",
        "-arch=sm_90;-I/etc",
        "-arch=compute_90",
        "--use_fast_math",
        "",
    ],
)
def test_anything_else_is_refused_by_name(option: str) -> None:
    options = ("-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1", option)
    assert refused_option(champion(compile_options=options)) == (
        f"compile option not allowed: {option!r}"
    )


# --- kernevo keys -----------------------------------------------------------------------------


def test_kernevo_keys_creates_the_pair_and_prints_the_public_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kernevo.cli import main

    assert main(["keys", "--dir", str(tmp_path / "keys")]) == 0

    out = capsys.readouterr().out
    private = tmp_path / "keys" / PRIVATE_KEY_FILE
    key = load_signing_key(private)
    public = base64.b64encode(key.public_raw).decode()
    # A trial: the first run did not say it had made the pair; a later run only shows it.
    assert out.splitlines()[0] == f"created signing key {private} (id {key.key_id})"
    assert f"KERNEVO_TRUSTED_KEYS={public}" in out
    assert trusted_keys([public]) == {key.key_id: key.public_raw}
    assert main(["keys", "--dir", str(tmp_path / "keys")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"signing key {private} (id {key.key_id})"


def test_envelope_lower_bounds_are_signed_only_where_a_path_has_them():
    """trsm_small_z64 serves m = 64 only: its m_min is covered by the signature, so a service
    cannot widen the envelope; a payload without lower bounds is byte for byte as before."""
    plain = signed_payload(**fields())
    assert b"m_min" not in plain and b"n_min" not in plain
    assert signed_payload(**fields(envelope={**fields()["envelope"], "m_min": None})) == plain
    bounded = fields(envelope={**fields()["envelope"], "m_min": 64})
    assert b'"m_min":64' in signed_payload(**bounded) and signed_payload(**bounded) != plain

    z64 = champion(envelope=Envelope({"m_max": 64, "n_max": 64, "m_min": 64}, ((64, 1), (64, 64))))
    assert champion_payload(z64) == signed_payload(
        **fields(envelope={"m_max": 64, "n_max": 64, "verified_shapes": [[64, 1], [64, 64]],
                           "m_min": 64})
    )  # fmt: skip
    widened = replace(z64, envelope=replace(z64.envelope, bounds={"m_max": 64, "n_max": 64}))
    assert champion_payload(widened) != champion_payload(z64)  # a dropped bound breaks it
    mn = ("m", "n")
    assert z64.envelope.contains((64, 7), mn) and not z64.envelope.contains((63, 7), mn)
    assert champion().envelope.contains((1, 1), mn)
