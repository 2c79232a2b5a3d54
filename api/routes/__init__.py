"""One router per resource: health, kernels, programs, jobs."""
