"""The config file's models: upstreams, routes, identity, auth, limits, policies, cache marks.

Secrets are ``SecretStr``; every mapping rejects unknown keys (:class:`StrictModel`). Reading a
file into a :class:`Config` is :mod:`history_proxy.config.loading`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection
from pathlib import Path
from typing import Literal, cast

from pydantic import (
    Field,
    IPvAnyNetwork,
    PositiveInt,
    SecretStr,
    ValidationInfo,
    field_validator,
)

from history_proxy.config.locate import CONFIG_ENV as CONFIG_ENV  # re-exported: where it always was
from history_proxy.config.locate import packaged_config
from history_proxy.config.openai_standards import (
    BreakpointMode,
    CompactionMode,
    OpenAIStandards,
    breakpoint_mode,
    compaction_mode,
)
from history_proxy.config.policies import PoliciesConfig, PolicyMode
from history_proxy.config.pricing import PresetName, PricingConfig, default_pricing
from history_proxy.config.quotas import RateLimits, redis_url_or_none
from history_proxy.config.standards import (
    MAX_TOKEN_RATIO,
    MIN_TOKEN_RATIO,
    ContextManagementMode,
    default_context_management,
)
from history_proxy.config.strict import StrictModel
from history_proxy.config.summaries import SummaryCacheConfig
from history_proxy.config.telemetry import TelemetryConfig
from history_proxy.core.cost import Pricing
from history_proxy.core.messages import DEFAULT_COMPLETION_TOOLS
from history_proxy.filters.base import Filter
from history_proxy.filters.cache_control import CacheControl

URL_PATTERN = r"^(https?://|mock://|\$\{)"
"""What ``base_url`` may start with (``${VAR}`` is read from the environment before the check)."""
DEFAULT_CONFIG_PATH: Path = packaged_config()
"""The default config packaged with ``proxy`` (``config/default.yaml`` in the repository)."""


class UpstreamConfig(OpenAIStandards):
    """One named upstream, an OpenAI-compatible base URL."""

    base_url: str = Field(json_schema_extra={"pattern": URL_PATTERN})
    """Base URL including the version path, e.g. ``https://api.openai.com/v1``; ``mock://`` for the built-in mock."""
    api_key: SecretStr | None = None
    """Replaces the client's Authorization when set (empty counts as unset)."""
    cache_control: bool = False
    """Whether this upstream accepts ``cache_control`` marks (Anthropic-style prompt caching)."""
    mock_when_no_key: bool = False
    """Answer from the built-in mock upstream, in this process, while ``api_key`` is empty."""
    retries: int = Field(default=2, ge=0, le=10)
    """Retries of connect errors and 429/502/503 answers before any byte reached the client."""
    pricing: PricingConfig | None = None
    """Prompt-cache prices (``openai``, ``anthropic`` or the numbers); none: by ``cache_control``."""
    status_retries: Literal["auto", "client", "proxy"] = "auto"
    """Who retries a 429/502/503 answer: ``proxy`` (up to ``retries``), ``client`` (passed back at
    once, ``Retry-After`` included) or ``auto``: ``client`` when the request comes from a client that
    retries on its own (the OpenAI and Anthropic SDKs by ``x-stainless-retry-count``, Codex by its
    ``originator`` or user agent, Claude Code by its user agent), else ``proxy``. Connect errors are
    always retried and fallbacks always tried."""
    forward_identity: bool = False
    """Send the identity headers (``identity.*_header``) on to this upstream; by default they stay here."""
    api: Literal["openai", "anthropic", "google"] = "openai"
    """The API it speaks: ``openai`` (chat completions, Responses), ``anthropic`` (Messages, and
    OpenAI-compatible chat completions; the key is sent as ``x-api-key``) or ``google`` (Gemini's
    ``generateContent``; the key is sent as ``x-goog-api-key``)."""
    context_management: ContextManagementMode | None = None
    """What a Messages request's ``context_management`` gets (``native``, ``emulate`` or ``strip``;
    :mod:`history_proxy.config.standards`); unset: ``native`` for ``api.anthropic.com``, else ``emulate``."""
    token_ratios: dict[str, float] = Field(default_factory=dict)
    """Starting ratios of this upstream's reported input tokens to the proxy's count, by model family
    (``claude: 1.6``); learned from its answers from there (:mod:`history_proxy.core.calibration`)."""

    @field_validator("token_ratios")
    @classmethod
    def _ratios_bounded(cls, value: dict[str, float]) -> dict[str, float]:
        for family, ratio in value.items():
            if not MIN_TOKEN_RATIO <= ratio <= MAX_TOKEN_RATIO:
                raise ValueError(f"{family}: must be between {MIN_TOKEN_RATIO} and {MAX_TOKEN_RATIO}")
        return value

    @property
    def context_management_mode(self) -> ContextManagementMode:
        """The mode set, or the base URL's default."""
        return self.context_management or default_context_management(self.base_url)

    @field_validator("pricing", mode="before", json_schema_input_type=PricingConfig | PresetName | None)
    @classmethod
    def _pricing_preset(cls, value: object) -> object:
        return {"preset": value} if isinstance(value, str) else value

    @field_validator("base_url")
    @classmethod
    def _url_has_scheme(cls, value: str) -> str:
        if not re.match(r"^(https?|mock)://", value):
            raise ValueError("must start with http://, https:// or mock://")
        return value.rstrip("/")

    @property
    def key(self) -> str | None:
        secret = self.api_key.get_secret_value() if self.api_key else ""
        return secret or None

    @property
    def price_model(self) -> Pricing:
        """The prices the cost-aware filters and ``replay`` use for this upstream."""
        return self.pricing.pricing() if self.pricing else default_pricing(self.cache_control)

    @property
    def is_mock(self) -> bool:
        return self.base_url.startswith("mock:") or (self.mock_when_no_key and self.key is None)

    @property
    def compaction(self) -> CompactionMode:
        """Its Responses compaction mode, ``auto`` resolved (:mod:`history_proxy.config.openai_standards`)."""
        return compaction_mode(self, self.base_url, self.is_mock)

    @property
    def breakpoints(self) -> BreakpointMode:
        """Its OpenAI cache breakpoint mode, ``auto`` resolved."""
        return breakpoint_mode(self, self.base_url, self.is_mock)


