# history-proxy: `docker build -t history-proxy .` (or `podman build`), then
# `docker run --read-only --tmpfs /tmp -p 127.0.0.1:8080:8080 history-proxy` forwards to OpenAI and
# Anthropic with the client's key, `-e HISTORY_PROXY_MOCK=1` answers from the built-in mock, and
# `-e OPENAI_API_KEY=... -e TEAM_KEY -v $PWD/my-config.yaml:/config/config.yaml:ro` serves your own config
# with the server's key, which needs auth.keys (or auth.allow_anonymous: true): with an upstream key and no
# proxy keys, `serve` on HOST=0.0.0.0 refuses to start rather than spend the key for anyone (docs/operations.md).
# Debian's own Python on Debian's slim base: CI builds this same file from a base it makes with
# `debootstrap --variant=minbase bookworm` (tagged debian:bookworm-slim, `--pull=never`; docs/operations.md).
ARG BASE=debian:bookworm-slim

# --- build: a virtualenv with the proxy and its dependencies (pip lives only in this stage) -------
FROM ${BASE} AS build
LABEL org.opencontainers.image.title=history-proxy
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# Optional: a CA bundle and a pip.conf for builds behind a TLS-inspecting proxy (deploy/build-env/README.md).
COPY deploy/build-env/ /build-env/
RUN python3 -m venv /opt/history-proxy
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY history_proxy ./history_proxy
# history_proxy/config/default.yaml links to it: the wheel packages the default config
COPY config/default.yaml ./config/default.yaml
COPY tests/corpus/openhands-codeact-ponylang-ponyc-4593.json ./tests/corpus/openhands-codeact-ponylang-ponyc-4593.json
RUN if [ -f /build-env/ca-certificates.crt ]; then export PIP_CERT=/build-env/ca-certificates.crt; fi \
    && if [ -f /build-env/pip.conf ]; then export PIP_CONFIG_FILE=/build-env/pip.conf; fi \
    && /opt/history-proxy/bin/pip install --quiet . \
    && /opt/history-proxy/bin/pip uninstall --quiet -y pip setuptools \
    && /opt/history-proxy/bin/python -m compileall -q /opt/history-proxy/lib
# tiktoken's encoding files, checked against tiktoken's hashes, written once into the image (read-only later).
ENV XDG_CACHE_HOME=/opt/history-proxy/cache
RUN /opt/history-proxy/bin/python -c \
    "from history_proxy.core.encodings import install_encoding_files; install_encoding_files()"

# --- run: Debian's Python and the virtualenv; no pip, no compiler, no apt lists ------------------
FROM ${BASE}
LABEL org.opencontainers.image.title=history-proxy \
      org.opencontainers.image.description="OpenAI-compatible reverse proxy that shapes agents' conversation histories"
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && groupadd --system --gid 10001 history-proxy \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin history-proxy
COPY --from=build /opt/history-proxy /opt/history-proxy
ENV PATH=/opt/history-proxy/bin:$PATH \
    XDG_CACHE_HOME=/opt/history-proxy/cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOST=0.0.0.0 \
    PORT=8080 \
    WORKERS=1
# Nothing below writes to the image: run it with a read-only root and a tmpfs on /tmp (workers > 1
# keep their metrics files there).
USER 10001:10001
RUN history-proxy check
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8080'), timeout=2)"]
STOPSIGNAL SIGTERM
# The config: $HISTORY_PROXY_CONFIG, else a file mounted at /config/config.yaml, else the packaged
# default config (the real providers; HISTORY_PROXY_MOCK=1: the built-in mock, offline).
CMD ["sh", "-c", "[ -n \"$HISTORY_PROXY_CONFIG\" ] || [ ! -f /config/config.yaml ] || export HISTORY_PROXY_CONFIG=/config/config.yaml; exec history-proxy serve --host \"$HOST\" --port \"$PORT\" --workers \"$WORKERS\""]
