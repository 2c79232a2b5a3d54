"""The loader runs only signed champions: every refusal falls back to cuBLAS and says why.

On CPU, with the fake service, real disk cache and fake driver/fallback of
tests/test_loader_resolver.py. Each case asserts which check refused the champion
(``Decision.refusals``), the ``explain()`` line, that cuBLAS answered with the right values, and
that nothing refused reached the disk cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_loader_resolver import (
    CUBIN,
    GPU,
    SIGNER,
    TRUST,
    FakeService,
    Harness,
    certificate_json,
    champion_json,
    problem,
    sign_body,
)

from kernevo.cache import payload_sha256
from kernevo.certificate import CERTIFICATE_V1, REQUIRED_CHECKS
from kernevo.client import ChampionKernel
from kernevo.keys import public_raw_of
from kernevo.lockfile import LockFile, write_lock_file
from kernevo.signature import key_id
from kernevo.trust import TrustPolicy

SIGNER_ID = key_id(public_raw_of(SIGNER))
STRANGER = Ed25519PrivateKey.generate()
STRANGER_ID = key_id(public_raw_of(STRANGER))


def refused_to_cublas(h: Harness, m: int = 16, n: int = 8) -> Any:
    """Solve one problem, check cuBLAS answered it correctly, and return the decision."""
    a, b, x = problem(m, n)
    h.solver(a, b)
    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [] and h.fallback_shapes == [(m, n)]
    decision = h.solver.explain(m, n)
    assert decision.route == "cublas"
    return decision


def checks(decision: Any) -> list[tuple[str, str]]:
    return [(refusal.source, refusal.check) for refusal in decision.refusals]


def cache_is_empty(root: Path) -> bool:
    return not any(path.is_file() for path in root.rglob("*"))


def test_a_signed_champion_is_used(tmp_path: Path) -> None:
    h = Harness(FakeService(), tmp_path)
    a, b, x = problem(48, 33)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [(48, 33)]
    decision = h.solver.explain(48, 33)
    assert (decision.route, decision.reason) == ("kernel", "champion program 17 from service")
    assert decision.refusals == ()
    assert decision.champion is not None and decision.champion.signing_key_id == SIGNER_ID


# --- the service's answer ---------------------------------------------------------------------


def test_an_unsigned_champion_is_refused(tmp_path: Path) -> None:
    h = Harness(FakeService(body=champion_json(signer=None)), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "unsigned")]
    assert decision.reason == (
        "refused champion program 17 from service: unsigned; disk cache: no entry"
    )
    assert cache_is_empty(tmp_path)


def test_a_champion_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    h = Harness(FakeService(body=champion_json(signer=STRANGER)), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "unknown_key")]
    assert decision.reason.startswith(
        f"refused champion program 17 from service: signed by unknown key {STRANGER_ID};"
    )
    assert cache_is_empty(tmp_path)


def _other_cubin(body: dict[str, Any]) -> None:
    cubin = b"\x7fELF a kernel nobody signed"
    body["cubin_b64"] = base64.b64encode(cubin).decode()
    body["cubin_sha256"] = hashlib.sha256(cubin).hexdigest()  # consistent: only the signature


def _other_source(body: dict[str, Any]) -> None:
    body["source"] = body["source"].replace("NB 32", "NB 16")
    body["source_sha256"] = hashlib.sha256(body["source"].encode()).hexdigest()


def _swapped_signature(body: dict[str, Any]) -> None:
    other = champion_json(program_id=18, cubin=b"\x7fELF another signed champion")
    body["signature"] = other["signature"]  # a valid signature, by a trusted key, of another one


TAMPERINGS = {
    "cubin replaced (sha256 updated)": _other_cubin,
    "source replaced (sha256 updated)": _other_source,
    "launch: other kernel": lambda body: body["launch"].update(kernel="evil_kernel"),
    "envelope widened": lambda body: body["envelope"].update(m_max=4096),
    "verified shapes added": lambda body: body["envelope"]["verified_shapes"].append([64, 1]),
    "compile options changed": lambda body: body["compile_options"].append("-std=c++17"),
    "arch changed": lambda body: body.update(arch="sm_80"),
    "nvrtc version changed": lambda body: body.update(nvrtc_version="12.4"),
    "program id changed": lambda body: body.update(program_id=99),
    "signature swapped": _swapped_signature,
    "signature bit flipped": lambda body: body.update(
        signature=base64.b64encode(
            bytes([base64.b64decode(body["signature"])[0] ^ 1])
            + base64.b64decode(body["signature"])[1:]
        ).decode()
    ),
    "signature not base64": lambda body: body.update(signature="not base64!"),
}


@pytest.mark.parametrize("tamper", list(TAMPERINGS.values()), ids=list(TAMPERINGS))
def test_a_tampered_service_response_is_refused(tmp_path: Path, tamper: Any) -> None:
    body = champion_json()
    tamper(body)
    h = Harness(FakeService(body=body), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "bad_signature")]
    program = body["program_id"]
    assert decision.reason.startswith(
        f"refused champion program {program} from service: bad signature (key {SIGNER_ID})"
    )
    assert cache_is_empty(tmp_path)


def test_a_cubin_that_differs_from_its_digest_is_refused(tmp_path: Path) -> None:
    body = champion_json()
    body["cubin_b64"] = base64.b64encode(b"\x7fELF bytes changed in transit").decode()
    h = Harness(FakeService(body=body), tmp_path)

    decision = refused_to_cublas(h)

    assert decision.reason.startswith("cubin digest mismatch: cubin hashes to")
    assert cache_is_empty(tmp_path)


def test_the_signing_key_id_swapped_to_another_trusted_key_is_refused(tmp_path: Path) -> None:
    body = champion_json()
    body["signing_key_id"] = STRANGER_ID
    both = TrustPolicy({**TRUST.keys, STRANGER_ID: public_raw_of(STRANGER)})
    h = Harness(FakeService(body=body), tmp_path, trust=both)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "bad_signature")]


def test_no_trusted_key_refuses_every_champion_and_says_how_to_fix_it(tmp_path: Path) -> None:
    """Check: ``Resolver._decide`` routes to cuBLAS up front when ``TrustPolicy.keys`` is
    empty: the service is never asked (every champion would be refused), the disk cache never
    read, and the reason says how to configure a key."""
    policy = TrustPolicy({}, no_key_hint="set KERNEVO_TRUSTED_KEYS; no local key at /k/x.pub")
    service = FakeService()
    h = Harness(service, tmp_path, trust=policy)

    decision = refused_to_cublas(h)

    assert service.requests == []
    assert checks(decision) == [("settings", "no_trusted_key")]
    assert decision.reason.startswith(
        "no trusted key configured (set KERNEVO_TRUSTED_KEYS; no local key at /k/x.pub); "
        "KERNEVO_TRUSTED_KEYS takes the public keys that sign your champions, comma-separated"
    )


def test_a_refused_service_champion_falls_back_to_a_trusted_cached_one(tmp_path: Path) -> None:
    Harness(FakeService(), tmp_path).solver.explain(8, 8)  # caches signed program 17
    h = Harness(FakeService(body=champion_json(program_id=18, signer=STRANGER)), tmp_path)

    decision = h.solver.explain(8, 8)

    assert decision.route == "kernel"
    assert decision.reason == (
        "champion program 17 from disk cache (refused champion program 18 from service: "
        f"signed by unknown key {STRANGER_ID})"
    )
    assert checks(decision) == [("service", "unknown_key")]


# --- the disk cache, re-verified on every read ----------------------------------------------


def cached_entry(root: Path) -> Path:
    """Fill the cache from a trusted service and return the entry file."""
    Harness(FakeService(), root).solver.explain(8, 8)
    [entry] = root.rglob("m64n64.json")
    return entry


def rewrite_entry(entry: Path, change: Any) -> None:
    """Change the cached payload and re-hash it, as someone who can write the cache would."""
    record = json.loads(entry.read_text())
    change(record["payload"])
    record["payload_sha256"] = payload_sha256(record["payload"])
    entry.write_text(json.dumps(record))


def offline(root: Path, trust: TrustPolicy = TRUST) -> Harness:
    return Harness(FakeService(down=True), root, trust=trust)


def test_a_trusted_cache_entry_is_used_offline(tmp_path: Path) -> None:
    cached_entry(tmp_path)
    h = offline(tmp_path)
    a, b, x = problem(8, 8)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert h.kernel_shapes == [(8, 8)]
    assert h.solver.explain(8, 8).reason.startswith("champion program 17 from disk cache")


@pytest.mark.parametrize(
    "change",
    [
        lambda payload: payload["envelope"].update(m_max=4096),
        lambda payload: payload["launch"].update(config_kernel="other_config"),
        lambda payload: payload["compile_options"].append("-DKERNEVO_DTYPE=1"),
        lambda payload: payload.update(arch="sm_100"),
    ],
    ids=["envelope widened", "launch changed", "options changed", "arch changed"],
)
def test_a_tampered_cache_entry_is_refused(tmp_path: Path, change: Any) -> None:
    rewrite_entry(cached_entry(tmp_path), change)
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "bad_signature")]
    assert decision.reason.startswith("service unreachable: ConnectError")
    assert decision.reason.endswith(
        f"; disk cache: refused champion program 17: bad signature (key {SIGNER_ID})"
    )


def test_a_swapped_cached_cubin_is_refused(tmp_path: Path) -> None:
    entry = cached_entry(tmp_path)
    cubin = b"\x7fELF planted on disk"
    digest = hashlib.sha256(cubin).hexdigest()
    (entry.parent / f"{digest}.cubin").write_bytes(cubin)
    rewrite_entry(entry, lambda payload: payload.update(cubin_sha256=digest))
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "bad_signature")]


def test_a_cubin_changed_on_disk_under_its_name_is_refused(tmp_path: Path) -> None:
    entry = cached_entry(tmp_path)
    digest = hashlib.sha256(CUBIN).hexdigest()
    (entry.parent / f"{digest}.cubin").write_bytes(b"\x7fELF overwritten in place")
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert "disk cache: cubin digest mismatch: cubin hashes to" in decision.reason


def test_an_edited_cache_entry_without_rehash_is_a_miss(tmp_path: Path) -> None:
    entry = cached_entry(tmp_path)
    record = json.loads(entry.read_text())
    record["payload"]["envelope"]["m_max"] = 4096
    entry.write_text(json.dumps(record))
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert decision.reason.endswith("; disk cache: payload sha256 mismatch (torn or tampered)")


def test_a_cache_entry_resigned_by_another_key_is_refused(tmp_path: Path) -> None:
    entry = cached_entry(tmp_path)

    def resign(payload: dict[str, Any]) -> None:
        payload["envelope"]["m_max"] = 4096
        body = {**payload, "cubin_b64": base64.b64encode(CUBIN).decode()}
        payload.update({k: v for k, v in sign_body(body, STRANGER).items() if k.startswith("sign")})

    rewrite_entry(entry, resign)
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "unknown_key")]


def test_an_unsigned_cache_entry_from_an_older_loader_is_refused(tmp_path: Path) -> None:
    rewrite_entry(
        cached_entry(tmp_path), lambda payload: payload.update(signature=None, signing_key_id=None)
    )
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "unsigned")]


def test_a_cache_entry_is_checked_against_the_keys_trusted_now(tmp_path: Path) -> None:
    cached_entry(tmp_path)  # signed by SIGNER, trusted when it was written
    h = offline(tmp_path, trust=TrustPolicy({STRANGER_ID: public_raw_of(STRANGER)}))

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "unknown_key")]


# --- the certificate --------------------------------------------------------------------------


def without_certificate() -> dict[str, Any]:
    """A champion signed as a promotion before certificates signed it: the signature is valid
    (its payload's ``certificate_sha256`` is null) but nothing says what was verified."""
    body = champion_json(signer=None)
    del body["certificate"]
    return sign_body(body, SIGNER)


def v1_certificate() -> dict[str, Any]:
    """A certificate stored by a promotion before issue 6 (format v1: stage names, the two
    unrecorded versions and ``noise_floor_us`` null, no v2 field)."""
    document = certificate_json(
        format="kernevo.certificate.v1",
        checks_passed=[*REQUIRED_CHECKS[CERTIFICATE_V1], "sanitizer_memcheck"],
        sanitizer_version=None,
        nvidia_driver_version=None,
        noise_floor_us=None,
    )
    for name in ("sanitizer_shapes", "input_scales", "noise_floor"):
        del document[name]
    return document


def test_a_signed_champion_without_a_certificate_is_refused(tmp_path: Path) -> None:
    h = Harness(FakeService(body=without_certificate()), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "no_certificate")]
    assert decision.reason == (
        "refused champion program 17 from service: no certificate; disk cache: no entry"
    )
    assert cache_is_empty(tmp_path)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        (certificate_json(format="kernevo.certificate.v4"), "format"),  # a newer evaluator's
        ({"format": "kernevo.certificate.v2", "checks_passed": ["screen"]}, "input_seeds"),
        (certificate_json(checks_passed="everything"), "checks_passed"),
    ],
    ids=["unknown format", "fields missing", "mistyped"],
)
def test_a_signed_certificate_that_does_not_parse_is_refused(
    tmp_path: Path, document: dict[str, Any], where: str
) -> None:
    h = Harness(FakeService(body=champion_json(certificate=document)), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "no_certificate")]
    assert decision.reason.startswith(
        "refused champion program 17 from service: no certificate: unreadable ("
    )
    assert f"first at {where}" in decision.reason
    assert cache_is_empty(tmp_path)


