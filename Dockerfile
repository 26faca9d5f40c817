# syntax=docker/dockerfile:1
# capmaas operator image. Build: `make docker-build` (needs a container engine; the project's CI has none).
#
# Two stages: the builder installs capmaas and its pinned dependencies into a venv; the final stage is a slim
# Python with only that venv copied in (no pip cache, no build tools, no sources), running as the non-root
# uid/gid 65532 the Helm chart's securityContext expects. The root filesystem can be read-only: bytecode is
# compiled at build time and nothing is written at run time except /tmp (an emptyDir in the chart).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependency metadata first, so the layer with the sources changes more often than the one above it.
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . \
 && python -m compileall -q /opt/venv \
 && capmaas --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="capmaas" \
      org.opencontainers.image.description="Cluster API infrastructure provider for MAAS (kopf operator)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 capmaas \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
            --shell /usr/sbin/nologin capmaas
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /tmp
# 8080: liveness (/healthz); 9090: Prometheus metrics. The chart's probes and Service use these.
EXPOSE 8080 9090
ENTRYPOINT ["capmaas"]
CMD ["run"]
