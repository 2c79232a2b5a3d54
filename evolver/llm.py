"""LLM backends: an OpenAI-compatible endpoint through OpenEvolve's own client, or the offline
mutator; the reachability check that turns a dead endpoint into one line, not a hang."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import openai
from openevolve.llm.base import LLMInterface
from openevolve.llm.openai import OpenAILLM

from evolver.errors import LLMEndpointError
from evolver.job_config import LLMSection
from evolver.offline_mutator import OFFLINE_BACKEND, OFFLINE_MODEL, make_offline_mutator
from evolver.settings import EvolverSettings
from kernevo.environment import without_credentials
from seeds.canonical import canonical_source

OPENAI_BACKEND = "openai-compatible"
# The OpenAI client refuses an empty key; local servers (vLLM, llama.cpp, Ollama) ignore it.
_NO_KEY = "not-needed"


@dataclass(frozen=True)
class LLMBackend:
    """Which backend proposes diffs: ``kind`` is recorded with the job and every program."""

    kind: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None

    @property
    def offline(self) -> bool:
        return self.kind == OFFLINE_BACKEND

    def api_key(self) -> str:
        """The key from the environment variable the configuration names.

        Raises:
            LLMEndpointError: the variable is named but not set, or it is one of kernevo's own
                settings (``kernevo.environment``'s catalogue): a job file naming
                ``KERNEVO_DATABASE_URL`` sent the database URL to the endpoint as its key.
        """
        if not self.api_key_env:
            return _NO_KEY
        from kernevo.environment import variable

        if variable(self.api_key_env) is not None:
            raise LLMEndpointError(
                f"llm.api_key_env {self.api_key_env} is one of kernevo's own settings, not an "
                "LLM key: name a variable of your own (e.g. OPENAI_API_KEY)"
            )
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMEndpointError(
                f"the LLM API key variable {self.api_key_env} is not set in the environment"
            )
        return key


def resolve_backend(section: LLMSection, settings: EvolverSettings) -> LLMBackend:
    """The job's backend: its ``llm`` section first, then ``KERNEVO_LLM_*``; no base URL in
    either selects the offline mutator.

    Raises:
        LLMEndpointError: a base URL without a model name.
    """
    base_url = (section.base_url or settings.llm_base_url or "").rstrip("/") or None
    if base_url is None:
        return LLMBackend(kind=OFFLINE_BACKEND, model=OFFLINE_MODEL)
    model = section.model or settings.llm_model
    if not model:
        raise LLMEndpointError(
            f"LLM endpoint {without_credentials(base_url)} is configured without a model: set "
            "llm.model or KERNEVO_LLM_MODEL"
        )
    return LLMBackend(
        kind=OPENAI_BACKEND,
        model=model,
        base_url=base_url,
        api_key_env=section.api_key_env or settings.llm_api_key_env,
    )


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def check_endpoint(backend: LLMBackend, *, timeout_s: float = 10.0) -> None:
    """Check, before the job starts, that the endpoint answers and serves the model.

    ``GET {base}/models`` first (a listing that lacks the model is an error: a misspelt model
    name would otherwise fail every iteration for hours); endpoints without a listing get a
    one-token chat completion instead. Nothing is checked for the offline mutator.

    Every line names the endpoint with its URL's credentials as ``***``
    (``kernevo.environment.without_credentials``): the line reaches the terminal, the job's
    ``failure_reason`` and ``GET /v1/jobs``.

    Raises:
        LLMEndpointError: connection refused or timed out (``is unreachable``), no answer
            within ``timeout_s`` or the connection closed mid-answer (said so), key refused
            (401/403), model not served, or any other HTTP error; one line.
    """
    if backend.offline:
        return
    import httpx

    base = backend.base_url or ""  # resolve_backend gives every endpoint backend its URL
    shown = without_credentials(base)
    headers = {"Authorization": f"Bearer {backend.api_key()}"}
    try:
        with httpx.Client(timeout=timeout_s, headers=headers) as client:
            listing = client.get(f"{base}/models")
            if listing.status_code in (401, 403):
                raise LLMEndpointError(_key_refused(backend, shown, listing.status_code))
            if listing.status_code == 200:
                try:
                    served = [m["id"] for m in listing.json().get("data", [])]
                except (ValueError, TypeError, KeyError, AttributeError):
                    served = []
                if served and backend.model not in served:
                    raise LLMEndpointError(
                        f"LLM endpoint {shown} does not serve model {backend.model!r}; it serves: "
                        f"{_short(', '.join(served))}"
                    )
                if served:
                    return
            probe = client.post(
                f"{base}/chat/completions",
                json={
                    "model": backend.model,
                    "messages": [{"role": "user", "content": "Reply with OK."}],
                    "max_tokens": 1,
                },
            )
            if probe.status_code in (401, 403):  # an endpoint without a listing
                raise LLMEndpointError(_key_refused(backend, shown, probe.status_code))
            if probe.status_code >= 400:
                raise LLMEndpointError(
                    f"LLM endpoint {shown} answered HTTP {probe.status_code} to a test request "
                    f"for model {backend.model!r}: {_short(probe.text) or 'empty body'}"
                )
    except httpx.HTTPError as error:
        # Said as a failure during the job says it (_failure_line): an endpoint that accepted the
        # connection and then was slow or hung up is not "unreachable".
        what = f"{type(error).__name__}: {_short(str(error)) or type(error).__name__}"
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
            line = f"is unreachable ({what})"
        elif isinstance(error, httpx.TimeoutException):
            line = f"gave no answer to the start-up check within {timeout_s:g} s ({what})"
        elif isinstance(error, httpx.TransportError):
            line = f"broke off its answer to the start-up check ({what})"
        else:
            line = f"failed the start-up check ({what})"
        raise LLMEndpointError(f"LLM endpoint {shown} {line}") from None


def _key_refused(backend: LLMBackend, shown: str, status: int) -> str:
    """The line of an endpoint (``shown``: its URL without credentials) answering ``status``
    (401, 403): it refused the key sent, or, when no key variable is configured (the client
    then sends a placeholder, :data:`_NO_KEY`), it needs one."""
    if backend.api_key_env:
        return f"LLM endpoint {shown} refused the API key (HTTP {status})"
    return (
        f"LLM endpoint {shown} needs an API key (HTTP {status}) and none is configured: name the "
        "variable holding it with KERNEVO_LLM_API_KEY_ENV (or --llm-api-key-env, "
        "llm.api_key_env)"
    )


class CanonicalTextLLM(LLMInterface):
    """An LLM whose every response is canonical text (``seeds.canonical``: LF line endings).

    This is where an endpoint's text enters the job: OpenEvolve applies the response's diff to
    the (canonical) parent, or takes a full rewrite from it, stores the result as the program's
    code and hands that same text to the evaluator, which refuses a non-canonical text. Every
    other attribute (``model``, ``last_usage``) is the wrapped client's.
    """

    def __init__(self, inner: LLMInterface) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def generate(self, prompt: str, **kwargs: Any) -> str:
        """The wrapped client's answer to ``prompt``, as canonical text.

        Raises:
            LLMEndpointError: from :class:`EndpointLLM`, one line naming the endpoint.
        """
        return _canonical(await self._inner.generate(prompt, **kwargs))

    async def generate_with_context(
        self, system_message: str, messages: list[dict[str, str]], **kwargs: Any
    ) -> str:
        """The wrapped client's answer to ``messages``, as canonical text.

        Raises:
            LLMEndpointError: from :class:`EndpointLLM`, one line naming the endpoint.
        """
        answer = await self._inner.generate_with_context(system_message, messages, **kwargs)
        return _canonical(answer)


def _canonical(answer: Any) -> Any:
    return canonical_source(answer) if isinstance(answer, str) else answer


class EndpointLLM(OpenAILLM):
    """OpenEvolve's ``OpenAILLM`` (its request, timeout and retries, unchanged) whose failures
    are one line naming the endpoint and what happened.

    Why: OpenEvolve records a failed iteration as ``LLM generation failed: {exception}``, and
    that text is the job's ``failure_reason`` and the program's report. The exceptions of its
    client said nothing useful there: a timeout is an empty ``TimeoutError`` (``asyncio.wait_for``
    around each attempt), ``choices: []`` an ``IndexError``, a truncated body a
    ``JSONDecodeError``, none of them naming the endpoint.
    """

    async def generate_with_context(
        self, system_message: str, messages: list[dict[str, str]], **kwargs: Any
    ) -> str:
        """OpenEvolve's request with its retries (``OpenAILLM.generate`` comes here too).

        Raises:
            LLMEndpointError: the last attempt failed; one line naming the endpoint (its URL
                without credentials) and what happened: no answer within ``llm.timeout_s``, an
                HTTP error status with a short body, a connection failure, or an answer that is
                not a chat completion (not JSON, no choices, no message content).
        """
        try:
            return await super().generate_with_context(system_message, messages, **kwargs)
        except LLMEndpointError:
            raise
        except Exception as error:
            # OpenEvolve bounds each attempt by the call's timeout (asyncio.wait_for), the
            # OpenAI client each request by the configured one: say the one that fired.
            timeout = kwargs.get("timeout", self.timeout)
            if isinstance(error, openai.APITimeoutError):
                timeout = self.timeout
            retries = kwargs.get("retries", self.retries) or 0
            line = _failure_line(self._shown(), error, timeout, retries)
            raise LLMEndpointError(line) from error

    async def _call_api(self, params: dict[str, Any]) -> str:
        """One attempt: the chat completion's first message content.

        This replaces OpenEvolve's ``_call_api``, which indexes ``response.choices[0].message
        .content`` unchecked (an ``IndexError`` for no choices, ``None`` for no content); it
        keeps its token accounting (``last_usage``, read by OpenEvolve's ensemble).

        Raises:
            LLMEndpointError: the answer is not a chat completion with message content.
            Exception: whatever the OpenAI client raises (``generate_with_context`` words it).
        """
        if self.client is None:  # OpenEvolve's manual mode: never configured by kernevo
            raise LLMEndpointError(f"LLM endpoint {self._shown()} has no client (manual mode)")
        response = await self.client.chat.completions.create(**params, stream=False)
        content = _content(self._shown(), response)
        usage = getattr(response, "usage", None)
        if usage is None:
            self.last_usage = None
        else:
            prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
            completion_tokens = getattr(usage, "completion_tokens", 0) or 0
            self.last_usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": getattr(usage, "total_tokens", 0)
                or prompt_tokens + completion_tokens,
                "model": str(self.model),
            }
        return content

    def _shown(self) -> str:
        return without_credentials(str(self.api_base or "").rstrip("/"))


def _content(shown: str, response: Any) -> str:
    """The first choice's message content of ``response`` (what the OpenAI client made of the
    endpoint's answer).

    Raises:
        LLMEndpointError: what the answer lacks: it is text (the client gives a body that is
            not ``application/json`` as a string), or has no ``choices`` list, no choices, no
            message, or no content.
    """
    if isinstance(response, str):
        # An HTML page (a URL that is not the API's), or Server-Sent Events from an endpoint
        # that streams even when asked not to.
        # Streaming named only for Server-Sent Events ("data: …"): said of an nginx page it
        # misled a trial.
        sse = response.lstrip().startswith(("data:", "event:"))
        why = " (streaming answers are not supported)" if sse else ""
        raise LLMEndpointError(
            f"LLM endpoint {shown} answered text, not a chat completion{why}: "
            f"{_short(response, 120)!r}"
        )
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise LLMEndpointError(
            f"LLM endpoint {shown} answered JSON that is not a chat completion (no choices)"
        )
    if not choices:
        raise LLMEndpointError(f"LLM endpoint {shown} answered a chat completion with no choices")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise LLMEndpointError(
            f"LLM endpoint {shown} answered a chat completion whose choice has no message"
        )
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    finish = getattr(choices[0], "finish_reason", None)
    why = f" (finish_reason {finish!r})" if finish else ""
    refusal = getattr(message, "refusal", None)
    if isinstance(refusal, str) and refusal:
        why = f" (the model refused: {_short(refusal, 120)!r})"
    raise LLMEndpointError(
        f"LLM endpoint {shown} answered a chat completion whose message has no content{why}"
    )


def _failure_line(shown: str, error: Exception, timeout: float | None, retries: int) -> str:
    """One line for ``error``, the last attempt's failure at endpoint ``shown``: never empty,
    never an exception's text alone (``str(TimeoutError())`` is ``''``)."""
    if isinstance(error, openai.APITimeoutError | TimeoutError):
        # Each attempt is bounded twice by llm.timeout_s (asyncio.wait_for around it, and the
        # OpenAI client's own timeout); whichever fires first, the answer did not come in time.
        within = f"within {timeout:g} s (llm.timeout_s)" if timeout is not None else "in time"
        tries = f", the last of {retries + 1} attempts (llm.retries {retries})" if retries else ""
        return f"LLM endpoint {shown} gave no answer {within}{tries}"
    if isinstance(error, openai.APIStatusError):
        return (
            f"LLM endpoint {shown} answered HTTP {error.status_code}: "
            f"{_status_detail(error) or 'empty body'}"
        )
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error.__context__
        name = type(cause).__name__ if cause is not None else type(error).__name__
        detail = _short(str(cause or "")) or name
        # By name: the OpenAI client may ship its own httpx (httpx2), whose ConnectError is not
        # httpx's.
        if name.startswith("Connect"):
            return f"LLM endpoint {shown} is unreachable ({name}: {detail})"
        return f"LLM endpoint {shown} broke off its answer ({name}: {detail})"
    if isinstance(error, json.JSONDecodeError):
        if not error.doc.strip():
            return f"LLM endpoint {shown} answered an empty body, not a chat completion"
        return (
            f"LLM endpoint {shown} answered a body that is not valid JSON (broken at character "
            f"{error.pos} of {len(error.doc)}): {_short(error.doc, 120)!r}"
        )
    if isinstance(error, openai.APIResponseValidationError):
        return f"LLM endpoint {shown} answered JSON that is not a chat completion"
    # Anything else (a bug here or in a library): named by type, so never an empty line.
    detail = _short(str(error))
    what = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    return f"LLM endpoint {shown} failed a request ({what})"


def _status_detail(error: Any) -> str:
    """A short text of an HTTP error's body: the OpenAI-style ``error.message`` when the body
    has one, else the body itself."""
    body = getattr(error, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return _short(body["message"])
    try:
        return _short(error.response.text)
    except Exception:  # a streamed or undecodable body: the status says enough
        return ""


def make_canonical_openai_client(model_cfg: Any) -> CanonicalTextLLM:
    """OpenEvolve's ``init_client`` factory for the OpenAI-compatible backend: its own
    ``OpenAILLM`` (as :class:`EndpointLLM`, whose failures name the endpoint) behind
    :class:`CanonicalTextLLM`. Module-level so it pickles by reference."""
    return CanonicalTextLLM(EndpointLLM(model_cfg))


def model_configs(backend: LLMBackend, section: LLMSection) -> list[object]:
    """OpenEvolve model configurations for ``backend`` (one model, weight 1).

    The OpenAI-compatible backend is OpenEvolve's own ``OpenAILLM`` (as :class:`EndpointLLM`)
    behind :class:`CanonicalTextLLM`; the offline mutator comes in the same way. Both through
    ``init_client`` with a module-level, picklable factory.

    Raises:
        LLMEndpointError: the API key variable is named but not set.
    """
    from openevolve.config import LLMModelConfig

    if backend.offline:
        return [
            LLMModelConfig(
                name=OFFLINE_MODEL,
                weight=1.0,
                init_client=make_offline_mutator,
                api_base=None,
                api_key=_NO_KEY,
            )
        ]
    return [
        LLMModelConfig(
            name=backend.model,
            weight=1.0,
            init_client=make_canonical_openai_client,
            api_base=backend.base_url,
            api_key=backend.api_key(),
            temperature=section.temperature,
            max_tokens=section.max_tokens,
            timeout=section.timeout_s,
            retries=section.retries,
            retry_delay=5,
        )
    ]
