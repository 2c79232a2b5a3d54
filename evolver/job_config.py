"""A job's configuration: strict pydantic models, so a misspelt key is a one-line error.

OpenEvolve ignores unknown YAML keys silently (a typo then costs a night of evolution); here
every section refuses keys it does not know, before anything runs. The OpenEvolve ``Config`` is
built from a validated :class:`JobConfig` in code (``evolver.openevolve_config``), never from YAML.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from evolver.errors import JobConfigError

# Upper bounds of the job's numbers. Each sizes something OpenEvolve allocates or repeats (a set,
# a dict and a list per island, the population held in memory and written to every checkpoint,
# programs copied into every prompt), so an absurd value would exhaust memory or disk instead of
# failing; each is far above any sensible job. The CLI's options take their ranges from here.
MAX_ITERATIONS = 1_000_000  # also bounds every interval counted in iterations
MAX_ISLANDS = 64
# Candidates evaluated at once on the local GPU: each is an OpenEvolve pool process with a GPU
# worker (a CUDA context) of its own; past a few, they only queue at the GPU's timing lock.
MAX_LOCAL_IN_FLIGHT = 16
MAX_POPULATION = 10_000  # programs held in memory and written to each checkpoint
MAX_KEEP_CHECKPOINTS = 100  # each checkpoint holds the whole population on disk
MAX_FEATURE_BINS = 1_000  # per MAP-Elites axis
MAX_PROMPT_PROGRAMS = 32  # programs quoted in one prompt, each up to max_code_length
MAX_CODE_LENGTH = 1_000_000  # characters of one program
MAX_EVALUATOR_TIMEOUT_S = 86_400
MAX_GPU_INDEX = 1023  # as KERNEVO_GPU
MAX_LLM_TOKENS = 1_048_576
MAX_LLM_TIMEOUT_S = 3_600
MAX_LLM_RETRIES = 10
# Text lengths: the job row's columns (path 64, dtype 16, model 256 characters) and PATH_MAX.
MAX_NAME_LENGTH = 256
MAX_URL_LENGTH = 4096


class LLMSection(BaseModel):
    """Which OpenAI-compatible endpoint proposes the diffs; unset fields fall back to the
    ``KERNEVO_LLM_*`` environment (``evolver.settings``), and no base URL anywhere selects the
    built-in offline mutator."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    base_url: str | None = Field(default=None, max_length=MAX_URL_LENGTH)
    model: str | None = Field(default=None, max_length=MAX_NAME_LENGTH)
    api_key_env: str | None = Field(
        default=None,
        max_length=MAX_NAME_LENGTH,
        description="name of the environment variable that holds the API key (refused in "
        "POST /v1/jobs: a queued job uses its worker's KERNEVO_LLM_API_KEY_ENV)",
    )
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=8192, ge=256, le=MAX_LLM_TOKENS)
    timeout_s: int = Field(default=180, ge=5, le=MAX_LLM_TIMEOUT_S, description="per LLM request")
    retries: int = Field(default=2, ge=0, le=MAX_LLM_RETRIES)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        # The HTTP client raises InvalidURL (not a connection error) for a bad host or port.
        from kernevo.environment import http_url_problem

        problem = http_url_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("not an environment variable name (letters, digits and _)")
        return value


