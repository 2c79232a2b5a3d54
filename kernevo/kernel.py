"""Turning a verified champion into a launchable kernel on this device.

The cubin the service verified is loaded as is. Only when the champion was built for another
architecture than this device's is its source recompiled (``evaluator.compile.compile_cubin``,
the one part of the evaluator the loader may use), with the same options and ``-arch``
replaced — and only when every option is one the path's spec produces (:func:`refused_option`):
an option such as ``-I``, ``--include-path``, ``-include`` or ``--pre-include`` would let a
champion's source read files of the loading machine. The kernel is launched through the driver
its path's spec names (``seeds.spec.PathSpec.driver``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from kernevo.paths import registry

if TYPE_CHECKING:
    # A type only: kernevo.client brings httpx and pydantic, which importing the solver (and so
    # `from kernevo import load`) need not pay for.
    from kernevo.client import ChampionKernel


class KernelDriver(Protocol):
    """What the loader needs from a path driver (``seeds.spec.PathDriver``): a ``solve`` on the
    op's operands, called as the op's call adapter says (``seeds.ops.OpCall.run``; trsm's
    ``solve(a, b, stream)`` solves in place in ``b`` on ``stream``, ``None``: CuPy's current
    stream), validating the launch geometry and raising before it writes anything.
    """

    def solve(self, *operands: Any, **options: Any) -> Any: ...


DriverFactory = Callable[[str, bytes, str], KernelDriver]
"""``(path_id, cubin, dtype) -> driver``: loads the cubin in the current CUDA context."""

CompileFn = Callable[[str, list[str], str], bytes]
"""``(source, options, arch) -> cubin``."""

# An architecture option: the loader replaces it with its own device's (retarget_options).
_ARCH_OPTION = re.compile(r"^(?:-arch=|--gpu-architecture=)sm_[0-9]{2,3}[af]?$")


def path_driver(path_id: str, cubin: bytes, dtype: str) -> KernelDriver:
    """The driver of ``path_id`` over ``cubin`` for ``dtype`` (the default driver factory): the
    one its spec names, imported at the first launch.

    Raises:
        seeds.registry.UnknownPathError: the registry holds no path ``path_id``.
        Exception: whatever the driver raises while loading the module.
    """
    return registry.get_path(path_id).driver(cubin, dtype)


def retarget_options(options: tuple[str, ...] | list[str], arch: str) -> list[str]:
    """``options`` with every ``-arch=…``/``--gpu-architecture=…`` replaced by ``-arch=<arch>``.

    ``("-arch=sm_80", "-std=c++17")`` → ``["-arch=sm_90", "-std=c++17"]`` for ``"sm_90"``;
    ``-arch=<arch>`` is added first when no option names an architecture.
    """
    prefixes = ("-arch=", "--gpu-architecture=")
    kept = [option for option in options if not option.startswith(prefixes)]
    return [f"-arch={arch}", *kept]


def refused_option(champion: ChampionKernel) -> str | None:
    """The first NVRTC option of ``champion`` outside the allow-list, as an ``explain()`` line
    (``"compile option not allowed: '-I/etc'"``), or ``None`` when all are allowed.

    Allowed: an architecture (``-arch=sm_XX``, ``--gpu-architecture=sm_XX``) and exactly the
    other options the champion's path spec produces for its dtype
    (``seeds.spec.PathSpec.compile_options``: ``-std=c++17``, ``-DKERNEVO_DTYPE=<code of the
    dtype>`` and the path's fixed extras). Anything else — include paths, pre-includes, other
    macros, another dtype's code — is refused.

    Raises:
        seeds.registry.UnknownPathError, seeds.spec.UnknownDtypeError: the champion names a path
            or dtype the registry does not serve (the resolver routes only to served ones).
    """
    spec = registry.get_path(champion.path)
    produced = spec.compile_options(champion.dtype, "sm_90")
    allowed = {option for option in produced if not _ARCH_OPTION.match(option)}
    for option in champion.compile_options:
        if not (_ARCH_OPTION.match(option) or option in allowed):
            return f"compile option not allowed: {option!r}"
    return None


def compile_for_arch(source: str, options: list[str], arch: str) -> bytes:
    """Compile ``source`` to a cubin for ``arch`` with NVRTC (the default compile function).

    Raises:
        RuntimeError: NVRTC produced no cubin (the message carries the start of the log), or
            this is the light loader install, which has no compiler.
    """
    try:
        from evaluator.compile import compile_cubin
    except ModuleNotFoundError as error:
        if error.name != "evaluator":
            raise
        # The light `kernevo` wheel has no compiler: only kernevo-service ships the sandboxed one.
        raise RuntimeError(
            f"recompiling for {arch} needs the kernevo-service distribution (its sandboxed "
            "NVRTC); this install holds the loader alone"
        ) from None
    result = compile_cubin(source, options, arch)
    if not result.ok or not result.cubin:
        raise RuntimeError(f"recompiling for {arch} failed: {result.log[:500]}")
    return bytes(result.cubin)


def build_driver(
    champion: ChampionKernel,
    arch: str,
    *,
    driver_factory: DriverFactory = path_driver,
    compile_fn: CompileFn = compile_for_arch,
) -> KernelDriver:
    """A driver for ``champion`` on a device of ``arch`` (e.g. ``"sm_90"``).

    Raises:
        ValueError: the champion's kernel names are not the ones its path declares, or it must
            be recompiled and has an option outside the allow-list (:func:`refused_option`).
        Exception: recompiling or loading the module failed (the caller falls back to cuBLAS).
    """
    spec = registry.get_path(champion.path)
    names = (champion.kernel_name, champion.config_kernel_name)
    if names != (spec.kernel_name, spec.config_kernel_name):
        raise ValueError(
            f"champion launches {names}, path {spec.path_id} declares "
            f"{(spec.kernel_name, spec.config_kernel_name)}"
        )
    cubin = champion.cubin
    if champion.arch != arch:
        refused = refused_option(champion)
        if refused is not None:
            raise ValueError(refused)
        cubin = compile_fn(champion.source, retarget_options(champion.compile_options, arch), arch)
    return driver_factory(champion.path, cubin, champion.dtype)