class RouteConfig(StrictModel):
    """Send requests whose ``model`` matches the glob to the named upstream."""

    model: str
    upstream: str
    fallbacks: list[str] = Field(default_factory=list)
    """Upstreams tried in order when the first fails before any byte reached the client."""


class IdentityConfig(StrictModel):
    role_header: str = "X-Agent-Role"
    agent_header: str = "X-Agent-Name"
    phase_header: str = "X-Agent-Phase"
    default_role: str = Field(
        default="default",
        description="The role of callers without a role header, or with a role not configured; when set, "
        "it must name a role of policies.roles (check and serve refuse a file where it does not).",
    )
    completion_tools: list[str] = Field(default_factory=lambda: sorted(DEFAULT_COMPLETION_TOOLS))


class ProxyKey(StrictModel):
    key: SecretStr = Field(json_schema_extra={"minLength": 1})
    tenant: str
    upstreams: list[str] | None = None
    """The upstreams (by name, fallbacks included) requests with this key may reach; none: all."""
    role: str | None = None
    """The role served to this key's ``POST /v1/compress`` calls that name none (a gateway's key)."""

    @field_validator("key")
    @classmethod
    def _not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value


class AuthConfig(StrictModel):
    keys: list[ProxyKey] = Field(default_factory=list)
    """Proxy keys; with none configured the proxy is open."""
    allow_anonymous: bool = False
    """Serve without proxy keys on a non-loopback address while an upstream has a server-side
    ``api_key`` (anyone who reaches the port spends that key): ``serve`` refuses to start so unless
    this, ``--allow-anonymous`` or ``HISTORY_PROXY_ALLOW_ANONYMOUS=1`` says it is meant."""


class AdminConfig(StrictModel):
    """Who may call the admin endpoints (``POST /admin/reload``)."""

    tenants: list[str] = Field(default_factory=list)
    """Tenants (of ``auth.keys``) whose proxy keys may call admin endpoints; none: admin endpoints are off."""
    metrics: Literal["open", "admin"] = "open"
    """Who may read ``GET /metrics``: anyone (``open``) or only ``tenants``' proxy keys (``admin``)."""


