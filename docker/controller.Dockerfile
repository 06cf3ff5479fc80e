# The controller image: contracts + controller + local + batchapi (kubernetes client, croniter,
# prometheus_client; boto3 for `longrun batch-api --s3-bucket`, the chart's Batch API server).
# Not runners/: the controller never imports it.
# Build from the repository root:  docker build -f docker/controller.Dockerfile -t IMAGE .
# Runs as a non-root user with a read-only root filesystem (the chart mounts /tmp).
#
# No pip, setuptools or wheel anywhere in the image:
# - the venv is made --without-pip, and the build stage's own pip installs into it (--python);
# - the base image's pip, setuptools, wheel and ensurepip are deleted in the `runtime` stage,
#   and the final image is that stage's filesystem copied onto `scratch` as one layer, so the
#   deleted files are not in a lower layer either.
# Base image: python:3.11.10-slim-bookworm, pinned by digest (the multi-arch index); bump
# the tag and the digest together, in all three FROM lines.

FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16 AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contracts contracts
COPY controller controller
COPY local local
COPY batchapi batchapi
RUN python -m venv --without-pip /opt/longrun \
 && python -m pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && python -m pip --python /opt/longrun/bin/python install "$(ls /tmp/wheels/longrun-*.whl)[batch-api]" \
 && rm -f /opt/longrun/bin/longrun-runner

FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16 AS runtime
RUN rm -rf /usr/local/bin/pip /usr/local/bin/pip3* /usr/local/bin/wheel \
    /usr/local/lib/python3.11/ensurepip \
    /usr/local/lib/python3.11/site-packages/pip /usr/local/lib/python3.11/site-packages/pip-* \
    /usr/local/lib/python3.11/site-packages/setuptools /usr/local/lib/python3.11/site-packages/setuptools-* \
    /usr/local/lib/python3.11/site-packages/pkg_resources /usr/local/lib/python3.11/site-packages/_distutils_hack \
    /usr/local/lib/python3.11/site-packages/distutils-precedence.pth \
    /usr/local/lib/python3.11/site-packages/wheel /usr/local/lib/python3.11/site-packages/wheel-* \
 && python -c "import importlib.util as u, sys; left = [m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)]; sys.exit(f'still importable: {left}' if left else None)"

FROM scratch
LABEL dev.longrun.image="ghcr.io/longrun-dev/longrun-controller"
COPY --from=runtime / /
COPY --from=build /opt/longrun /opt/longrun
ENV PATH=/opt/longrun/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["longrun"]
CMD ["controller"]
