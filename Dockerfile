# profscope: one image serving PyTorch profiler traces from a folder, S3, GCS or Azure Blob.
#
#   docker build -t profscope .
#   docker run -p 8080:8080 -v "$PWD/traces:/data:ro" profscope serve /data
#   docker run -p 8080:8080 profscope            # the built-in demo run
#
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module. Where Docker Hub is not reachable
# build on a local one: --build-arg BASE_IMAGE=localhost/debian-py:bookworm (see README).
ARG BASE_IMAGE=python:3.12-slim

# ---- build: a virtualenv with the dependencies (cached while pyproject.toml is unchanged), then profscope
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/profscope
WORKDIR /src
COPY pyproject.toml ./
# Only the dependency list: this layer survives every change to the code.
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && /opt/profscope/bin/pip install --no-cache-dir -r requirements.txt
# A C compiler for profscope's optional C parts (trace decoder, call-tree sweep), in this stage only.
# Without one (no apt-get, no package mirror) pip builds the pure-Python fallback: same results, slower.
# hadolint ignore=DL3008,SC2086
RUN pkgs="gcc libc6-dev"; \
    python3 -c "import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))" \
        || pkgs="$pkgs python3-dev"; \
    if command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; \
    then echo "profscope: compiling its C parts"; \
    else echo "profscope: no C compiler, pure-Python parser"; fi
COPY README.md setup.py ./
COPY server ./server
COPY web ./web
# A regular (non-editable) install of the package itself; dependencies are already there.
RUN /opt/profscope/bin/pip install --no-cache-dir --no-deps . \
    && /opt/profscope/bin/python -m compileall -q /opt/profscope/lib

# ---- runtime: the virtualenv, a non-root user and the cache volume
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="profscope" \
      org.opencontainers.image.description="Dashboard for PyTorch profiler traces" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 profscope \
    && useradd --system --uid 10001 --gid profscope --home-dir /var/cache/profscope --no-create-home \
        --shell /usr/sbin/nologin profscope \
    && mkdir -p /var/cache/profscope \
    && chown profscope:profscope /var/cache/profscope
COPY --from=build /opt/profscope /opt/profscope
ENV PATH=/opt/profscope/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROFSCOPE_HOST=0.0.0.0 \
    PROFSCOPE_PORT=8080 \
    PROFSCOPE_CACHE_DIR=/var/cache/profscope
VOLUME ["/var/cache/profscope"]
USER 10001:10001
WORKDIR /var/cache/profscope
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PROFSCOPE_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["profscope"]
CMD ["serve"]
