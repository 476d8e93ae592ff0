"""history-proxy: an OpenAI-compatible reverse proxy that shapes each agent's conversation history in flight."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("history-proxy")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0.2.0"
