# gpuplan images. `docker build .` builds the API (the last stage);
# `docker build --target agent .` builds the GPU agent, which adds torch;
# `docker build --target worker .` builds the job worker, which adds CPU torch and
# transformers (the trace extra). The package is built once, in the compile stage: mypyc
# compiles the planning core's hot modules to C there ([tool.gpuplan] compiled in
# pyproject.toml; docs/recommendation.md, "Speed"), on the full Python image, which has the
# compiler. Every other dependency ships as a wheel, so no other stage needs one, and no
# final image holds one.
# The two images carry the same Python minor version: the compiled modules are built for it.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG COMPILE_IMAGE=python:3.11-bookworm

FROM ${COMPILE_IMAGE} AS compile
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md constraints.txt ./
COPY service ./service
RUN python -m venv /opt/compile \
    && /opt/compile/bin/pip install --no-cache-dir -c constraints.txt mypy "setuptools>=69" \
    && GPUPLAN_COMPILE=1 /opt/compile/bin/pip wheel --no-cache-dir --no-build-isolation \
        --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY constraints.txt ./
COPY --from=compile /wheels /wheels
RUN python -m venv /opt/gpuplan \
    && /opt/gpuplan/bin/pip install --no-cache-dir -c constraints.txt /wheels/gpuplan-*.whl

FROM build AS build-agent
# PyPI's default torch wheel for linux x86_64 is the CUDA build the agent needs on GPU nodes.
# The agent extra adds nvidia-ml-py (NVML); without it the agent falls back to CPU mode.
RUN wheel=$(ls /wheels/gpuplan-*.whl) \
    && /opt/gpuplan/bin/pip install --no-cache-dir -c constraints.txt "${wheel}[torch,agent]"

FROM build AS build-worker
# Traces run on fake tensors: no GPU, so the CPU build of torch (a tenth of the CUDA
# wheel's size) from PyTorch's CPU wheel index, then the trace extra (transformers).
ARG TORCH_VERSION=2.13.0
RUN /opt/gpuplan/bin/pip install --no-cache-dir \
        --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}" \
    && wheel=$(ls /wheels/gpuplan-*.whl) \
    && /opt/gpuplan/bin/pip install --no-cache-dir -c constraints.txt "${wheel}[trace]"

FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/gpuplan/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed numeric uid lets Kubernetes enforce runAsNonRoot without reading /etc/passwd.
RUN groupadd --system --gid 10001 gpuplan \
    && useradd --system --no-log-init --no-create-home --uid 10001 --gid 10001 gpuplan
WORKDIR /tmp

FROM runtime AS agent
COPY --from=build-agent /opt/gpuplan /opt/gpuplan
USER 10001:10001
EXPOSE 9400
CMD ["gpuplan", "agent"]

FROM runtime AS worker
COPY --from=build-worker /opt/gpuplan /opt/gpuplan
USER 10001:10001
# transformers never reaches the hub; its caches go to the pod's writable /tmp.
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/huggingface HOME=/tmp
EXPOSE 9500
CMD ["gpuplan", "worker"]

FROM runtime AS api
COPY --from=build /opt/gpuplan /opt/gpuplan
USER 10001:10001
ENV GPUPLAN_HOST=0.0.0.0 GPUPLAN_PORT=8000
EXPOSE 8000
CMD ["gpuplan", "serve"]
