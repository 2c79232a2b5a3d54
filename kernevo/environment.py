"""Every ``KERNEVO_*`` environment variable in one catalogue, and the start-up check against it.

Each layer keeps its own pydantic-settings class (``db.settings``, ``api.settings``,
``evolver.settings``, ``kernevo.settings``), so the layers stay separable; this module only
*names* what they read, plus the variables read outside those classes (the evaluator's job
context, the compile cache, the CLI's debug switch, the test suite's, docker compose's).
It imports nothing but the standard library, so the loader can use it without OpenEvolve,
FastAPI or SQLAlchemy; ``difflib`` and ``ipaddress`` only when a check needs them, so that the
warm start (:mod:`kernevo.warm_start`, which reads :data:`BOOLEAN_TRUE` here) pays for neither.

At start (``kernevo`` main, ``kernevo serve``, the loader's first settings) the environment is
checked: a ``KERNEVO_*`` name not in the catalogue (a typo silently falls back to a default:
``KERNEVO_GPUS=1`` evolves a night on GPU 0) and an empty value (unset it to get the default)
are problems. The CLI refuses them (exit 2, a usage error); the loader, inside someone's
application, logs each once as a warning on the ``"kernevo"`` logger.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

PREFIX = "KERNEVO_"

# A name that only looks like ours (``KERNVEO_GPU``, ``KERNEV_GPU``) counts as a misspelling when
# it starts like ``KERN`` and is this close to a known name (difflib ratio). 0.9 keeps
# ``KERNEL_GPU`` (0.86 to ``KERNEVO_GPU``) out and catches one swapped or missing letter.
_MISSPELT_PREFIX_CUTOFF = 0.9
# The closest known name suggested for an unknown one (difflib's own default cutoff).
_SUGGEST_CUTOFF = 0.6
# Values and names echoed in messages are cut to this many characters: a one-line error must
# stay one readable line even for a megabyte of input.
_ECHO_LIMIT = 60


@dataclass(frozen=True)
class Variable:
    """One environment variable: who reads it, what it means, its default, what it expects."""

    name: str
    read_by: str
    meaning: str
    default: str
    expects: str
    secret: bool = False
    boolean: bool = False


def _v(name: str, read_by: str, meaning: str, default: str, expects: str, **kw: Any) -> Variable:
    return Variable(PREFIX + name, read_by, meaning, default, expects, **kw)


# The spellings of a boolean variable, any case: pydantic's own (the settings classes parse
# KERNEVO_TRUST_LOCAL_KEY and the other booleans with it), so that the variables read outside
# them (KERNEVO_WARM_START, KERNEVO_DEBUG: parse_boolean) take exactly the same values.
BOOLEAN_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
BOOLEAN_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
BOOLEAN_EXPECTS = "true or false (also 1/0, yes/no, on/off, t/f, y/n; any case)"

# The shortest configured token accepted (KERNEVO_API_TOKEN): 32 characters of
# ``secrets.token_urlsafe(32)`` carry 192 bits, far past guessing; a one-letter token would be
# one anyone could guess. The service (api/settings.py) and the loader (kernevo/settings.py)
# apply the same rule (token_problem).
MIN_TOKEN_LENGTH = 32

_LOADER = "kernevo/settings.py"
_EVOLVER = "evolver/settings.py"
_EVAL_CONTEXT = "evaluator/openevolve_entry.py (set by `kernevo evolve`)"

CATALOGUE: tuple[Variable, ...] = (
    _v(
        "DATABASE_URL",
        "db/settings.py",
        "SQLAlchemy URL of the lineage store",
        "sqlite:///./kernevo.db",
        "a SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db",
    ),
    _v(
        "API_TOKEN",
        "api/settings.py",
        "a configured API token with the write scope, beside those `kernevo token create` "
        "makes; clients (`kernevo jobs --api-url`, `kernevo cancel --api-url`, the loader) send it",
        "unset: only the database's tokens",
        f"a token string of at least {MIN_TOKEN_LENGTH} characters",
        secret=True,
    ),
    _v(
        "API_KERNELS_REQUIRE_READ",
        "api/settings.py",
        "`true`: the best-kernel, manifest and champions endpoints need a read token like "
        "every other /v1 read",
        "false: open",
        BOOLEAN_EXPECTS,
        boolean=True,
    ),
    _v(
        "API_URL",
        _LOADER,
        "the service the loader and `kernevo best` ask",
        "http://127.0.0.1:8000",
        "an http:// or https:// URL",
    ),
    _v(
        "CACHE_DIR",
        _LOADER,
        "the loader's disk cache of champions",
        "~/.cache/kernevo",
        "a folder path",
    ),
    _v(
        "CACHE_MAX_AGE_S",
        _LOADER,
        "a disk-cache champion written less than this many seconds ago (and passing the trust "
        "checks) is used without asking the service; 0: always ask the service first",
        "3600",
        "seconds, a number >= 0 and <= 604800",
    ),
    _v(
        "REQUEST_TIMEOUT_S",
        _LOADER,
        "the loader's timeout per service request, seconds",
        "2",
        "seconds, a number > 0 and <= 600",
    ),
    _v(
        "TRUSTED_KEYS",
        _LOADER,
        "Ed25519 public keys the loader accepts champion signatures from, comma-separated "
        "(base64 of the 32 raw bytes, or a PEM file path)",
        "unset: only the local key",
        "comma-separated base64 keys or PEM file paths",
    ),
    _v(
        "KEY_DIR",
        f"{_LOADER}, {_EVOLVER}",
        "the local signing key pair `kernevo evolve` creates and the loader may trust",
        "~/.config/kernevo/keys",
        "a folder path",
    ),
    _v(
        "TRUST_LOCAL_KEY",
        _LOADER,
        "trust the local public key when only this user can write it",
        "true",
        BOOLEAN_EXPECTS,
        boolean=True,
    ),
    _v(
        "LOCK_FILE",
        _LOADER,
        "JSON file pinning the champion digests the loader may use",
        "unset: any signed champion",
        "a file path",
    ),
    _v(
        "REQUIRE_SAME_TOOLKIT",
        _LOADER,
        "route to cuBLAS a champion verified under another NVIDIA driver, CUDA driver API or "
        "NVRTC version (or an unknown one) instead of serving it with that stated",
        "false",
        BOOLEAN_EXPECTS,
        boolean=True,
    ),
    _v(
        "WARM_START",
        "kernevo/warm_start.py",
        "`0`: the loader neither reads nor writes its warm-start memo (decisions an earlier "
        "process made the full way, replayed without re-running the trust checks while their "
        "inputs are unchanged)",
        "true",
        BOOLEAN_EXPECTS,
        boolean=True,
    ),
    _v(
        "LLM_BASE_URL",
        _EVOLVER,
        "OpenAI-compatible endpoint, e.g. http://localhost:11434/v1",
        "unset: offline mutator",
        "an http:// or https:// URL",
    ),
    _v("LLM_MODEL", _EVOLVER, "model name at that endpoint", "—", "a model name"),
    _v(
        "LLM_API_KEY_ENV",
        _EVOLVER,
        "name of the variable that holds the LLM API key",
        "—",
        "an environment variable name (letters, digits, _)",
    ),
    _v(
        "LLM_ALLOWED_BASE_URLS",
        _EVOLVER,
        "endpoints a job queued through `POST /v1/jobs` may name as `llm.base_url`, besides "
        "KERNEVO_LLM_BASE_URL (the worker sends its key only to these)",
        "unset: only KERNEVO_LLM_BASE_URL",
        "comma-separated http:// or https:// URLs",
    ),
    _v(
        "GPU",
        _EVOLVER,
        "device index the job evaluates on",
        "0",
        "a CUDA device index 0..1023",
    ),
    _v(
        "WORK_DIR",
        _EVOLVER,
        "checkpoints, OpenEvolve output, evaluation reports",
        "./runs",
        "a folder path",
    ),
    _v(
        "SIGNING_KEY",
        _EVOLVER,
        "Ed25519 private key (PEM) that signs promoted champions",
        "unset: the local key pair in KERNEVO_KEY_DIR, created on first promotion",
        "a PEM file path",
    ),
    _v(
        "COMPILE_CACHE",
        "evaluator/compile.py",
        "the evaluator's NVRTC cubin cache",
        "~/.cache/kernevo/cubin",
        "a folder path",
    ),
    _v("EVAL_PATH", _EVAL_CONTEXT, "job context: the path evaluated", "—", "a path id"),
    _v(
        "EVAL_BUCKET",
        _EVAL_CONTEXT,
        "job context: the path's shape bucket evaluated",
        "the path's first",
        "a bucket name",
    ),
    _v("EVAL_DTYPE", _EVAL_CONTEXT, "job context: the dtype evaluated", "—", "a dtype"),
    _v(
        "EVAL_GPU",
        _EVAL_CONTEXT,
        "job context: device index, or `none` (compile only)",
        "0",
        "a device index or none",
    ),
    _v("EVAL_ARCH", _EVAL_CONTEXT, "job context: the arch compiled for", "sm_90", "sm_XX"),
    _v(
        "EVAL_SCHEDULER",
        "evaluator/openevolve_entry.py, evaluator/dask_client.py (set by `kernevo evolve`)",
        "job context: the Dask scheduler evaluations go to (--scheduler, --gpus)",
        "unset: the local GPU worker",
        "tcp://host:port",
    ),
    _v(
        "EVAL_GPU_KEY",
        "evaluator/dask_client.py (set by `kernevo evolve`)",
        "job context: the GPU key whose Dask workers evaluate the job",
        "—",
        "a GPU key",
    ),
    _v(
        "EVAL_WAIT_S",
        "evaluator/dask_client.py (set by `kernevo evolve`)",
        "job context: the longest one evaluation waits for the Dask cluster",
        "800",
        "seconds",
    ),
    _v(
        "REPORT_DIR",
        _EVAL_CONTEXT,
        "job context: where full evaluation reports go",
        "—",
        "a folder path",
    ),
    _v(
        "PROFILE_DIR",
        "evaluator/worker.py",
        "a folder: each GPU worker task (check, time, champion) is run under cProfile and its "
        "profile written there (scripts/task_profile.py sums them); for developers",
        "—",
        "a folder path",
    ),
    _v(
        "JOB_PID",
        "evolver/openevolve_host.py (set by `kernevo evolve`)",
        "job context: the job's process id, which its pool workers watch to die with it",
        "—",
        "a process id",
    ),
    _v(
        "OPENEVOLVE_LOG",
        "evolver/openevolve_host.py (set by `kernevo evolve`)",
        "job context: the job's OpenEvolve log file, which its pool workers append their log "
        "records to (none reach the user's terminal)",
        "—",
        "a file path",
    ),
    _v(
        "DEBUG",
        "kernevo/cli/__init__.py",
        "true: the CLI prints the traceback after its one-line error",
        "false",
        BOOLEAN_EXPECTS,
        boolean=True,
    ),
    _v(
        "TEST_POSTGRES_URL",
        "tests/conftest.py",
        "PostgreSQL the tests use",
        "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        "a SQLAlchemy URL",
    ),
    _v(
        "REQUIRE_POSTGRES",
        "tests/conftest.py",
        "`1`: an unreachable PostgreSQL fails the tests instead of skipping them",
        "unset",
        "1",
    ),
    _v(
        "DB_PASSWORD",
        "docker-compose.yml",
        "PostgreSQL password of the compose stack",
        "kernevo",
        "a password",
        secret=True,
    ),
)

NAMES: frozenset[str] = frozenset(v.name for v in CATALOGUE)
_BY_NAME: dict[str, Variable] = {v.name: v for v in CATALOGUE}
_KEY_ENV = PREFIX + "LLM_API_KEY_ENV"
# Names this process accepts beyond the catalogue (see ``accept``).
_accepted: set[str] = set()


def accept(*names: str | None) -> None:
    """Accept ``names`` (any case) in every later check of this process: the variable a command
    line names as holding the LLM API key (``--llm-api-key-env``) may carry the prefix."""
    _accepted.update(name.upper() for name in names if name)


def variable(name: str) -> Variable | None:
    """The catalogue entry for ``name`` (any case, as pydantic-settings matches), or ``None``."""
    return _BY_NAME.get(name.upper())


def shorten(text: str, limit: int = _ECHO_LIMIT) -> str:
    """``text`` cut to ``limit`` characters with the original length said, for echoing input."""
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}…({len(text)} characters)"


def echo(name: str, value: str) -> str:
    """``NAME='value'`` for a message: the value cut short, never shown for a secret, and the
    credentials of a URL's user part hidden (:func:`without_credentials`)."""
    entry = variable(name)
    if entry is not None and entry.secret:
        return f"{name} (value hidden)"
    return f"{name}={shorten(without_credentials(value))!r}"


