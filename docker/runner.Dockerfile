# The runner image: contracts + runners and their storage/model client libraries.
# Build from the repository root:  docker build -f docker/runner.Dockerfile -t IMAGE .
# Runs as a non-root user with a read-only root filesystem (the controller mounts /tmp).

FROM python:3.11.10-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contracts contracts
COPY controller controller
COPY local local
COPY runners runners
RUN python -m venv /opt/longrun \
 && /opt/longrun/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/longrun/bin/pip install "$(ls /tmp/wheels/longrun-*.whl)[runner,sql-drivers]"

FROM python:3.11.10-slim-bookworm
LABEL dev.longrun.image="ghcr.io/longrun-dev/longrun-runner"
ENV PATH=/opt/longrun/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/longrun /opt/longrun
USER 65532:65532
ENTRYPOINT ["longrun-runner"]
