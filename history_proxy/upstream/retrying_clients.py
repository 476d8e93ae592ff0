"""Which clients retry a 429/502/503 on their own, so that ``status_retries: auto`` leaves those to them.

Retries must never stack: a client that retries N times behind a proxy that retries M times costs
N x M upstream calls for one rate limit (Codex 0.171 behind three proxy tries: 18 calls). A request
says its client retries by any of:

==========================  =====================================================================
``x-stainless-retry-count``  the Stainless SDKs: openai and anthropic, Python and node (and the
                             frameworks built on them: Agents SDK, pydantic-ai, LangChain, LiteLLM)
``originator: codex_*``      Codex (``codex_exec``, ``codex_cli_rs``, ``codex_vscode``): 5 retries
                             of a 429 or 5xx by default (``stream_max_retries``)
``user-agent``               ``codex_*/`` (Codex), ``claude-cli/`` (Claude Code), ``GeminiCLI/`` and
                             ``GeminiCLI-<surface>/`` (Gemini CLI: 429, 499 and 5xx), ``OpenAI/`` and
                             ``Anthropic/`` (the SDKs, also when a custom client drops the header)
==========================  =====================================================================

Any other client (curl, a bare httpx script, an unknown agent) still gets the proxy's retries.
"""

from __future__ import annotations

from collections.abc import Sequence

SDK_RETRY_HEADER = "x-stainless-retry-count"
"""Sent by the Stainless SDKs (openai, anthropic), which retry 429 and 5xx answers themselves."""
RETRYING_ORIGINATORS = ("codex_",)
"""``originator`` header values of clients that retry (Codex names itself so)."""
RETRYING_USER_AGENTS = (
    "codex_",
    "claude-cli/",
    "geminicli/",
    "geminicli-",  # Gemini CLI names its surface: GeminiCLI-tui/0.61.0/<model>
    "openai/",
    "anthropic/",
    "asyncopenai/",
    "asyncanthropic/",
)
"""``user-agent`` prefixes (lower-cased) of clients that retry."""


def retrying_client(headers: Sequence[tuple[str, str]]) -> str | None:
    """The header that says the request's client retries on its own (``name: value``), or None."""
    for name, value in headers:
        key = name.lower()
        if key == SDK_RETRY_HEADER:
            return key
        lowered = value.strip().lower()
        if key == "originator" and lowered.startswith(RETRYING_ORIGINATORS):
            return f"{key}: {value[:40]}"
        if key == "user-agent" and lowered.startswith(RETRYING_USER_AGENTS):
            return f"{key}: {value[:40]}"
    return None


def client_retries(setting: str, headers: Sequence[tuple[str, str]]) -> bool:
    """Whether a 429/502/503 is left to the client: ``client``, or ``auto`` and a client that retries."""
    if setting == "auto":
        return retrying_client(headers) is not None
    return setting == "client"
