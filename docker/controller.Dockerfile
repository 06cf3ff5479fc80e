# The controller image: contracts + controller + local (kubernetes client, croniter).
# Build from the repository root:  docker build -f docker/controller.Dockerfile -t IMAGE .
# Runs as a non-root user with a read-only root filesystem (the chart mounts /tmp).

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
 && /opt/longrun/bin/pip install /tmp/wheels/longrun-*.whl

FROM python:3.11.10-slim-bookworm
LABEL dev.longrun.image="ghcr.io/longrun-dev/longrun-controller"
ENV PATH=/opt/longrun/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/longrun /opt/longrun
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["longrun"]
CMD ["controller"]