class JobConfig(BaseModel):
    """One evolution job: a path at one of its shape buckets in one dtype on one GPU, and how
    long and how wide to search. ``bucket`` (``trsm_blocked``: ``m128_2048`` or
    ``m2049_16384``; ``seeds.registry.buckets``) picks the shapes the job checks and times and
    the champion it competes for; unset, the path's first bucket.

    ``evaluator_timeout_s`` is OpenEvolve's own evaluation timeout. It must exceed the
    evaluator's hard timeout so ours fires first: OpenEvolve's timeout returns metrics without
    the MAP-Elites feature dimensions and the child is dropped. A value that does not is refused
    (:func:`evaluator_hard_limit_s`). ``keep_checkpoints``: the newest checkpoints kept on disk,
    at least 2 so a broken newest one has one to fall back to. Every number has an upper bound
    (the ``MAX_*`` constants above): a value past it is refused, not allocated.

    Types are strict (pydantic strict mode), for ``POST /v1/jobs``'s JSON body and job files
    alike: an integer must be an integer (not ``"5"``, ``true`` or ``5.0``), a boolean a boolean
    (not ``"yes"`` or ``1``); a float field takes an integer. YAML scalars carry their type
    (``iterations: 5`` is an integer, ``compile_only: yes`` a YAML 1.1 boolean), so a job file
    loses only quoted numbers (``iterations: "5"``), which no one means as text.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str = Field(max_length=64)
    bucket: str | None = Field(
        default=None,
        max_length=64,
        description="the path's shape bucket the job targets; unset: the path's first",
    )
    dtype: str = Field(max_length=16)
    gpu: int = Field(
        default=0, ge=0, le=MAX_GPU_INDEX, description="CUDA device index evaluations run on"
    )
    compile_only: bool = Field(
        default=False, description="no GPU: evaluations stop after compiling and score 0"
    )
    in_flight: int = Field(
        default=1,
        ge=1,
        le=MAX_LOCAL_IN_FLIGHT,
        description="candidates evaluated at once on the local GPU (OpenEvolve's parallel "
        "evaluations): their verifications share the GPU, their timings take turns; a job on "
        "a Dask cluster takes the cluster's --in-flight instead",
    )
    iterations: int = Field(default=60, ge=1, le=MAX_ITERATIONS)
    checkpoint_interval: int = Field(default=5, ge=1, le=MAX_ITERATIONS)
    keep_checkpoints: int = Field(
        default=3, ge=2, le=MAX_KEEP_CHECKPOINTS, description="newest checkpoints kept on disk"
    )
    islands: int = Field(default=2, ge=1, le=MAX_ISLANDS)
    population: int = Field(default=200, ge=2, le=MAX_POPULATION)
    archive: int = Field(default=50, ge=1, le=MAX_POPULATION)
    migration_interval: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    feature_bins: int = Field(default=8, ge=2, le=MAX_FEATURE_BINS)
    seed: int = Field(default=42, ge=0, le=2**32 - 1)
    num_top_programs: int = Field(default=3, ge=0, le=MAX_PROMPT_PROGRAMS)
    num_diverse_programs: int = Field(default=2, ge=0, le=MAX_PROMPT_PROGRAMS)
    evaluator_timeout_s: int = Field(default=900, ge=30, le=MAX_EVALUATOR_TIMEOUT_S)
    max_code_length: int = Field(default=60_000, ge=1_000, le=MAX_CODE_LENGTH)
    promote_every: int = Field(
        default=10,
        ge=1,
        le=MAX_ITERATIONS,
        description="iterations between champion promotions while running",
    )
    llm: LLMSection = LLMSection()

    @field_validator("path")
    @classmethod
    def _known_path(cls, value: str) -> str:
        from seeds.registry import get_path

        get_path(value)  # UnknownPathError is a ValueError: pydantic reports its message
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket_of_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        # After "path" (fields validate in order); absent when the path failed.
        from seeds.registry import get_path

        path = info.data.get("path")
        if value is not None and path is not None:
            get_path(path, value)  # UnknownBucketError: one line naming the path's buckets
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype_of_path(cls, value: str, info: ValidationInfo) -> str:
        # A field validator (not a model one), so that the error is located at "dtype"; the
        # path was validated first (fields validate in order) and is absent when it failed.
        from seeds.registry import get_path
        from seeds.spec import DTYPES, check_dtype

        path = info.data.get("path")
        if path is None:
            check_dtype(value, DTYPES)
        else:
            check_dtype(value, get_path(path).dtypes, owner=f"path {path}")
        return value

    @field_validator("evaluator_timeout_s")
    @classmethod
    def _after_evaluator_limits(cls, value: int) -> int:
        limit = evaluator_hard_limit_s()
        if value <= limit:
            raise ValueError(
                f"{value} s does not exceed the evaluator's own hard limit of {limit:.0f} s "
                "(OpenEvolve's timeout would fire first and drop the child); set it above "
                f"{limit:.0f}"
            )
        return value


def int_range(name: str) -> tuple[int, int]:
    """The inclusive range of the integer field ``name`` of :class:`JobConfig`, from its
    constraints: the one source of the command line's ranges."""
    low = high = None
    for constraint in JobConfig.model_fields[name].metadata:
        if isinstance(constraint, annotated_types.Ge):
            low = int(constraint.ge)  # type: ignore[call-overload]
        elif isinstance(constraint, annotated_types.Le):
            high = int(constraint.le)  # type: ignore[call-overload]
    if low is None or high is None:
        raise LookupError(f"JobConfig.{name} is not an integer field with both bounds")
    return low, high