class LimitsConfig(StrictModel):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    connect_timeout_s: float = Field(default=10, gt=0)
    read_timeout_s: float = Field(default=600, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)
    """In-flight requests beyond this are answered 429 at once (none: unbounded)."""
    max_messages: int = Field(default=10_000, gt=0)
    """Chat completions with more messages are answered 413 (bounds the CPU one request can take)."""
    max_json_containers: int = Field(default=100_000, gt=0)
    """JSON bodies with more objects and arrays are answered 413 before they are parsed (bounds the
    memory and the event-loop time one body can take: ``[{},{},...]`` parses to ~30x its size)."""
    max_inflight_bytes: int | None = Field(default=None, ge=1024)
    """Bytes of request bodies in flight in one process (counted by ``Content-Length``, or as a chunked
    body arrives); a request past them is answered 503 (529 ``overloaded_error`` on ``/v1/messages``)
    at once. None: sized from the container's memory limit when one is set (cgroup), else unbounded
    (docs/hardening.md)."""
    max_concurrent_per_tenant: int | None = Field(default=None, gt=0)
    """In-flight requests per tenant (by proxy key) beyond this are answered 429 at once."""
    max_header_bytes: int = Field(default=32 * 1024, ge=1024)
    """A request head (request line and headers) over this is answered 431 and the connection closed."""
    max_headers: int = Field(default=100, gt=0)
    """A request with more header lines is answered 431 and the connection closed."""
    header_timeout_s: float = Field(default=60, gt=0)
    """A request head not complete this long after its first byte: 408 and the connection closed."""
    body_timeout_s: float = Field(default=60, gt=0)
    """No byte of a request body for this long: 408 and the connection closed."""
    surface_memo_messages: int = Field(default=20_000, ge=0)
    """Native messages the views of recent Responses and Messages conversations may hold in all, so a
    request converts only what its conversation's previous request did not have (0: off)."""
    surface_memo_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """The most the view memo may hold, in (estimated) bytes of parsed messages and views (0: off)."""
    surface_memo_idle_s: float = Field(default=900, gt=0)
    """A conversation whose latest request is older than this is forgotten by the view memo (its memory
    returns), at the memo's next use or ``/metrics`` scrape."""
    token_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024)
    """The most the per-string token-count cache may hold, in bytes of its strings (read at start)."""
    max_connections: int | None = Field(default=None, ge=1)
    """Open client connections per process beyond this are answered ``503`` and closed at once
    (none: three quarters of the process's open-file limit, ``ulimit -n``)."""
    per_tenant: RateLimits = Field(default_factory=RateLimits)
    """Requests and tokens a minute for each tenant (by proxy key)."""
    per_role: dict[str, RateLimits] = Field(default_factory=dict)
    """Requests and tokens a minute for each tenant's callers of a role (``X-Agent-Role``)."""
    redis_url: SecretStr | None = None
    """Redis shared by every replica and worker for the per-tenant and per-role limits (none: each
    process counts alone, so N processes admit N times the limits)."""
    recall_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    """The most the store of messages ``POST /v1/compress`` left out may hold, in bytes of their text
    (``GET /v1/retrieve/{hash}`` reads them back; 0: nothing is kept, placeholders carry no hash)."""
    recall_ttl_s: float = Field(default=3600, gt=0)
    """A message left out stays retrievable this long after it was last left out."""
    lease_s: float = Field(default=10, ge=1, le=600)
    """A shared concurrency slot lives this long unless its process renews it (every third of it), so a
    killed replica's slots come back after at most this."""

    _redis_url = field_validator("redis_url")(redis_url_or_none)


class CacheControlSlot(CacheControl):
    """The ``cache_control`` slot: the same model as the filter, with ``type`` optional."""

    type: Literal["cache_control"] = "cache_control"


def _known_upstreams(info: ValidationInfo) -> Collection[str] | None:
    """The upstream names references are checked against: the valid ``upstreams``, else the names the
    file gives (``context["upstream_names"]``), so a bad reference is reported beside a bad upstream."""
    valid = info.data.get("upstreams")
    if valid:
        return cast("Collection[str]", valid)
    names = (info.context or {}).get("upstream_names")
    return cast("Collection[str]", names) if names else None