# URLs and paths past Linux's PATH_MAX are a mistake, not a value.
URL_MAX = 4096
# RFC 1123 host names: labels of 1..63 letters, digits and inner hyphens; 253 characters in all.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """Why ``host`` is neither an IP address nor an RFC 1123 host name, or ``None`` if it is."""
    import ipaddress

    if not host:
        return "empty host"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host.removesuffix(".")
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        return f"not an IP address or host name: {shorten(host)!r}"
    return None


def without_credentials(url: str) -> str:
    """``url`` for a message: a password in its user part shown as ``***``, and a user part
    without a password (often a token: ``https://TOKEN@host``) as ``***`` altogether, as
    database URLs are shown. Text that is not a URL with a user part is returned as it is."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:  # not even split (a broken IPv6 host): hide whatever precedes an @
        return re.sub(r"//[^/?#]*@", "//***@", url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an ``http://`` or ``https://`` URL with a valid host and port that an
    HTTP client can open, or ``None`` when it is (httpx raises ``InvalidURL``, not a transport
    error, for the others)."""
    from urllib.parse import urlsplit

    if len(url) > URL_MAX:
        return f"a URL of at most {URL_MAX} characters, not {len(url)}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parses the port: ValueError when it is not a number 0..65535)
    except ValueError as error:
        return f"not a URL: {shorten(without_credentials(url))!r} ({error})"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"not an http:// or https:// URL: {shorten(without_credentials(url))!r}"
    if any(char.isspace() for char in url):
        return f"a URL without spaces, not {shorten(without_credentials(url))!r}"
    return host_problem(parts.hostname)


