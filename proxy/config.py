"""The config file: pydantic models, ``${VAR}`` interpolation and located error messages.

``load_config(path)`` returns a validated :class:`Config` or raises :class:`ConfigError`, whose
``errors`` are lines such as ``policies.roles.worker[1].n: must be > 0``. Secrets are
``SecretStr`` and never appear in errors or in :func:`summary`.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from proxy.filters import FILTER_TYPES, Filter
from proxy.filters.cache_control import CacheControl
from proxy.messages import DEFAULT_COMPLETION_TOOLS
from proxy.policies import POLICY_FORMS, PoliciesConfig, PolicyMode
from proxy.summary_config import SummaryCacheConfig

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config" / "default.yaml"

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpstreamConfig(_Strict):
    """One named upstream, an OpenAI-compatible base URL."""

    base_url: str
    """Base URL including the version path, e.g. ``https://api.openai.com/v1``; ``mock://`` for the built-in mock."""
    api_key: SecretStr | None = None
    """Replaces the client's Authorization when set (empty counts as unset)."""
    cache_control: bool = False
    """Whether this upstream accepts ``cache_control`` marks (Anthropic-style prompt caching)."""
    mock_when_no_key: bool = False
    """Answer from the built-in mock upstream, in this process, while ``api_key`` is empty."""
    retries: int = Field(default=2, ge=0, le=10)
    """Retries of connect errors and 429/502/503 answers before any byte reached the client."""

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
    def is_mock(self) -> bool:
        return self.base_url.startswith("mock:") or (self.mock_when_no_key and self.key is None)


class RouteConfig(_Strict):
    """Send requests whose ``model`` matches the glob to the named upstream."""

    model: str
    upstream: str
    fallbacks: list[str] = Field(default_factory=list)
    """Upstreams tried in order when the first fails before any byte reached the client."""


class IdentityConfig(_Strict):
    role_header: str = "X-Agent-Role"
    agent_header: str = "X-Agent-Name"
    phase_header: str = "X-Agent-Phase"
    default_role: str = "default"
    completion_tools: list[str] = Field(default_factory=lambda: sorted(DEFAULT_COMPLETION_TOOLS))


class ProxyKey(_Strict):
    key: SecretStr
    tenant: str

    @field_validator("key")
    @classmethod
    def _not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value


class AuthConfig(_Strict):
    keys: list[ProxyKey] = Field(default_factory=list)
    """Proxy keys; with none configured the proxy is open."""


class AdminConfig(_Strict):
    """Who may call the admin endpoints (``POST /admin/reload``)."""

    tenants: list[str] = Field(default_factory=list)
    """Tenants (of ``auth.keys``) whose proxy keys may call admin endpoints; none: admin endpoints are off."""


class LimitsConfig(_Strict):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    connect_timeout_s: float = Field(default=10, gt=0)
    read_timeout_s: float = Field(default=600, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)
    """In-flight requests beyond this are answered 429 at once (none: unbounded)."""
    max_messages: int = Field(default=10_000, gt=0)
    """Chat completions with more messages are answered 413 (bounds the CPU one request can take)."""


class CacheControlSlot(CacheControl):
    """The ``cache_control`` slot: the same model as the filter, with ``type`` optional."""

    type: Literal["cache_control"] = "cache_control"


class Config(_Strict):
    """The whole config file."""

    upstreams: dict[str, UpstreamConfig]
    routes: list[RouteConfig] = Field(default_factory=list)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)
    cache_control: CacheControlSlot | None = None
    on_filter_error: Literal["reject", "passthrough"] = "reject"
    log_bodies: bool = False
    """Put each chat completion's request body in its access line, secrets redacted (``proxy.logs.redact``)."""
    summary_cache: SummaryCacheConfig = Field(default_factory=SummaryCacheConfig)

    @field_validator("upstreams")
    @classmethod
    def _at_least_one(cls, value: dict[str, UpstreamConfig]) -> dict[str, UpstreamConfig]:
        if not value:
            raise ValueError("name at least one upstream")
        return value

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
        upstreams = info.data.get("upstreams")
        if not upstreams:  # already reported on upstreams
            return routes
        for i, route in enumerate(routes):
            for name in (route.upstream, *route.fallbacks):
                if name not in upstreams:
                    raise ValueError(
                        f"entry [{i}] (model {route.model!r}) names unknown upstream {name!r}; "
                        f"known upstreams: {', '.join(upstreams)}"
                    )
        return routes

    @field_validator("policies")
    @classmethod
    def _filters_name_upstreams(cls, policies: PoliciesConfig, info: ValidationInfo) -> PoliciesConfig:
        upstreams = info.data.get("upstreams")
        if not upstreams:  # already reported on upstreams
            return policies
        located = [(f"global[{i}]", f) for i, f in enumerate(policies.global_)]
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
        located: list[tuple[str, Filter]] = [(f"policies.global[{i}]", f) for i, f in enumerate(self.policies.global_)]
        if tenant is not None:
            located += self.policies.located("tenants", tenant)[1]
        located += self.policies.located("roles", role)[1]
        return located

    def mode(self, role: str, tenant: str | None) -> PolicyMode:
        """``shadow`` when the caller's tenant or role policy is in shadow mode, else ``enforce``."""
        return self.policies.mode(role, tenant)


