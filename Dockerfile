# syntax=docker/dockerfile:1
# capmaas operator image. Build: `make image` (daemonless, buildah; what CI builds and the Pod tests run) or
# `make docker-build` where a Docker engine exists. Both run `pip wheel` on the host first (build/image/wheels):
# the image build installs only those wheels (`--no-index`) and needs no network.
#
# Two stages: the builder installs capmaas (the product's wheel only: the development tools, distribution
# capmaas-dev under tools/, are never built for the image) and its pinned dependencies into a venv; the final
# stage is the same Python base with only that venv copied in (no pip cache, no build tools, no sources),
# running as the non-root uid/gid 65532 the Helm chart's securityContext expects. The root filesystem can be
# read-only: bytecode is compiled at build time and nothing is written at run time except /tmp (an emptyDir in
# the chart).
#
# The base is pinned by digest: PYTHON_IMAGE (a repository) and PYTHON_DIGEST (sha256:...) are both required.
# `make image` passes its local Debian base (mmdebstrap: python3, python3-venv, passwd, ca-certificates);
# `make docker-build` passes python:3.11-slim-bookworm at the digest given in PYTHON_DIGEST. The base needs
# python3 with venv and ensurepip, groupadd/useradd, and CA certificates.

ARG PYTHON_IMAGE
ARG PYTHON_DIGEST

FROM ${PYTHON_IMAGE}@${PYTHON_DIGEST} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# The venv never gets a pip of its own: `python -m venv` with pip runs ensurepip, which installs and compiles
# pip and setuptools (about 5 s of CPU a build) only for the image to uninstall them. Instead the pip that
# ensurepip would install, the base's bundled wheel (Debian: /usr/share/python-wheels; python.org builds:
# ensurepip/_bundled), runs from its zip with the venv's Python and installs into the venv.
RUN python -m venv --without-pip /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY build/image/wheels/ /wheels/
# Bytecode is compiled once here, keyed by a hash of its source instead of the source's mtime
# (unchecked-hash): the install time is then nowhere in the image, so the same wheels give the same layers
# (`make release` checks the digest), and a pyc never looks stale when --timestamp clamps the files' mtimes.
RUN whl= \
 && for f in /usr/share/python-wheels/pip-*.whl /usr/local/lib/python3*/ensurepip/_bundled/pip-*.whl; do \
      if [ -f "$f" ]; then whl=$f; break; fi; \
    done \
 && if [ -z "$whl" ]; then echo "no bundled pip wheel in the base" >&2; exit 1; fi \
 && PYTHONPATH="$whl" python -m pip install --no-compile --no-index --find-links=/wheels capmaas \
 && python -m compileall -q --invalidation-mode unchecked-hash /opt/venv \
 && capmaas --help >/dev/null

FROM ${PYTHON_IMAGE}@${PYTHON_DIGEST}
# The release build passes the commit time: useradd writes it (not today's date) as the password change day
# in /etc/shadow. Unset when empty (shadow complains about an empty value).
ARG SOURCE_DATE_EPOCH=
LABEL org.opencontainers.image.title="capmaas" \
      org.opencontainers.image.description="Cluster API infrastructure provider for MAAS (kopf operator)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN if [ -z "$SOURCE_DATE_EPOCH" ]; then unset SOURCE_DATE_EPOCH; fi \
 && groupadd --system --gid 65532 capmaas \
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