def test_a_cached_champion_without_a_certificate_is_refused(tmp_path: Path) -> None:
    def strip_and_resign(payload: dict[str, Any]) -> None:
        payload.pop("certificate")
        body = {**payload, "cubin_b64": base64.b64encode(CUBIN).decode()}
        payload.update({k: v for k, v in sign_body(body, SIGNER).items() if k.startswith("sign")})

    rewrite_entry(cached_entry(tmp_path), strip_and_resign)  # what an older loader cached
    h = offline(tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("disk cache", "no_certificate")]
    assert decision.reason.endswith("; disk cache: refused champion program 17: no certificate")


def test_a_v1_certificate_of_an_older_promotion_is_accepted(tmp_path: Path) -> None:
    h = Harness(FakeService(body=champion_json(certificate=v1_certificate())), tmp_path)

    decision = h.solver.explain(8, 8)

    assert (decision.route, decision.reason) == ("kernel", "champion program 17 from service")


def _signed_with(**changes: Any) -> ChampionKernel:
    """A champion signed as a promotion signs, its certificate changed by ``changes`` first."""
    body = champion_json(signer=None)
    body["certificate"] = {**body["certificate"], **changes}
    return _champion(sign_body(body, SIGNER))


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"checks_passed": []}, "checks_passed"),
        ({"checks_passed": ["screen", "compile"]}, "top level"),  # the core checks missing
        ({"input_seeds": [True, False]}, "input_seeds.0"),
        ({"verified_shapes": [["64", "64"]]}, "verified_shapes.0.0"),
        ({"verified_shapes": [[-1, 10**30]]}, "verified_shapes.0.0"),
        ({"input_seeds": list(range(2_000))}, "input_seeds"),
        ({"nvrtc_version": "13.0", "format": "kernevo.certificate.v1"}, "top level"),
    ],
    ids=["no checks", "core checks missing", "bool seeds", "string shape", "absurd shape",
         "seeds over the cap", "v1 carrying v2 fields"],
)  # fmt: skip
def test_a_signed_certificate_that_says_nothing_is_no_certificate(
    changes: dict[str, Any], where: str
) -> None:
    refusal = TRUST.check(_signed_with(**changes))

    assert refusal is not None and refusal.check == "no_certificate"
    assert f"first at {where}" in refusal.detail, refusal.detail