class JobOptionError(JobConfigError):
    """A value given as an override (a command-line option), not read from the job file, that
    does not validate; ``loc`` names its key (``("islands",)``, ``("llm", "model")``) and the
    message says what is wrong, without the key."""

    def __init__(self, message: str, loc: tuple[str, ...]) -> None:
        super().__init__(message)
        self.loc = loc


def evaluator_hard_limit_s() -> float:
    """The longest one ``evaluate()`` call may take before the evaluator's own timeouts end it,
    in seconds: the GPU identity query and the quick check (``QUICK_TIMEOUT_S`` each), full
    verification with timing (``FULL_TIMEOUT_S``, evaluator/pipeline.py), memcheck of a new job
    best at two shapes (``MEMCHECK_TIMEOUT_S`` each, evaluator/new_best.py), profiling it and
    compiling. OpenEvolve's ``evaluator_timeout_s`` must exceed it. Compile-only jobs are
    held to the same bound: one rule for every job file, whichever machine runs it."""
    from evaluator.compile_sandbox import START_TIMEOUT_S, WALL_LIMIT_S
    from evaluator.ncu_profile import PROFILE_TIMEOUT_S
    from evaluator.new_best import MEMCHECK_TIMEOUT_S
    from evaluator.pipeline import FULL_TIMEOUT_S, QUICK_TIMEOUT_S

    # A compile may first have to start a fresh compiler child (after an overrun); its CPU-time
    # limit ends within the wall-clock backstop.
    compile_s = START_TIMEOUT_S + WALL_LIMIT_S
    memcheck_s = 2 * MEMCHECK_TIMEOUT_S
    return 2 * QUICK_TIMEOUT_S + FULL_TIMEOUT_S + memcheck_s + PROFILE_TIMEOUT_S + compile_s


def _first_error(error: ValidationError) -> ErrorDetails:
    """The error to report: the first unknown key when there is one, else the first error.

    A misspelt key (``paht: trsm_small``) is both unknown and leaves its key missing; pydantic
    lists the missing one first, which would hide the typo the user has to fix."""
    errors = error.errors()
    return next((item for item in errors if item["type"] == "extra_forbidden"), errors[0])


def _one_line(error: ValidationError, source: str) -> str:
    """The error to report (``_first_error``) as one line naming the key, with a spelling
    suggestion for an unknown key."""
    first = _first_error(error)
    loc = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        section: type[BaseModel] = JobConfig
        for part in first["loc"][:-1]:
            annotation = section.model_fields[str(part)].annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                section = annotation
        known = sorted(section.model_fields)
        close = difflib.get_close_matches(str(first["loc"][-1]), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
        return f"{source}: unknown key {loc!r}{hint}"
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "missing":
        return f"{source}: missing required key {loc!r}"
    return f"{source}: {loc}: {message}" if loc else f"{source}: {message}"


def validate_job_config(
    data: dict[str, Any],
    source: str = "job config",
    overridden: frozenset[tuple[str, ...]] = frozenset(),
) -> JobConfig:
    """Validate a mapping as a :class:`JobConfig`; ``overridden`` holds the keys whose values
    came from the command line rather than from ``source``.

    Raises:
        JobOptionError: the first bad key is one of ``overridden`` (a usage error).
        JobConfigError: one line naming the first bad key (unknown, missing or out of range);
            an unknown key is named before any other problem (a misspelt required key is both
            unknown and missing).
    """
    try:
        return JobConfig.model_validate(data)
    except ValidationError as error:
        first = _first_error(error)
        loc = tuple(str(part) for part in first["loc"])
        if loc in overridden:
            message = str(first["msg"]).removeprefix("Value error, ")
            raise JobOptionError(message, loc) from None
        raise JobConfigError(_one_line(error, source)) from None


# The key of a job row's config recording the work root (``--work-dir``, else
# ``KERNEVO_WORK_DIR``; absolute) the job ran in last (``evolver.runner``): a resume without
# ``--work-dir`` finds the job's folder there, so the hint "resume with 'kernevo evolve --resume
# N'" holds whatever folder the job ran in. Not a JobConfig field (a job file or POST /v1/jobs
# cannot set it): taken out of the stored config before it is validated, and not shown.
WORK_ROOT_KEY = "work_root"


def shown_config(config: dict[str, Any]) -> dict[str, Any]:
    """A job's stored configuration as it is shown or served (``GET /v1/jobs``, the web page):
    its ``llm.base_url`` with the URL's credentials as ``***``
    (``kernevo.environment.without_credentials``), and ``gpu`` ``None`` for a compile-only job.
    The database keeps the real URL: a resumed job sends its requests there. It keeps the
    compile-only job's ``gpu`` too (:class:`JobConfig`'s integer, ``0`` or ``KERNEVO_GPU``),
    which no evaluation of that job uses: shown, ``gpu 0`` read as a job on device 0 beside
    the job's GPU key ``none``. The work root a local job ran in (:data:`WORK_ROOT_KEY`, a
    path on the machine that ran it) is left out. ``config`` itself is not changed."""
    from kernevo.environment import without_credentials

    shown = {key: value for key, value in config.items() if key != WORK_ROOT_KEY}
    if shown.get("compile_only") is True and "gpu" in shown:
        shown["gpu"] = None
    llm = shown.get("llm")
    if isinstance(llm, dict) and isinstance(llm.get("base_url"), str):
        shown["llm"] = {**llm, "base_url": without_credentials(llm["base_url"])}
    return shown


# A job file is a few hundred bytes; past this it is the wrong file (a log, a checkpoint).
MAX_JOB_FILE_BYTES = 1 << 20


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    silently, so ``islands: 4`` further down would quietly win over the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class says so with its position
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A scalar PyYAML cannot convert raises a bare ValueError without a position: an integer
        # past Python's 4300 digits, a date such as 2024-02-30. Say where it is, as for syntax.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as error:
            problem = str(error).split(";")[0]  # not Python's advice on sys.set_int_max_str_digits
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value: {problem}", node.start_mark
            ) from None


