"""What the LLM is told: a system message with the path's semantics, its op's shapes, checks and
baseline, and the GPU's facts, and a diff-evolution template written for CUDA.

The system message is built per path from three sources: the path's spec (its semantics: the
kernel's entry point and storage; its envelope and timed shapes), the op registry (``seeds.ops``:
the op's shape parameters, their meanings and relations, which are also the launch-configuration
kernel's arguments), and :data:`OP_PROMPTS`, the sentences only this module knows per op (what
the fixed prelude defines, what the evaluator checks, the baseline the score is measured
against). An op with no entry there is refused (:class:`UnknownOpPromptError`), never given
another op's text.

OpenEvolve fills the user template with the parent program, its metrics, the evolution history
and the evaluator's artifacts (compile log, first failing check, per-shape timings, registers)
under "Last Execution Output". Two OpenEvolve defaults would hide that feedback and are turned
off in ``evolver.openevolve_config``: ``max_snapshot_artifacts`` (only the first 100 programs
keep artifacts in the prompt) and the artifact "security filter" (it replaces every run of 32+
letters and digits, which mangled C++ names and long identifiers in compiler logs are).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolver.gpu import GpuFacts
from evolver.offline_mutator import CURRENT_PROGRAM_HEADING
from seeds import ops
from seeds.spec import DTYPE_CODES, PathSpec

# Literal braces are doubled: OpenEvolve fills the template with str.format.
DIFF_USER_TEMPLATE = (
    """# Current Program Information
- Fitness (combined_score): {fitness_score}
- Feature coordinates: {feature_coords}
- Focus areas: {improvement_areas}

{artifacts}

# Program Evolution History
{evolution_history}

"""
    + CURRENT_PROGRAM_HEADING
    + """
```{language}
{current_program}
```

# Task
Make the kernel faster on this GPU without breaking correctness: the fitness is the geometric
mean speedup over the baseline the system message names, on the timed shapes, and any failed
check scores 0.
The search keeps diverse programs along these dimensions: {feature_dimensions}.
Read the evaluator's report above first: fix a compile error or a failing check before tuning.

Answer with one or more SEARCH/REPLACE blocks in exactly this format:

<<<<<<< SEARCH
#define BLOCK_THREADS 128  // tune: 64 128 256
=======
#define BLOCK_THREADS 256  // tune: 64 128 256
>>>>>>> REPLACE

Each SEARCH section must match lines of the current program exactly (whitespace included) and
lie inside the EVOLVE-BLOCK. Keep every change targeted; do not rewrite the whole file.
Briefly explain why each change should be faster before the blocks.
"""
)


class UnknownOpPromptError(ValueError):
    """A path's op has no entry in :data:`OP_PROMPTS` (one line naming the ops that have)."""


@dataclass(frozen=True)
class OpPrompt:
    """The sentences of the system message that depend on the op and that neither its registry
    entry nor the path's spec holds.

    ``prelude`` ends the sentence "the file is compiled with -DKERNEVO_DTYPE=<code> and …" (what
    the fixed prelude above the EVOLVE-BLOCK defines). ``checks`` says what the evaluator checks
    and how the candidate is timed; ``{envelope}`` and ``{baseline}`` in it are filled in.
    ``inputs``: one more rule on the inputs the checks use (empty: none). ``baseline``: what the
    candidate's speedup is measured against, as it reads in "<baseline> time / candidate time".
    """

    prelude: str
    checks: str
    inputs: str
    baseline: str


