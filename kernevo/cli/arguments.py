"""The argparse types of ``kernevo``'s options: one argument's text checked and turned into its
value, else a one-line usage error (exit 2) before anything runs. Each imports what it checks
against (the job configuration's ranges, the path registry) only when it is called.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

from kernevo.environment import (
    host_problem,
    http_url_problem,
    service_url_problem,
    shorten,
    without_credentials,
)

# An integer on the command line: ASCII decimal digits, a minus sign at most (so that a negative
# value is told the range). Python's int() also takes "+64", "6_4", " 64 " and other scripts'
# digits ("٦٤"): each is refused, one rule for every integer option and --shape value.
_DECIMAL = re.compile(r"-?[0-9]+")
_DIGITS_ONLY = "decimal digits only"


def _decimal(text: str, what: str) -> int:
    """``text`` as an integer when it is plain decimal digits (:data:`_DECIMAL`).

    Raises:
        argparse.ArgumentTypeError: anything else (``+64``, ``6_4``, ``64.0``, ``1e3``).
    """
    if not _DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected {what}, not {shorten(text)!r} ({_DIGITS_ONLY})")
    return int(text)


def _int_in(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] written in plain decimal digits
    (:func:`_decimal`), else a one-line usage error (exit 2).

    A number of more than 30 digits is out of range without being converted (Python refuses
    to convert more than 4300 digits, with a message that is not about the option).
    """

    def parse(text: str) -> int:
        digits = text.removeprefix("-")
        if _DECIMAL.fullmatch(text) and len(digits) > 30:
            raise argparse.ArgumentTypeError(
                f"{what} must be {low}..{high}, not a {len(digits)}-digit number"
            )
        value = _decimal(text, what)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be {low}..{high}, not {value}")
        return value

    return parse


def _in_flight_local(text: str) -> int:
    """``kernevo evolve --in-flight``'s argparse type: 1..4096 (a cluster's range), its error
    naming both ranges, since whether a cluster is given is known only after parsing (the
    local one, JobConfig's, is checked then: ``cluster._cluster_options``)."""
    try:
        return _int_in(1, 4096, "a number of candidates")(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected {_job_range('in_flight')} candidates on the local GPU, or 1..4096 with a "
            f"cluster (--gpus, --scheduler), not {shorten(text)!r}"
        ) from None


def _job_int(name: str, what: str) -> Callable[[str], int]:
    """An argparse type for the job setting ``name``: its range is ``JobConfig``'s."""
    from evolver.job_config import int_range

    return _int_in(*int_range(name), what)


def _job_range(name: str) -> str:
    """``JobConfig``'s range of ``name`` for a help text: ``1..64``."""
    from evolver.job_config import int_range

    low, high = int_range(name)
    return f"{low}..{high}"


_port = _int_in(1, 65535, "a port number")
_count = _int_in(1, 2**31 - 1, "a positive integer")
# Database ids are 32-bit on PostgreSQL.
_job_id = _int_in(1, 2**31 - 1, "a job id")

# Lengths past which an argument is a mistake rather than a value: names (paths, dtypes, GPU
# names, models) are short identifiers; URLs and file paths get Linux's PATH_MAX.
_NAME_MAX = 256
_LONG_MAX = 4096


