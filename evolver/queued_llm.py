"""Which LLM endpoint and key a job queued through the API may use: the worker's choice, not the
job's.

A job created with ``POST /v1/jobs`` is written by anyone holding a ``write`` token, and run by a
worker whose environment holds secrets (the database URL, the LLM key). If the job could name the
variable that holds the key (``llm.api_key_env``) and the URL the key is sent to
(``llm.base_url``), a write token would read any variable of the worker's environment: the
tester received ``Authorization: Bearer sqlite:////…/k.db`` with ``api_key_env:
KERNEVO_DATABASE_URL``. So, for a queued job (a row with ``queued_at``; whichever process runs
it, a worker or ``kernevo evolve --resume``):

- the key variable is that process's own ``KERNEVO_LLM_API_KEY_ENV``. The API refuses a body
  naming one (422 at ``llm.api_key_env``), the worker records none when it settles the job's
  backend, and a stored name other than the process's own (a row written before this rule) is
  refused here;
- a ``KERNEVO_*`` variable never holds the key of a queued job (those hold the service's own
  settings), whoever named it;
- the key goes only to an endpoint the process's operator allows: its ``KERNEVO_LLM_BASE_URL`` or
  one of ``KERNEVO_LLM_ALLOWED_BASE_URLS`` (``EvolverSettings.allowed_base_urls``). A job naming
  another ``llm.base_url`` is refused before any request is made.

``kernevo evolve`` with a job file or options of its own is not concerned: the user running it
names variables of their own environment.
"""

from __future__ import annotations

from evolver.job_config import LLMSection
from evolver.settings import EvolverSettings
from kernevo.environment import without_credentials

# Prefix of the service's own settings: never a key variable of a queued job.
RESERVED_PREFIX = "KERNEVO_"


def queued_llm_problem(section: LLMSection, settings: EvolverSettings) -> str | None:
    """Why the queued job's ``llm`` ``section`` may not run under this process's ``settings``
    (one line naming the setting to change), or ``None`` when it may.

    Checks, in order: the job names a key variable other than the process's own
    ``KERNEVO_LLM_API_KEY_ENV``; the key variable in effect starts with ``KERNEVO_``; the job
    names a ``base_url`` outside ``settings.allowed_base_urls()`` (compared without a trailing
    slash); the job names ``llm.model`` while neither it nor the worker names an endpoint (the
    offline mutator would run and drop the model unsaid, where ``kernevo evolve`` refuses
    ``--llm-model`` alone: a fresh-user trial's finding).
    """
    own = settings.llm_api_key_env
    if section.api_key_env is not None and section.api_key_env != own:
        return (
            f"llm.api_key_env {section.api_key_env!r}: a job queued through the API cannot choose "
            "the variable holding the LLM key; the worker's KERNEVO_LLM_API_KEY_ENV "
            f"({own or 'unset'}) decides"
        )
    in_effect = section.api_key_env or own
    if in_effect is not None and in_effect.upper().startswith(RESERVED_PREFIX):
        return (
            f"the LLM key variable {in_effect} is one of kernevo's own settings: a queued job's "
            "key must be in a variable without the KERNEVO_ prefix (e.g. "
            "KERNEVO_LLM_API_KEY_ENV=OPENAI_API_KEY)"
        )
    if section.base_url is not None:
        url = section.base_url.rstrip("/")
        if url not in settings.allowed_base_urls():
            return (
                f"llm.base_url {without_credentials(url)} is not an endpoint this worker sends "
                "its LLM key to: allow it with KERNEVO_LLM_BASE_URL or "
                "KERNEVO_LLM_ALLOWED_BASE_URLS on the worker"
            )
    if section.model is not None and section.base_url is None and settings.llm_base_url is None:
        return (
            f"llm.model {section.model!r} does nothing without an LLM endpoint: the job names no "
            "llm.base_url and this worker has no KERNEVO_LLM_BASE_URL (the offline mutator reads "
            "no llm key); set KERNEVO_LLM_BASE_URL on the worker or queue the job with "
            "llm.base_url"
        )
    return None