# Each text says what the op's evaluator suite does (docs/EVALUATOR.md; evaluator.op_suites).
OP_PROMPTS: dict[str, OpPrompt] = {
    "trsm": OpPrompt(
        prelude="the fixed prelude above the EVOLVE-BLOCK defines scalar_t, real_t and the kv_* "
        "arithmetic helpers.",
        checks="Every candidate is checked against a float64 reference on ragged and non-square "
        "shapes ({envelope}) with NaN-poisoned outputs, guard bands and a badly conditioned "
        "case, then timed against {baseline} with graph replay and checked again. A failed "
        "check scores 0.",
        inputs="Inputs also include scaled problems (A and B times huge and tiny powers of two: "
        "use scaled complex division), an Inf or NaN in A that must not spread to rows that do "
        "not depend on it (skip updates, never multiply by zero), and linearity, row-scaling and "
        "column-permutation relations between solves.",
        baseline="cuBLAS",
    ),
    "solve_tri": OpPrompt(
        prelude="the fixed prelude above the EVOLVE-BLOCK refuses any other value and defines "
        "ST_WARP (32) and ST_PRAGMA_UNROLL(n); there is no scalar_t: the type is float.",
        checks="Every candidate is checked batch by batch against a float64 reference on ragged "
        "shapes ({envelope}): bounded data in packed, padded and batch-swapped layouts (strides "
        "that are not packed; b3 as the inner batch dimension) and in place (X = B), and at "
        "n <= 64 ggml's own inputs judged by NMSE (at most 1e-7, or 4 times the baseline's "
        "NMSE on the same batch where that is larger). Guard bands around every tensor and the "
        "padding inside it must stay untouched, A's strict upper triangle holds NaN and X "
        "starts as NaN. Then it is timed against {baseline} with graph replay on fresh inputs "
        "and checked again. A failed check scores 0.",
        inputs="Each row of each batch is judged on its own (max_j |x_ij - x_ref_ij| / max_j "
        "|x_ref_ij| within its componentwise bound), so a row that is skipped, zeroed or taken "
        "from another batch fails however small it is.",
        baseline="cuBLAS's batched TRSM",
    ),
    "trsm_batched": OpPrompt(
        prelude="the fixed prelude above the EVOLVE-BLOCK defines scalar_t, real_t and the kv_* "
        "arithmetic helpers.",
        checks="Every candidate is checked batch index by batch index against a float64 "
        "(complex128) reference on ragged shapes ({envelope}) at batch 1, 3 and 1000, every "
        "batch index on different data; guard bands around A and B must stay untouched and A's "
        "strict upper triangle holds NaN. Then it is timed against {baseline} with graph replay "
        "on fresh inputs and checked again. A failed check scores 0.",
        inputs="Each row of each batch index is judged on its own (max_j |x_ij - x_ref_ij| / "
        "max_j |x_ref_ij| within its componentwise bound), so a row that is skipped, zeroed or "
        "solved with another batch index's A fails however small it is; a batch that is not a "
        "multiple of a per-block batch tile must still be solved exactly.",
        baseline="cuBLAS ?trsmBatched",
    ),
    "band_bidiag": OpPrompt(
        prelude="the fixed prelude above the EVOLVE-BLOCK defines scalar_t (float or double), "
        "KV_WARP (32) and KV_AB(i, j), a_ij in the padded band storage (ab, ldab and ku in "
        "scope).",
        checks="Every candidate's (d, e) is judged by its singular values against LAPACK DGBBRD "
        "+ DBDSQR in float64 on ragged shapes ({envelope}): max_i |s_i - s_ref_i| / s_ref_1 <= "
        "4 max(n, 32) eps (eps the dtype's machine epsilon), on random bands, bands with zero "
        "rows or repeated blocks and, at n <= 2048, bands built from the paper's spectra "
        "(arithmetic, log-decay, quarter-circle, repeated, rank-deficient). The padded storage "
        "sits between guard bands, the caller's band must stay unchanged, and the reduction "
        "captured in a graph must give the launch-by-launch bits. Then it is timed against "
        "{baseline} with graph replay on fresh bands and checked again. A failed check scores "
        "0.",
        inputs="",
        baseline="LAPACK ?gbbrd (single-threaded, on the host CPU)",
    ),
}


def op_prompt(op: str) -> OpPrompt:
    """The op's entry of :data:`OP_PROMPTS`.

    Raises:
        UnknownOpPromptError: the op has none.
    """
    try:
        return OP_PROMPTS[op]
    except KeyError:
        raise UnknownOpPromptError(
            f"no prompt text for op {op!r} (evolver.prompts.OP_PROMPTS has {', '.join(OP_PROMPTS)})"
        ) from None


