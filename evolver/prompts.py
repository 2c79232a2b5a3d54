"""What the LLM is told: a system message with the path's semantics and the GPU's facts, and a
diff-evolution template written for CUDA.

OpenEvolve fills the user template with the parent program, its metrics, the evolution history
and the evaluator's artifacts (compile log, first failing check, per-shape timings, registers)
under "Last Execution Output". Two OpenEvolve defaults would hide that feedback and are turned
off in ``evolver.openevolve_config``: ``max_snapshot_artifacts`` (only the first 100 programs
keep artifacts in the prompt) and the artifact "security filter" (it replaces every run of 32+
letters and digits, which mangled C++ names and long identifiers in compiler logs are).
"""

from __future__ import annotations

from pathlib import Path

from evolver.gpu import GpuFacts
from evolver.offline_mutator import CURRENT_PROGRAM_HEADING
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
mean speedup over cuBLAS on the timed shapes, and any failed check scores 0.
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


def system_message(spec: PathSpec, dtype: str, gpu: GpuFacts | None) -> str:
    """The system message for every iteration of a job on ``spec`` in ``dtype``.

    ``gpu`` is ``None`` in compile-only mode: the message then says no GPU is attached.
    """
    if gpu is None:
        gpu_text = (
            "No GPU is attached to this job (compile-only mode): candidates are compiled with "
            "NVRTC but never run, so every score is 0. Keep candidates compiling cleanly."
        )
        optin = "the device's opt-in limit"
    else:
        gpu_text = gpu.describe() + "."
        optin = f"{gpu.shared_per_block_optin} bytes"
    return f"""You are an expert CUDA kernel engineer. You optimize one GPU kernel for speed on \
one specific GPU, and you never trade correctness for speed.

## The operation ({spec.path_id}, {dtype})
{spec.semantics}
The scalar type is {dtype}: the file is compiled with -DKERNEVO_DTYPE={DTYPE_CODES[dtype]} and \
the fixed prelude above the EVOLVE-BLOCK defines scalar_t, real_t and the kv_* arithmetic helpers.

## The GPU
{gpu_text}

## Rules
- Only code between `// EVOLVE-BLOCK-START` and `// EVOLVE-BLOCK-END` may change; edits outside \
are reverted. Keep both markers.
- NVRTC compiles the file to a cubin for the GPU's real architecture. There is no host code and \
no CUDA header (NVRTC ships none): stay header-free.
- You own the launch geometry: `kernevo_launch_config(m, n, cfg)` writes grid x/y/z, block \
x/y/z and dynamic shared-memory bytes to cfg[0..6]; the driver calls it once per shape. Static \
`__shared__` arrays stop at 48 KB; beyond that use dynamic shared memory (up to {optin} per \
block, the driver opts the kernel in).
- Tunables are declared as `#define NAME VALUE  // tune: v1 v2 ...`: any declared value is legal, \
and you may declare new tunables the same way.
- Every candidate is checked against a float64 reference on ragged and non-square shapes \
(1 <= m, n <= 64) with NaN-poisoned outputs, guard bands and a badly conditioned case, then \
timed against cuBLAS with graph replay and checked again. A failed check scores 0.
- Inputs also include scaled problems (A and B times huge and tiny powers of two: use scaled \
complex division), an Inf or NaN in A that must not spread to rows that do not depend on it \
(skip updates, never multiply by zero), and linearity, row-scaling and column-permutation \
relations between solves.
- combined_score is the geometric mean over the timed shapes of cuBLAS time / candidate time, a \
shape whose speedup is within the measured noise floor of 1 counting as 1; speedup_64 is that \
ratio at the largest timed shape.
"""


def write_templates(directory: Path) -> Path:
    """Write the job's prompt templates (OpenEvolve's ``prompt.template_dir``) and return the
    directory. Templates not written here keep OpenEvolve's defaults."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "diff_user.txt").write_text(DIFF_USER_TEMPLATE)
    return directory