def test_a_certificate_holding_nan_is_no_certificate_and_no_crash() -> None:
    """No JSON hashes NaN, so no payload can be computed: refused before the signature (an older
    signer could have signed the ``NaN`` Python writes; the API could not have served it)."""
    body = champion_json()
    body["certificate"] = {**body["certificate"], "noise_floor": float("nan")}

    refusal = TRUST.check(_champion(body))

    assert refusal is not None and refusal.check == "no_certificate"
    assert refusal.detail == "no certificate: unreadable (NaN or Infinity)"


@pytest.mark.parametrize(
    ("changes", "clause"),
    [
        ({"gpu_key": "nvidia-a100"}, "GPU nvidia-a100, champion for nvidia-h200"),
        ({"arch": "sm_80"}, "arch sm_80, champion built for sm_90"),
        ({"nvrtc_version": "12.4"}, "NVRTC 12.4, champion compiled by 13.0"),
        ({"verified_shapes": [[64, 64], [65, 64]]}, "shapes [(65, 64)] outside the envelope"),
        ({"sanitizer_shapes": {"memcheck": [[1, 128]]}}, "shapes [(1, 128)] outside"),
    ],
    ids=["gpu", "arch", "nvrtc", "verified shape", "sanitizer shape"],
)
def test_a_certificate_of_another_kernel_is_a_certificate_mismatch(
    tmp_path: Path, changes: dict[str, Any], clause: str
) -> None:
    body = champion_json(signer=None)
    body["certificate"] = {**body["certificate"], **changes}
    h = Harness(FakeService(body=sign_body(body, SIGNER)), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "certificate_mismatch")]
    assert "certificate of another kernel: " in decision.reason and clause in decision.reason
    assert cache_is_empty(tmp_path)