def envelope_words(envelope: dict[str, int], op: ops.OpSpec) -> str:
    """``envelope`` as inequalities over ``op``'s parameters in order, neighbours with the same
    bounds joined (``1 <= m, n <= 64``; ``m = 64, 1 <= n <= 64``; a missing lower bound is 1, as
    ``PathSpec.serves`` reads it), then the op's relations (``bandwidth <= n - 1``)."""
    groups: list[tuple[list[str], int, int]] = []
    for name in op.param_names:
        low, high = envelope.get(f"{name}_min", 1), envelope[f"{name}_max"]
        if groups and groups[-1][1:] == (low, high):
            groups[-1][0].append(name)
        else:
            groups.append(([name], low, high))
    clauses = [
        f"{', '.join(names)} = {low}" if low == high else f"{low} <= {', '.join(names)} <= {high}"
        for names, low, high in groups
    ]
    return ", ".join(clauses + [relation.text for relation in op.relations])


def shapes_section(spec: PathSpec) -> str:
    """The op's shape parameters with their meanings, the path's envelope, the job's bucket
    (for a path with several) and the timed shapes, in the op's own terms."""
    op = ops.get_op(spec.op)
    params = "; ".join(f"{p.name}: {p.meaning}" for p in op.params)
    text = (
        f"The op is {op.name}; a shape is ({', '.join(op.param_names)}) ({params}). This path "
        f"serves {envelope_words(spec.envelope, op)}."
    )
    bucket = next((b for b in spec.buckets if b.name == spec.shape_bucket), None)
    if bucket is not None:
        text += (
            f" This job evolves its kernel for the shape bucket {bucket.name}: "
            f"{envelope_words(bucket.envelope, op)}."
        )
    timed = "; ".join(spec.shape_text(shape) for shape in spec.timed_shapes)
    return text + f" Timed shapes: {timed}."


def system_message(spec: PathSpec, dtype: str, gpu: GpuFacts | None) -> str:
    """The system message for every iteration of a job on ``spec`` in ``dtype``.

    ``gpu`` is ``None`` in compile-only mode: the message then says no GPU is attached.

    Raises:
        UnknownOpPromptError: ``spec``'s op has no entry in :data:`OP_PROMPTS`.
    """
    words = op_prompt(spec.op)
    op = ops.get_op(spec.op)
    if gpu is None:
        gpu_text = (
            "No GPU is attached to this job (compile-only mode): candidates are compiled with "
            "NVRTC but never run, so every score is 0. Keep candidates compiling cleanly."
        )
        optin = "the device's opt-in limit"
    else:
        gpu_text = gpu.describe() + "."
        optin = f"{gpu.shared_per_block_optin} bytes"
    checks = words.checks.format(
        envelope=envelope_words(spec.envelope, op), baseline=words.baseline
    )
    inputs = f"- {words.inputs}\n" if words.inputs else ""
    return f"""You are an expert CUDA kernel engineer. You optimize one GPU kernel for speed on \
one specific GPU, and you never trade correctness for speed.

## The operation ({spec.path_id}, {dtype})
{spec.semantics}
The scalar type is {dtype}: the file is compiled with -DKERNEVO_DTYPE={DTYPE_CODES[dtype]} and \
{words.prelude}

## Shapes
{shapes_section(spec)}

## The GPU
{gpu_text}

## Rules
- Only code between `// EVOLVE-BLOCK-START` and `// EVOLVE-BLOCK-END` may change; edits outside \
are reverted. Keep both markers.
- NVRTC compiles the file to a cubin for the GPU's real architecture. There is no host code and \
no CUDA header (NVRTC ships none): stay header-free.
- You own the launch geometry: `kernevo_launch_config({", ".join(op.param_names)}, cfg)` writes \
grid x/y/z, block x/y/z and dynamic shared-memory bytes to cfg[0..6]; the driver calls it once \
per shape, with the shape's values in this order. Static `__shared__` arrays stop at 48 KB; \
beyond that use dynamic shared memory (up to {optin} per block, the driver opts the kernel in).
- Tunables are declared as `#define NAME VALUE  // tune: v1 v2 ...`: any declared value is legal, \
and you may declare new tunables the same way.
- {checks}
{inputs}- combined_score is the geometric mean over the timed shapes of {words.baseline} time / \
candidate time, a shape whose speedup is within the measured noise floor of 1 counting as 1; \
speedup_64 is that ratio at the largest timed shape.
"""


def write_templates(directory: Path) -> Path:
    """Write the job's prompt templates (OpenEvolve's ``prompt.template_dir``) and return the
    directory. Templates not written here keep OpenEvolve's defaults."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "diff_user.txt").write_text(DIFF_USER_TEMPLATE)
    return directory
