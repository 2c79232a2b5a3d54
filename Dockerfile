# kernevo: one image for the API service and the GPU evolution worker.
# The GPU driver comes from the host through the NVIDIA container runtime; CUDA's runtime and
# NVRTC come from the CuPy and nvidia-cuda-nvrtc wheels the package depends on.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install . \
    && useradd --create-home --uid 1000 kernevo \
    && mkdir -p /data/runs \
    && chown -R kernevo:kernevo /data

USER kernevo
WORKDIR /data
ENV KERNEVO_WORK_DIR=/data/runs \
    KERNEVO_DATABASE_URL=sqlite:////data/kernevo.db

EXPOSE 8000
CMD ["kernevo", "serve", "--host", "0.0.0.0"]
