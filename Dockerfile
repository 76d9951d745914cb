# syntax=docker/dockerfile:1
# The trimtab operator image. Two stages: the first builds trimtab's wheel and installs it with
# its dependencies into a venv; the second copies only that venv onto a clean slim base, so no
# compiler, pip cache or source tree ships.
#
# PYTHON_IMAGE is the base of both stages: any image with python3 (>= 3.11) and its venv module.
# The default is Docker Hub's slim Python. scripts/image.sh builds the same kind of image without
# a Docker daemon from a Debian base of its own (mmdebstrap: Debian's python3, no apt, no
# compiler), and that base works here too:
#   buildah bud --isolation chroot --build-arg PYTHON_IMAGE=localhost/trimtab-base:bookworm-... .
# (tests/image/test_dockerfile.py does exactly that). Pinned by tag; pin by digest as well
# (python:3.11.14-slim-bookworm@sha256:...) when you build releases, so a rebuilt tag cannot
# change the image under you.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (tests/chart/test_chart_image.py installs from these
# same paths).
COPY pyproject.toml README.md ./
COPY operator ./operator
# python3, not python: Debian's interpreter has no `python` name. Binary wheels only for the
# dependencies, so no compiler is needed (or shipped); pip itself does not go into the image.
RUN python3 -m venv /opt/trimtab \
 && /opt/trimtab/bin/python -m pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/trimtab/bin/python -m pip install --only-binary=:all: /wheels/trimtab-*.whl \
 && /opt/trimtab/bin/python -m pip check \
 && /opt/trimtab/bin/python -m pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="trimtab" \
      org.opencontainers.image.description="Kubernetes operator that balances LLM serving replicas by their real load" \
      org.opencontainers.image.licenses="Apache-2.0"
# The root filesystem is read-only in the chart: no .pyc writes, unbuffered logs for kubectl logs.
ENV PATH=/opt/trimtab/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/trimtab /opt/trimtab
# 65532 is the conventional "nonroot" uid (distroless); the chart runs as the same uid, and so
# does the image scripts/image.sh builds.
USER 65532:65532
EXPOSE 18000 9090 8080
ENTRYPOINT ["trimtab"]
CMD ["run", "--all-namespaces"]