def test_the_lock_file_commands_skip_a_champion_without_a_certificate(tmp_path: Path) -> None:
    champion = ChampionKernel.from_payload(without_certificate(), CUBIN)

    refusal = TRUST.check(champion)

    assert refusal is not None and refusal.check == "no_certificate"


# --- the lock file ----------------------------------------------------------------------------


def _champion(body: dict[str, Any]) -> ChampionKernel:
    return ChampionKernel.from_payload(body, base64.b64decode(body["cubin_b64"]))


def test_a_champion_pinned_by_the_lock_file_is_used(tmp_path: Path) -> None:
    lock = LockFile.load(write_lock_file(tmp_path / "kernevo.lock", [_champion(champion_json())]))
    h = Harness(FakeService(), tmp_path / "cache", trust=TrustPolicy(TRUST.keys, lock))

    assert h.solver.explain(8, 8).route == "kernel"


def test_a_key_missing_from_the_lock_file_is_refused(tmp_path: Path) -> None:
    other = champion_json(dtype="float32")
    lock = LockFile.load(write_lock_file(tmp_path / "kernevo.lock", [_champion(other)]))
    h = Harness(FakeService(), tmp_path / "cache", trust=TrustPolicy(TRUST.keys, lock))

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "not_in_lock_file")]
    assert decision.reason.startswith(
        f"refused champion program 17 from service: not in lock file {tmp_path / 'kernevo.lock'}"
    )