def service_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the kernevo service's base URL (``KERNEVO_API_URL``, ``--api-url``),
    or ``None``: :func:`http_url_problem`'s reasons, a query or fragment, or a path with a
    ``/v1`` segment (any case: ``/V1``, ``/v1/jobs``). The clients append ``/v1/kernels/best``
    and the like, so ``http://host:8000/v1``
    (an OpenAI-style base URL, as ``KERNEVO_LLM_BASE_URL`` takes) asked for ``/v1/v1/…`` and got
    a bare 404. A service behind a proxy prefix (``https://host/kernevo``) stays valid."""
    from urllib.parse import urlsplit, urlunsplit

    problem = http_url_problem(url)
    if problem is not None:
        return problem
    parts = urlsplit(url)
    shown = shorten(without_credentials(url))
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return f"a service URL without a query or fragment, not {shown!r}"
    # A /v1 segment anywhere (any case: /V1, /v1/jobs): the routes are under the root's /v1.
    api = re.search(r"/v1(?=/|$)", parts.path, re.IGNORECASE)
    if api is not None:
        prefix = parts.path[: api.start()]
        root = without_credentials(urlunsplit(parts._replace(path=prefix)))
        return f"the service's root URL without /v1, {shorten(root)!r} (its /v1/… routes are added)"
    return None


def service_id(url: str) -> str:
    """The service ``url`` names, as the loader's disk cache records where an answer came from:
    the URL without its user part (credentials, or a token given as ``https://TOKEN@host``,
    are never written to disk) and without a trailing ``/``. Two URLs with the same id name the
    same service; text that is not a URL is returned stripped of a trailing ``/`` only."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/?#]*@", "//", url).rstrip("/")
    hostport = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=hostport)).rstrip("/")


def token_problem(token: str) -> str | None:
    """Why ``token`` (``KERNEVO_API_TOKEN``) is refused, or ``None``: shorter than
    :data:`MIN_TOKEN_LENGTH` characters. The message never quotes the token."""
    if len(token) >= MIN_TOKEN_LENGTH:
        return None
    return (
        f"a configured token must be at least {MIN_TOKEN_LENGTH} characters, not {len(token)} "
        "(make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
    )


def boolean_value(value: str) -> bool | None:
    """``value`` of a boolean variable as a bool (:data:`BOOLEAN_TRUE`, :data:`BOOLEAN_FALSE`,
    any case, as pydantic parses the settings classes' booleans), or ``None`` when it is
    neither."""
    lowered = value.lower()
    if lowered in BOOLEAN_TRUE:
        return True
    if lowered in BOOLEAN_FALSE:
        return False
    return None


def parse_boolean(name: str, value: str | None, default: bool) -> bool:
    """The boolean variable ``name`` whose value is ``value`` (``None``: unset, ``default``).
    The CLI's ``KERNEVO_DEBUG`` and the warm start's ``KERNEVO_WARM_START`` are read with it.

    Raises:
        SettingsError: anything but :data:`BOOLEAN_TRUE` or :data:`BOOLEAN_FALSE` (an empty
            value too), one line naming the variable and its value.
    """
    if value is None:
        return default
    parsed = boolean_value(value)
    if parsed is None:
        raise SettingsError(
            f"{echo(name, value)}: expected {BOOLEAN_EXPECTS}", check="bool_parsing", name=name
        )
    return parsed


@dataclass(frozen=True)
class EnvironmentProblem:
    """One finding of :func:`check_environment`, naming the check that made it."""

    check: Literal["unknown_variable", "empty_value", "set_twice", "not_boolean"]
    name: str
    message: str


def _looks_like_ours(upper: str) -> bool:
    import difflib

    if upper.startswith(PREFIX):
        return True
    return upper.startswith("KERN") and bool(
        difflib.get_close_matches(upper, NAMES, n=1, cutoff=_MISSPELT_PREFIX_CUTOFF)
    )


def _closest(upper: str) -> str | None:
    """The known name closest to ``upper``; past a correct prefix only the rest is compared
    (the shared ``KERNEVO_`` alone would make every name look close)."""
    import difflib

    if upper.startswith(PREFIX):
        rests = {name.removeprefix(PREFIX): name for name in NAMES}
        close = difflib.get_close_matches(
            upper.removeprefix(PREFIX), rests, n=1, cutoff=_SUGGEST_CUTOFF
        )
        return rests[close[0]] if close else None
    close = difflib.get_close_matches(upper, NAMES, n=1, cutoff=_SUGGEST_CUTOFF)
    return close[0] if close else None


def _unknown(name: str, upper: str) -> EnvironmentProblem:
    close = _closest(upper)
    hint = f"; did you mean {close}?" if close else "; see the configuration table in README.md"
    return EnvironmentProblem(
        "unknown_variable", name, f"unknown environment variable {shorten(name)}{hint}"
    )


def check_environment(
    environ: Mapping[str, str], *, also_known: Iterable[str | None] = ()
) -> list[EnvironmentProblem]:
    """Problems with the ``KERNEVO_*`` variables of ``environ``, in name order (empty: none).

    Checks, each a problem's ``check``:
    - ``unknown_variable``: a name (any case) that starts with ``KERNEVO_`` or is a near-miss of
      a known name (``KERNEV_GPU``) but is not in :data:`CATALOGUE`; the message suggests the
      closest known name (difflib).
    - ``empty_value``: a known variable set to an empty or blank value (pydantic-settings would
      read ``KERNEVO_WORK_DIR=`` as the current folder, ``KERNEVO_GPU=`` as a parse error).
    - ``not_boolean``: a boolean variable (:attr:`Variable.boolean`) set to anything but
      :data:`BOOLEAN_TRUE` or :data:`BOOLEAN_FALSE` (``KERNEVO_WARM_START=abc``).
    - ``set_twice``: one variable set under two spellings (``KERNEVO_GPU`` and ``kernevo_gpu``:
      pydantic-settings matches names case-insensitively, which one wins is unspecified).

    ``also_known`` are further names to accept, besides those given to :func:`accept` and the
    value of ``KERNEVO_LLM_API_KEY_ENV`` (the variable holding the LLM API key).
    """
    extra = {name.upper() for name in also_known if name} | _accepted
    key_env = next((v for k, v in environ.items() if k.upper() == _KEY_ENV), None)
    if key_env:
        extra.add(key_env.upper())
    problems: list[EnvironmentProblem] = []
    spellings: dict[str, list[str]] = {}
    for name in sorted(environ):
        upper = name.upper()
        if upper in extra or not _looks_like_ours(upper):
            continue
        if upper not in NAMES:
            problems.append(_unknown(name, upper))
            continue
        spellings.setdefault(upper, []).append(name)
        if not environ[name].strip():
            problems.append(
                EnvironmentProblem(
                    "empty_value",
                    name,
                    f"{name} is set but empty; unset it for the default "
                    f"({_BY_NAME[upper].default}) or set {_BY_NAME[upper].expects}",
                )
            )
        elif _BY_NAME[upper].boolean and boolean_value(environ[name]) is None:
            problems.append(
                EnvironmentProblem(
                    "not_boolean", name, f"{echo(name, environ[name])}: expected {BOOLEAN_EXPECTS}"
                )
            )
    for upper, names in sorted(spellings.items()):
        if len(names) > 1:
            problems.append(
                EnvironmentProblem(
                    "set_twice",
                    names[0],
                    f"{upper} is set twice, as {' and '.join(names)}; keep one",
                )
            )
    return problems


def describe(problems: Sequence[EnvironmentProblem]) -> str:
    """The problems as one line (the first, then how many more and their names)."""
    if not problems:
        return ""
    line = problems[0].message
    if len(problems) > 1:
        rest = ", ".join(shorten(p.name) for p in problems[1:])
        line += f" (and {len(problems) - 1} more: {rest})"
    return line


_warned: set[tuple[str, str]] = set()
_log = logging.getLogger("kernevo")


def warn_once(
    environ: Mapping[str, str], *, validated: Iterable[str] = ()
) -> list[EnvironmentProblem]:
    """Log each problem of :func:`check_environment` once per process as a warning on the
    ``"kernevo"`` logger; the loader's check, which must not break the application it runs in.
    A value problem (``not_boolean``, ``empty_value``) of a variable in ``validated`` (names,
    any case) is not logged: the caller's own validation refuses that value next, as a
    ``SettingsError`` in the same words, and a second copy on the log said it twice.

    Returns the problems found this time (logged or already logged before).
    """
    problems = check_environment(environ)
    own = {name.upper() for name in validated}
    for problem in problems:
        if problem.check in ("not_boolean", "empty_value") and problem.name.upper() in own:
            continue
        if (problem.check, problem.name) not in _warned:
            _warned.add((problem.check, problem.name))
            _log.warning("kernevo: %s", problem.message)
    return problems


class SettingsError(ValueError):
    """A configuration value that does not parse, as one line naming the variable (or keyword
    argument) and what it expects. ``check`` is pydantic's error type (``float_parsing``,
    ``greater_than_equal``, ``value_error`` …), ``name`` the variable or argument."""

    def __init__(self, message: str, *, check: str, name: str) -> None:
        super().__init__(message)
        self.check = check
        self.name = name


_PYDANTIC_PREFIXES = re.compile(r"^(Value error|Assertion failed), ")


def settings_error(error: Any, *, arguments: Iterable[str] = ()) -> SettingsError:
    """The first error of a pydantic ``ValidationError`` raised by a ``KERNEVO_``-prefixed
    settings class, as a :class:`SettingsError`.

    ``arguments`` are the field names given as keyword arguments rather than read from the
    environment; their errors name the argument instead of the variable.
    """
    first = error.errors()[0]
    field = str(first["loc"][0]) if first.get("loc") else "?"
    given = first.get("input")
    reason = _PYDANTIC_PREFIXES.sub("", str(first.get("msg", "invalid value")))
    reason = reason[:1].lower() + reason[1:]
    if field in set(arguments):
        # A keyword argument is shown as Python wrote it: cache_max_age_s=-1, not '-1'.
        value = repr(shorten(given)) if isinstance(given, str) else shorten(repr(given))
        shown = f"{field}={value}"
        return SettingsError(f"{shown}: {reason}", check=first["type"], name=field)
    name = PREFIX + field.upper()
    entry = variable(name)
    shown = echo(name, str(given)) if isinstance(given, str) else name
    if first["type"] == "value_error" or entry is None:  # our validators say what they expect
        return SettingsError(f"{shown}: {reason}", check=first["type"], name=name)
    return SettingsError(
        f"{shown}: expected {entry.expects} ({reason})", check=first["type"], name=name
    )


def read_settings(settings_class: Any, **arguments: Any) -> Any:
    """``settings_class(**arguments)`` with a pydantic ``ValidationError`` turned into a
    one-line :class:`SettingsError`.

    Raises:
        SettingsError: a variable or argument that does not parse or is out of range.
    """
    from pydantic import ValidationError

    try:
        return settings_class(**arguments)
    except ValidationError as error:
        raise settings_error(error, arguments=arguments) from None
