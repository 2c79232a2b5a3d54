"""Asking a kernevo service (``best``, ``jobs --api-url``, ``cancel --api-url``): its URL, the
bearer token, the deadline, and every failure worded as one line."""

from __future__ import annotations

import argparse
from typing import Any

from kernevo.cli.errors import CliError, UsageError, _one_line
from kernevo.environment import without_credentials


def _api_url(given: str | None) -> str:
    from kernevo.settings import LoaderSettings

    return (given or LoaderSettings().api_url).rstrip("/")


def _error_detail(body: bytes) -> str | None:
    """The ``detail`` of a kernevo service's error body as one line: a text, or FastAPI's list
    of ``{loc, msg}`` as ``query.m: msg; …``; ``None`` when the body is not that JSON (an empty
    body, a proxy's page, another server's answer)."""
    import json

    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("detail"), str | list):
        return None
    detail = document["detail"]
    if isinstance(detail, list):
        detail = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
            if isinstance(item, dict)
            else str(item)
            for item in detail
        )
    return _one_line(Exception(detail))


def _token_hint(scope: str) -> str:
    """How to get a token of ``scope`` (``read`` or ``write``) for the service: every line
    that a missing, unknown or too weak ``KERNEVO_API_TOKEN`` ends says it alike."""
    return (
        f"set KERNEVO_API_TOKEN to a {scope} token ('kernevo token create --scope {scope}' on "
        "the service's database)"
    )


def _auth_headers() -> dict[str, str]:
    """``Authorization: Bearer $KERNEVO_API_TOKEN`` when the variable is set (every ``/v1``
    read but the champions' needs a token), else nothing."""
    from api.settings import ApiSettings

    token = ApiSettings().token()
    return {} if token is None else {"Authorization": f"Bearer {token}"}


# The CLI's deadline for one request when KERNEVO_REQUEST_TIMEOUT_S is not set: someone at a
# terminal waits longer than a loader's first call (the variable's 2 s default), and a service
# listing jobs from a busy database may take seconds. Whole request, not per read.
CLI_REQUEST_TIMEOUT_S = 10.0


def _request_timeout_s() -> float:
    """The deadline of one request of the CLI: ``KERNEVO_REQUEST_TIMEOUT_S`` when set (checked
    with the environment), else :data:`CLI_REQUEST_TIMEOUT_S`."""
    from kernevo.settings import LoaderSettings

    settings = LoaderSettings()
    if "request_timeout_s" in settings.model_fields_set:
        return float(settings.request_timeout_s)
    return CLI_REQUEST_TIMEOUT_S


def _service_request(
    method: str,
    url: str,
    *,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
) -> Any:
    """Send one request to a kernevo service (``kernevo.http_get.request``: the whole request
    within :func:`_request_timeout_s`, the body at most ``kernevo.client.MAX_RESPONSE_BYTES``)
    and return the answer (``kernevo.http_get.Answer``) when its status is below 300 or an
    error whose body is the service's own JSON error (the caller words those).

    Raises:
        CliError: one line: unreachable, no complete answer in time, a body over the cap, a
            redirect (never followed), or an error status without a kernevo error body.
    """
    from kernevo import http_get
    from kernevo.client import MAX_RESPONSE_BYTES

    shown = without_credentials(url)  # a user:password@ in KERNEVO_API_URL stays out of lines
    timeout_s = _request_timeout_s()
    try:
        answer = http_get.request(
            method,
            url,
            timeout_s=timeout_s,
            max_bytes=MAX_RESPONSE_BYTES,
            params=params,
            headers=headers,
            json_body=json_body,
        )
    except http_get.UnreachableError as error:
        raise CliError(f"service at {shown} is unreachable ({error})") from None
    except http_get.TooLateError:
        raise CliError(
            f"service at {shown}: no complete answer within {timeout_s:g} s "
            "(KERNEVO_REQUEST_TIMEOUT_S)"
        ) from None
    except (http_get.TooLargeError, http_get.EncodedBodyError) as error:
        raise CliError(f"service at {shown}: {error}") from None
    if 300 <= answer.status_code < 400:
        target = without_credentials(answer.headers.get("location", "nowhere"))
        raise CliError(
            f"{answer.status_code} redirect from {shown} to {target}: not followed; point "
            "KERNEVO_API_URL (or --api-url) at the service itself"
        )
    if answer.status_code >= 400 and _error_detail(answer.body) is None:
        raise CliError(
            f"{answer.status_code} from {shown} with no kernevo error body: is "
            "KERNEVO_API_URL (or --api-url) a kernevo service?"
        )
    return answer


def _json_of(answer: Any, url: str) -> Any:
    """The JSON document of a successful answer from ``url``.

    Raises:
        CliError: the body is not JSON.
    """
    import json

    try:
        return json.loads(answer.body)
    except (ValueError, RecursionError):
        raise CliError(
            f"service at {without_credentials(url)} answered with something that is not JSON"
        ) from None


def _get_json(url: str, params: dict[str, Any] | None = None) -> Any:
    """GET ``url`` (with ``KERNEVO_API_TOKEN`` as the bearer token when set) and decode JSON
    (:func:`_service_request`); any failure becomes a one-line ``CliError``."""
    shown = without_credentials(url)
    headers = _auth_headers()
    answer = _service_request("GET", url, params=params, headers=headers)
    if answer.status_code == 401:  # no token, or one the service does not know
        line = f"401 from {shown}: {_error_detail(answer.body)}; {_token_hint('read')}"
        # No token sent: a setting missing, as cancel's (exit 2); a refused token: exit 1.
        raise (CliError if headers else UsageError)(line)
    if answer.status_code >= 400:
        raise CliError(f"{answer.status_code} from {shown}: {_error_detail(answer.body)}")
    return _json_of(answer, url)


# What a field missing from a service's answer, or of the wrong type, raises where it is read.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def _malformed(url: str, error: BaseException) -> CliError:
    """The one-line error of an answer from ``url`` that is JSON but not what a kernevo service
    sends (another service on that port, a proxy's page): ``error`` says which field broke."""
    detail = f"{type(error).__name__}: {error}"[:200]  # made printable where it is shown
    return CliError(f"malformed answer from {without_credentials(url)}: {detail}")


def _one_source(args: argparse.Namespace) -> None:
    """Refuse ``--api-url`` with ``--database-url`` (a usage error): the command asks one or
    the other, and silently ignoring one hides which was asked."""
    if args.api_url and args.database_url:
        args.parser.error(
            "--api-url and --database-url name two places to ask; give one (the service, or "
            "the database directly)"
        )
