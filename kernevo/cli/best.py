"""``kernevo best``: ask the service for the champion kernel serving a problem, and show it."""

from __future__ import annotations

import argparse
from typing import Any

from kernevo.cli.errors import CliError
from kernevo.cli.op_options import _best_shape, _op_has_dtype
from kernevo.cli.service import _MALFORMED, _api_url, _get_json, _malformed


def _cmd_best(args: argparse.Namespace) -> int:
    from seeds.hardware import normalize_gpu_name

    _op_has_dtype(args)  # usage errors, before anything runs
    shape = _best_shape(args)
    gpu = args.gpu
    if gpu is None:
        from evolver.errors import NoGpuError
        from evolver.gpu import query_gpu

        try:
            gpu = query_gpu(args.device).key
        except NoGpuError as error:
            raise CliError(f"{error}; name the GPU with --gpu (e.g. --gpu nvidia-h200)") from None
    try:
        gpu_key = normalize_gpu_name(gpu)
    except ValueError as error:
        raise CliError(str(error)) from None
    base = _api_url(args.api_url)
    params = {"op": args.op, "dtype": args.dtype, "gpu": gpu_key, **shape}
    try:
        kernel = _get_json(f"{base}/v1/kernels/best", params)
    except CliError as error:
        said = str(error)
        # The service's answers that no kernel serves this shape: no champion, no path, or
        # every champion timed slower than the library there (api.routes.kernels).
        library_answers = ("no champion yet", "no path serves", "was measured slower than")
        if not any(answer in said for answer in library_answers):
            raise  # not the service's answer that this shape has no kernel
        # Say what an application gets there.
        from seeds.ops import get_op

        fallback = get_op(args.op).fallback_library
        raise CliError(f"{error}; kernevo.load falls back to {fallback} there") from None
    try:
        lines = _best_lines(kernel, args, gpu_key)
    except _MALFORMED as error:
        # A service's answer is data from elsewhere: a field missing or of the wrong type is
        # one line, like any other error of this command.
        raise _malformed(f"{base}/v1/kernels/best", error) from None
    print("\n".join(lines))
    return 0


def _best_lines(kernel: dict[str, Any], args: argparse.Namespace, gpu_key: str) -> list[str]:
    """``kernevo best``'s output for the service's answer ``kernel``.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: a field missing or of the wrong type.
    """
    from kernevo.client import describe_envelope
    from seeds.ops import get_op

    spec = get_op(args.op)
    shape = _best_shape(args)
    where = " ".join(f"{name}={value}" for name, value in shape.items())
    metrics = kernel.get("metrics", {})
    envelope = kernel.get("envelope", {})
    bounds = describe_envelope(envelope, spec.param_names)
    lines = [
        f"{args.op} {args.dtype} {where} on {gpu_key}: path {kernel['path']}, "
        f"shape bucket {kernel['shape_bucket']}",
        f"program {kernel['program_id']} ({kernel.get('program_uid', '?')}), promoted "
        f"{kernel['promoted_at']}",
        f"score {metrics.get('score', 0.0):.3f} (geometric-mean speedup over the vendor library)",
        *_compared_lines(kernel, where),
    ]
    for timing in metrics.get("timings", []):
        cand, base_us = timing.get("candidate_us", 0.0), timing.get("baseline_us", 0.0)
        speedup = base_us / cand if cand else 0.0
        timed = timing.get("shape") or [timing[name] for name in spec.param_names]
        timed_at = spec.assignments(list(timed), " ")
        lines.append(f"  {timed_at}: {cand:.2f} us vs {base_us:.2f} us ({speedup:.2f}x)")
    lines += [
        f"cubin {kernel['arch']} sha256 {kernel['cubin_sha256']}, NVRTC "
        f"{kernel.get('nvrtc_version')}, {len(kernel.get('cubin_b64', '')) * 3 // 4} bytes",
        f"launch {kernel['launch']['kernel']} (geometry from {kernel['launch']['config_kernel']})",
        f"envelope {bounds}, {len(envelope.get('verified_shapes', []))} verified shapes",
        f"compile options: {' '.join(kernel.get('compile_options', []))}",
        *_certificate_lines(kernel.get("certificate")),
    ]
    return lines


def _compared_lines(kernel: dict[str, Any], at: str) -> list[str]:
    """The paths the service compared for the answer (``candidates``, ``compared_by``; none
    from a service older than routing over several paths), one line each; ``at`` is the shape
    asked for (``m=32 n=32``)."""
    candidates = kernel.get("candidates") or []
    if not candidates:
        return []
    lines = [f"compared {len(candidates)} serving path(s) by {kernel.get('compared_by')}:"]
    for candidate in candidates:
        where = f"  {candidate.get('path')} (shape bucket {candidate.get('shape_bucket')}): "
        if candidate.get("status") == "no_champion":
            lines.append(where + "no champion")
            continue
        score, time_us = candidate.get("combined_score"), candidate.get("time_us")
        text = f"program {candidate.get('program_id')}, score "
        text += "not recorded" if score is None else f"{score:.3f}"
        text += "" if time_us is None else f", {time_us:.2f} us at {at}"
        status = candidate.get("status")
        mark = {"chosen": " (chosen)", "slower_than_vendor": " (timed slower than the library at "
                f"{at}: not served there)"}.get(status, "")  # fmt: skip
        lines.append(where + text + mark)
    return lines


def _certificate_lines(document: object) -> list[str]:
    """The summary of a served certificate, or one line saying there is none or it is unreadable."""
    from pydantic import ValidationError

    from kernevo.certificate import Certificate

    if document is None:
        return ["certificate: none (promoted before certificates)"]
    try:
        return Certificate.model_validate(document).summary()
    except ValidationError as error:
        return [f"certificate: unreadable ({error.error_count()} problems)"]
