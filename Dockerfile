# The project image: the code, its pinned dependencies (CPU torch) and the executor extras.
# Every Dagster step pod (k8s_job_executor), the code server and a Dask worker run this image;
# the data directory is NOT in it: it is the shared volume mounted at $DAGSTER_IR_DATA.
#
#   docker build -t registry.example.org/dagster-ir:0.1.0 .
#   docker push registry.example.org/dagster-ir:0.1.0
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    DAGSTER_IR_DATA=/data \
    DAGSTER_HOME=/opt/dagster/dagster_home

WORKDIR /opt/dagster/app
# Dependencies first (a layer that changes only with pyproject.toml); torch's CPU wheel index, or
# for GPU nodes a CUDA one: docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cuXYZ
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
RUN mkdir -p dagster_ir assets && touch dagster_ir/__init__.py assets/__init__.py \
 && pip install --extra-index-url "$TORCH_INDEX" ".[dask,k8s]" \
 && pip uninstall -y dagster-ir
COPY dagster_ir ./dagster_ir
COPY assets ./assets
COPY workspace.yaml ./
RUN pip install --no-deps . && mkdir -p /data "$DAGSTER_HOME"

# The Helm chart's user-code deployment runs this code server; steps run `dagster api execute_step`.
EXPOSE 3030
CMD ["dagster", "api", "grpc", "-h", "0.0.0.0", "-p", "3030", "-m", "assets.definitions"]