class Config(StrictModel):
    """The whole config file."""

    upstreams: dict[str, UpstreamConfig] = Field(json_schema_extra={"minProperties": 1})
    routes: list[RouteConfig] = Field(default_factory=list)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)
    cache_control: CacheControlSlot | None = None
    on_filter_error: Literal["reject", "passthrough"] = "reject"
    log_bodies: bool = False
    """Put each chat completion's request body in its access line, secrets redacted.

    See ``history_proxy.observability.logs.redact``.
    """
    summary_cache: SummaryCacheConfig = Field(default_factory=SummaryCacheConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """OpenTelemetry GenAI spans per model call (``docs/telemetry.md``); off by default."""
    context_windows: dict[str, PositiveInt] = Field(default_factory=dict)
    """Model glob -> context window in tokens, checked before the packaged table (``limit: 80%``)."""
    trusted_proxies: list[IPvAnyNetwork] = Field(default_factory=list)
    """Peers (CIDRs) whose ``X-Forwarded-*``/``Forwarded`` headers are kept and appended to; from
    any other peer they are replaced with what the proxy saw."""

    @field_validator("upstreams")
    @classmethod
    def _at_least_one(cls, value: dict[str, UpstreamConfig]) -> dict[str, UpstreamConfig]:
        if not value:
            raise ValueError("name at least one upstream")
        return value

    @field_validator("auth")
    @classmethod
    def _keys_name_upstreams(cls, auth: AuthConfig, info: ValidationInfo) -> AuthConfig:
        upstreams = _known_upstreams(info)
        if not upstreams:  # already reported on upstreams
            return auth
        for i, entry in enumerate(auth.keys):
            for j, name in enumerate(entry.upstreams or ()):
                if name not in upstreams:
                    raise ValueError(
                        f"keys[{i}].upstreams[{j}] names unknown upstream {name!r}; "
                        f"known upstreams: {', '.join(upstreams)}"
                    )
        return auth

    @field_validator("admin")
    @classmethod
    def _admins_have_keys(cls, admin: AdminConfig, info: ValidationInfo) -> AdminConfig:
        auth = info.data.get("auth")
        tenants = {entry.tenant for entry in auth.keys} if isinstance(auth, AuthConfig) else set()
        for i, tenant in enumerate(admin.tenants):
            if tenant not in tenants:
                raise ValueError(f"tenants[{i}]: {tenant!r} has no proxy key in auth.keys")
        return admin

    @field_validator("routes")
    @classmethod
    def _routes_name_upstreams(cls, routes: list[RouteConfig], info: ValidationInfo) -> list[RouteConfig]:
        upstreams = _known_upstreams(info)
        if not upstreams:  # already reported on upstreams
            return routes
        unknown = [
            f"entry [{i}] (model {route.model!r}) names unknown upstream {name!r}"
            for i, route in enumerate(routes)
            for name in (route.upstream, *route.fallbacks)
            if name not in upstreams
        ]
        if unknown:  # every bad reference in one message: check lists every error in one pass
            raise ValueError(f"{'; '.join(unknown)}; known upstreams: {', '.join(upstreams)}")
        return routes

    @field_validator("policies")
    @classmethod
    def _filters_name_upstreams(cls, policies: PoliciesConfig, info: ValidationInfo) -> PoliciesConfig:
        upstreams = _known_upstreams(info)
        if not upstreams:  # already reported on upstreams
            return policies
        located: list[tuple[str, Filter]] = [(f"global[{i}]", f) for i, f in enumerate(policies.global_)]
        for kind in ("tenants", "roles"):
            for name in getattr(policies, kind):
                located += [(at.removeprefix("policies."), f) for at, f in policies.located(kind, name)[1]]
        for at, f in located:
            name = getattr(f, "upstream", None)
            if isinstance(name, str) and name not in upstreams:
                raise ValueError(
                    f"{at}.upstream names unknown upstream {name!r}; known upstreams: {', '.join(upstreams)}"
                )
        return policies

    @property
    def default_upstream(self) -> str:
        return next(iter(self.upstreams))

    def route(self, model: str) -> list[str]:
        """Upstream names for ``model``: the first matching route's upstream and fallbacks."""
        for route in self.routes:
            if fnmatch.fnmatchcase(model, route.model):
                return [route.upstream, *route.fallbacks]
        return [self.default_upstream]

    def chain(self, role: str, tenant: str | None) -> list[tuple[str, Filter]]:
        """The filters for a caller, each with its config location (global, tenant, role)."""
        located: list[tuple[str, Filter]] = [
            (f"policies.global[{i}]", f) for i, f in enumerate(self.policies.global_)
        ]
        if tenant is not None:
            located += self.policies.located("tenants", tenant)[1]
        located += self.policies.located("roles", role)[1]
        return located

    def mode(self, role: str, tenant: str | None) -> PolicyMode:
        """``shadow`` when the caller's tenant or role policy is in shadow mode, else ``enforce``."""
        return self.policies.mode(role, tenant)