def _yaml_reason(error: yaml.YAMLError) -> str:
    """A YAML syntax error as one line that keeps where it is (1-based line and column)."""

    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    if isinstance(error, yaml.reader.ReaderError):
        char = error.character
        code = char if isinstance(char, int) else ord(char)
        return (
            f"invalid YAML: character U+{code:04X} at offset {error.position} "
            "is not allowed in YAML text"
        )
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        reason = f"invalid YAML at {at(error.problem_mark)}: {error.problem or 'syntax error'}"
        if error.context:
            where = f" at {at(error.context_mark)}" if error.context_mark is not None else ""
            reason += f" ({error.context}{where})"
        return " ".join(reason.split())
    text = " ".join(str(error).split())
    return f"invalid YAML: {text or type(error).__name__}"


def _read_job_file(file: Path, source: str) -> str:
    """The text of a job file, strictly UTF-8 (a BOM is allowed).

    Raises:
        JobConfigError: unreadable, too large, or not UTF-8 (naming the first bad byte).
    """
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as error:
        raise JobConfigError(
            f"{source}: cannot read job config: {error.strerror or error}"
        ) from None
    if len(raw) > MAX_JOB_FILE_BYTES:
        raise JobConfigError(f"{source}: larger than {MAX_JOB_FILE_BYTES} bytes; not a job config")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise JobConfigError(
            f"{source}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); "
            "save the file as UTF-8"
        ) from None


def load_job_config(
    file: Path | None, overrides: dict[str, Any], defaults: dict[str, Any] | None = None
) -> JobConfig:
    """A job from an optional YAML file, with command-line ``overrides`` (``None`` values are
    "not given" and leave the file's value alone) and ``defaults`` for keys neither sets (the
    environment's, e.g. ``KERNEVO_GPU``).

    Raises:
        JobOptionError: an override does not validate (it, not the file, is at fault).
        JobConfigError: the file is unreadable, larger than ``MAX_JOB_FILE_BYTES``, not UTF-8,
            not YAML (syntax, a key given twice, nesting too deep, a value that cannot be
            converted), not a mapping, or does not validate.
    """
    data: dict[str, Any] = {}
    source = "job config"
    if file is not None:
        source = str(file)
        text = _read_job_file(Path(file), source)
        try:
            loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python tags
        except yaml.YAMLError as error:
            raise JobConfigError(f"{source}: {_yaml_reason(error)}") from None
        except RecursionError:
            raise JobConfigError(f"{source}: invalid YAML: nested too deeply") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise JobConfigError(f"{source}: expected a mapping of keys to values")
        data = loaded
    for key, value in (defaults or {}).items():
        data.setdefault(key, value)
    overridden: set[tuple[str, ...]] = set()
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "llm" and isinstance(value, dict):
            section = dict(data.get("llm") or {})
            given = {k: v for k, v in value.items() if v is not None}
            section.update(given)
            data["llm"] = section
            overridden.update(("llm", k) for k in given)
        else:
            data[key] = value
            overridden.add((key,))
    return validate_job_config(data, source, frozenset(overridden))