class ConfigError(Exception):
    """A config that cannot be used; ``errors`` holds one located line per problem."""

    def __init__(self, errors: list[str], source: str = "config") -> None:
        super().__init__(f"{source}: " + "; ".join(errors))
        self.errors = errors
        self.source = source


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str] | None = None, where: str = "") -> tuple[Any, list[str]]:
    """Replace ``${NAME}`` (and ``${NAME:-default}``) in every string; missing names are errors."""
    environ = os.environ if env is None else env
    errors: list[str] = []

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str):

            def substitute(match: re.Match[str]) -> str:
                name, default = match.group(1), match.group(2)
                value = environ.get(name)
                if default is not None:  # shell semantics: ${NAME:-x} also replaces an empty value
                    return value or default
                if value is not None:
                    return value
                errors.append(f"{path}: environment variable {name} is not set")
                return ""

            return _VAR.sub(substitute, node)
        return node

    return walk(value, where), errors


def _filter_tag_positions(raw: Any, loc: tuple[Any, ...]) -> set[int]:
    """Positions in ``loc`` that are discriminator tags (pydantic puts the filter type there)."""
    tags: set[int] = set()
    for i, part in enumerate(loc):
        if isinstance(part, str) and part in FILTER_TYPES and i > 0 and isinstance(loc[i - 1], int):
            tags.add(i)
        if part in ("function-after", "function-before", "function-wrap"):
            tags.add(i)
        if part in POLICY_FORMS and i >= 3 and loc[i - 3] == "policies" and loc[i - 2] in ("tenants", "roles"):
            tags.add(i)  # the tag of the list-or-mapping union of a tenant's or role's policy
    return tags


def _format_loc(loc: tuple[Any, ...], raw: Any) -> str:
    skip = _filter_tag_positions(raw, loc)
    out = ""
    for i, part in enumerate(loc):
        if i in skip:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _bound(value: Any) -> Any:
    """A bound as a user wrote it: ``0`` rather than ``0.0`` for a float field's whole-number bound."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _format_message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "greater_than":
        return f"must be > {_bound(ctx['gt'])}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx['ge'])}"
    if kind == "less_than_equal":
        return f"must be <= {_bound(ctx['le'])}"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required"
    if kind == "union_tag_invalid":
        return f"unknown filter type {ctx.get('tag')!r}; expected one of {', '.join(FILTER_TYPES)}"
    if kind == "union_tag_not_found":
        return "each filter needs a 'type'"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def validation_errors(exc: ValidationError, raw: Any) -> list[str]:
    """pydantic's errors as ``location: message`` lines (never the offending values)."""
    return [f"{_format_loc(tuple(e['loc']), raw)}: {_format_message(e)}" for e in exc.errors(include_input=False)]


def parse_config(raw: Any, env: dict[str, str] | None = None, source: str = "config") -> Config:
    """Validate an already-parsed YAML document."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): must be a mapping"], source)
    data, errors = interpolate(raw, env)
    if errors:
        raise ConfigError(errors, source)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_errors(exc, data), source) from None


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Read, interpolate and validate a config file (the default one without a path)."""
    file = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror or exc}"], str(file)) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "(yaml)"
        raise ConfigError([f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}"], str(file)) from None
    return parse_config(raw, env, str(file))


def summary(config: Config) -> str:
    """One line describing a valid config, with no secrets."""
    policies = config.policies
    roles = ", ".join(f"{role}({policies.size('roles', role)})" for role in policies.roles) or "none"
    return (
        f"ok: {len(config.upstreams)} upstream(s) ({', '.join(config.upstreams)}), {len(config.routes)} route(s), "
        f"roles: {roles}, {len(policies.global_)} global and "
        f"{sum(len(policies.located('tenants', t)[1]) for t in policies.tenants)} tenant filter(s), "
        f"{len(config.auth.keys)} proxy key(s), summary cache: {config.summary_cache.describe()}"
    )


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the config file."""
    return Config.model_json_schema(by_alias=True)