@pytest.mark.parametrize(
    ("served", "digest"),
    [
        (champion_json(program_id=18, cubin=b"\x7fELF a newer signed champion"), "cubin_sha256"),
        (champion_json(m_max=128), "payload_sha256"),  # same cubin, another envelope
    ],
    ids=["newer cubin", "same cubin, other envelope"],
)
def test_a_champion_other_than_the_pinned_one_is_refused(
    tmp_path: Path, served: dict[str, Any], digest: str
) -> None:
    lock = LockFile.load(write_lock_file(tmp_path / "kernevo.lock", [_champion(champion_json())]))
    h = Harness(FakeService(body=served), tmp_path / "cache", trust=TrustPolicy(TRUST.keys, lock))

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "lock_digest_differs")]
    assert f"lock file digest differs: {digest}" in decision.reason


# --- NVRTC options before a recompile ---------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [
        "-I/etc",
        "--include-path=/home",
        "-include",
        "--pre-include=/etc/passwd",
        "-DKERNEVO_DTYPE=0",  # float32's code on a float64 champion
        "-DNB=128",
        "--use_fast_math",
        "-default-device",
        "-arch=compute_90",
    ],
)
def test_an_option_outside_the_allow_list_is_refused_before_recompiling(
    tmp_path: Path, option: str
) -> None:
    body = champion_json(arch="sm_80")
    body["compile_options"].append(option)
    h = Harness(FakeService(body=sign_body(body, SIGNER)), tmp_path)

    decision = refused_to_cublas(h)

    assert checks(decision) == [("service", "compile_option")]
    assert decision.reason.startswith(
        f"refused champion program 17 from service: compile option not allowed: {option!r}"
    )
    assert h.compiled == []  # NVRTC never saw it
    assert cache_is_empty(tmp_path)


def test_options_are_not_judged_when_the_verified_cubin_loads_as_is(tmp_path: Path) -> None:
    body = champion_json()
    body["compile_options"].append("--use_fast_math")
    h = Harness(FakeService(body=sign_body(body, SIGNER)), tmp_path)

    assert h.solver.explain(8, 8).route == "kernel"
    assert h.compiled == []


def test_a_signed_champion_for_another_arch_is_recompiled_with_allowed_options(
    tmp_path: Path,
) -> None:
    h = Harness(FakeService(body=champion_json(arch="sm_80")), tmp_path, gpu=GPU)
    a, b, x = problem(9, 9)

    h.solver(a, b)

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert [options for _, options, _ in h.compiled] == [
        ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"]
    ]