def _text(what: str, max_len: int = _NAME_MAX, *, file: bool = False) -> Callable[[str], str]:
    """An argparse type: one line of 1..``max_len`` characters, else a usage error; UTF-8
    unless it names a ``file`` (Linux file names are bytes)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"expected {what}, not an empty string")
        if len(text) > max_len:
            raise argparse.ArgumentTypeError(
                f"expected {what} of at most {max_len} characters, not {len(text)}"
            )
        if any(char in text for char in "\n\r\x00"):
            raise argparse.ArgumentTypeError(f"expected {what} on one line, not {text!r}")
        if not file and not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as lone surrogates
                raise argparse.ArgumentTypeError(
                    f"expected {what} in UTF-8, not {shorten(text)!r}"
                ) from None
        return text

    return parse


def _url(text: str) -> str:
    """An argparse type: an ``http://`` or ``https://`` URL with a valid host and port."""
    problem = http_url_problem(_text("a URL", _LONG_MAX)(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _service_url(text: str) -> str:
    """An argparse type for ``--api-url``: the service's root URL (``_url``'s rules, and no
    ``/v1`` path end, query or fragment: ``kernevo.environment.service_url_problem``)."""
    problem = service_url_problem(_text("a URL", _LONG_MAX)(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _host(text: str) -> str:
    """An argparse type for ``--host``: an IP address or a host name; never empty (an empty host
    binds every interface, which must be asked for as ``0.0.0.0`` or ``::``)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "expected an address or host name, not an empty string "
            "(for every interface say 0.0.0.0 or ::)"
        )
    problem = host_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected an IP address or host name: {problem}")
    return text


def _path_id(text: str) -> str:
    """An argparse type: a path id the registry knows (``trsm_small``)."""
    from seeds.registry import UnknownPathError, get_path

    try:
        get_path(_text("a path id")(text))
    except UnknownPathError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _dtype(text: str) -> str:
    """An argparse type: a dtype some path knows; whether the job's path knows it is checked
    with the job (a usage error too, as the value came from here)."""
    from seeds.spec import UnknownDtypeError, check_dtype

    try:
        return check_dtype(_text("a dtype")(text))
    except UnknownDtypeError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# The ops --op takes, for the help text (spelt out: the CLI imports the registry only when an
# op is checked; tests/test_cli_help.py holds it to seeds.ops.OPS).
OP_HELP = "trsm, solve_tri, band_bidiag, trsm_batched"


def _op(text: str) -> str:
    """An argparse type: an operation some path implements (``trsm``)."""
    from seeds.registry import OPS

    if _text("an op")(text) not in OPS:
        raise argparse.ArgumentTypeError(f"unknown op {text!r}; known ops: {', '.join(OPS)}")
    return text


def _env_name(text: str) -> str:
    """An argparse type: the name of an environment variable (letters, digits, ``_``)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) or len(text) > _NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"expected an environment variable name, not {shorten(text)!r}"
        )
    return text


def _resume(text: str) -> str:
    """``--resume``: ``latest`` or a job id."""
    return text if text == "latest" else str(_job_id(text))


def _gpu_list(text: str) -> tuple[int, ...]:
    """An argparse type for ``--gpus``: device indices separated by commas (``0,1``)."""
    parse = _job_int("gpu", "a device index")
    parts = _text("device indices")(text).split(",")
    return tuple(parse(part.strip()) for part in parts)


def _seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: seconds in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, not {shorten(text)!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"seconds must be {low:g}..{high:g}, not {text}")
        return value

    return parse


# A GPU name as the driver reports it (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB MIG
# 1g.5gb``) or its key (``nvidia-h200``, ``seeds.hardware.normalize_gpu_name``): letters and
# digits, with spaces, hyphens, underscores and dots between them. Other punctuation (``bogus
# gpu!``) is a typo, which normalizing would silently turn into another key (``bogus-gpu``).
_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]*")


def _gpu_name(what: str) -> Callable[[str], str]:
    """An argparse type for a GPU name or key (``--gpu`` of ``best`` and ``export``,
    ``--gpu-key``): one line of printable text. A control character is refused, as ``POST
    /v1/jobs`` refuses it, never rewritten (``x\x1b[2J`` would have become ``x-2j``); so is
    any character a GPU name or key does not have (:data:`_GPU_NAME`)."""
    from kernevo.text import control_character_problem

    def parse(text: str) -> str:
        value = _text(what)(text)
        problem = control_character_problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        if not _GPU_NAME.fullmatch(value.strip()):
            raise argparse.ArgumentTypeError(
                f"expected {what} such as nvidia-h200 or 'NVIDIA H200' (letters and digits, "
                f"with spaces, '-', '_' or '.' between them), not {shorten(value)!r}"
            )
        return value

    return parse


def _gpu_key_arg(text: str) -> str:
    """An argparse type for ``--gpu-key``: a GPU name or key, normalized (``nvidia-h200``)."""
    from seeds.hardware import normalize_gpu_name

    try:
        return normalize_gpu_name(_gpu_name("a GPU key")(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _scheduler(text: str) -> str:
    """An argparse type for ``--scheduler``: a Dask address, ``tcp://host:port`` (or
    ``tls://``)."""
    value = _text("a scheduler address")(text)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("tcp", "tls") or not rest or " " in value:
        raise argparse.ArgumentTypeError(
            f"expected a Dask scheduler address such as tcp://host:8786, not {shorten(value)!r}"
        )
    from evolver.cluster import scheduler_host_port

    try:
        scheduler_host_port(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _path_arg(text: str) -> Any:
    """An argparse type: a file or folder path (1..4096 characters), ``~`` expanded."""
    from pathlib import Path

    return Path(_text("a path", _LONG_MAX, file=True)(text)).expanduser()


def _job_file(text: str) -> Any:
    """An argparse type for ``--config``: a path naming a readable regular file. A name that
    is wrong (missing, a folder, unreadable) is a usage error (exit 2), as any bad argument;
    what the file says is checked when it is read, and refused as configuration (exit 2 too:
    ``errors.UsageError``)."""
    path = _path_arg(text)
    shown = shorten(str(path), 300)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such job file: {shown!r}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{shown!r} is not a file (a job YAML file is)")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"job file {shown!r} cannot be read (permission denied)")
    return path


def _database_url(text: str) -> str:
    """An argparse type for ``--database-url``: one line of text naming a database SQLAlchemy
    can open (``db.session.url_problem``), not an in-memory SQLite one
    (``db.session.in_memory_problem``)."""
    from db.session import in_memory_problem, url_problem

    value = _text("a database URL", _LONG_MAX)(text)
    problem = url_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{shorten(without_credentials(value))!r}: {problem}")
    problem = in_memory_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value
