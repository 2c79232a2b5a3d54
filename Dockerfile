# kernevo: one image for the API service and the GPU evolution worker.
# The GPU driver comes from the host through the NVIDIA container runtime; CUDA's runtime and
# NVRTC come from the CuPy and nvidia-cuda-nvrtc wheels the package depends on. The CUDA devel
# image brings compute-sanitizer and ncu: a program becomes a champion only after
# compute-sanitizer passed it, so the worker needs the tool.
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-pip curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/kernevo
ENV PATH=/opt/kernevo/bin:/usr/local/cuda/bin:$PATH

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install . \
    && useradd --create-home kernevo \
    && mkdir -p /data/runs \
    && chown -R kernevo:kernevo /data

USER kernevo
WORKDIR /data
ENV KERNEVO_WORK_DIR=/data/runs \
    KERNEVO_DATABASE_URL=sqlite:////data/kernevo.db

EXPOSE 8000
CMD ["kernevo", "serve", "--host", "0.0.0.0"]
