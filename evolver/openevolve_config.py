"""The OpenEvolve ``Config`` of a job, built in code from a validated ``JobConfig``.

Each setting that departs from OpenEvolve's default says why; DESIGN.md's "Known pitfalls"
explain most of them.
"""

from __future__ import annotations

from pathlib import Path

from openevolve.config import (
    Config,
    DatabaseConfig,
    EvaluatorConfig,
    EvolutionTraceConfig,
    LLMConfig,
    LLMModelConfig,
    PromptConfig,
)

from evolver.job_config import JobConfig

# MAP-Elites axes: metrics our evaluator returns as numbers on every outcome, failures included
# (OpenEvolve drops a child whose feature dimension is missing).
FEATURE_DIMENSIONS: tuple[str, ...] = ("registers", "speedup_64")
# Spawned pool workers are recycled after this many iterations (bounded memory growth);
# setting it also makes Python 3.11's ProcessPoolExecutor spawn rather than fork.
MAX_TASKS_PER_CHILD = 50


def build_config(
    job: JobConfig,
    *,
    models: list[LLMModelConfig],
    system_message: str,
    template_dir: Path,
    output_dir: Path,
    parallel_evaluations: int = 1,
) -> Config:
    """OpenEvolve's configuration for ``job``.

    ``models`` come from ``evolver.llm.model_configs``; ``system_message`` and ``template_dir``
    from ``evolver.prompts``; ``output_dir`` holds checkpoints, logs, artifacts and the trace.
    ``parallel_evaluations``: OpenEvolve's pool workers, each running one iteration (prompt,
    LLM, evaluation) at a time: 1 on the local GPU; on a Dask cluster the candidates kept in
    flight (``evolver.cluster``).
    """
    llm = job.llm
    return Config(
        max_iterations=job.iterations,
        checkpoint_interval=job.checkpoint_interval,
        log_level="INFO",
        log_dir=str(output_dir / "logs"),
        random_seed=job.seed,
        # OpenEvolve's language guess calls CUDA "cpp" or even "python".
        language="cuda",
        file_suffix=".cu",
        llm=LLMConfig(
            models=models,
            evaluator_models=list(models),
            api_base=models[0].api_base,
            api_key=models[0].api_key,
            temperature=llm.temperature,
            max_tokens=llm.max_tokens,
            timeout=llm.timeout_s,
            retries=llm.retries,
            retry_delay=5,
        ),
        prompt=PromptConfig(
            template_dir=str(template_dir),
            system_message=system_message,
            num_top_programs=job.num_top_programs,
            num_diverse_programs=job.num_diverse_programs,
            include_artifacts=True,
            # The filter replaces runs of 32+ alphanumerics (mangled names in compiler logs);
            # artifacts are our evaluator's own output and hold no secrets.
            artifact_security_filter=False,
            # Kernels are long by nature; "simplify, the code exceeds 500 chars" is noise.
            suggest_simplification_after_chars=None,
        ),
        database=DatabaseConfig(
            in_memory=True,
            population_size=job.population,
            archive_size=job.archive,
            num_islands=job.islands,
            feature_dimensions=list(FEATURE_DIMENSIONS),
            feature_bins=job.feature_bins,
            migration_interval=job.migration_interval,
            random_seed=job.seed,
            # Default 100: later parents would lose their compile logs and failing checks.
            max_snapshot_artifacts=None,
            artifacts_base_path=str(output_dir / "artifacts"),
        ),
        evaluator=EvaluatorConfig(
            # Larger than our evaluator's hard timeout, so ours fires first and the child keeps
            # its feature dimensions (score 0, status "timeout").
            timeout=job.evaluator_timeout_s,
            # Failures come back as data; an exception is an infrastructure bug, and repeating a
            # GPU evaluation three times would only triple the time to see it.
            max_retries=0,
            # evaluator/openevolve_entry.evaluate runs the cascade (screen, compile, quick
            # check, full check and timing) itself; OpenEvolve's cascade would keep stage-1
            # metrics when its own stage-2 timeout fires.
            cascade_evaluation=False,
            # One timed candidate per GPU at a time: one on the local GPU; on a Dask cluster
            # each worker runs one at a time and the job keeps several in flight.
            parallel_evaluations=parallel_evaluations,
            use_llm_feedback=False,
            enable_artifacts=True,
        ),
        evolution_trace=EvolutionTraceConfig(
            enabled=True,
            format="jsonl",
            include_code=False,
            # Prompts already go to the checkpoints; the lineage recorder reads the responses
            # of failed iterations from the tracer call itself.
            include_prompts=False,
            include_failures=True,
            output_path=str(output_dir / "evolution_trace.jsonl"),
            buffer_size=1,
        ),
        diff_based_evolution=True,
        full_rewrite_probability=0.0,
        max_code_length=job.max_code_length,
        # Edits outside the EVOLVE-BLOCK are reverted; a diff that only touches outside fails.
        enforce_evolve_blocks=True,
        max_tasks_per_child=MAX_TASKS_PER_CHILD,
    )
