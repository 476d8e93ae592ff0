"""Reading the config file: YAML, ``${VAR}`` interpolation, and located error messages.

``load_config(path)`` returns a validated :class:`Config` or raises :class:`ConfigError`, whose
``errors`` are lines such as ``policies.roles.worker[1].n: must be > 0``. Secrets never appear in
errors or in :func:`summary`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from history_proxy.config.models import DEFAULT_CONFIG_PATH, Config
from history_proxy.config.policies import POLICY_FORMS
from history_proxy.config.yaml_source import YamlError, read_yaml
from history_proxy.filters import FILTER_TYPES


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
        if (
            part in POLICY_FORMS
            and i >= 3
            and loc[i - 3] == "policies"
            and loc[i - 2] in ("tenants", "roles")
        ):
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


_FIELD_PROBLEM = re.compile(r"^([A-Za-z_]\w*): (must be [^;]*)$")
"""A mapping's message about one of its keys (``n: must be a number, not true``), located at the key."""


def _located_line(loc: str, message: str) -> str:
    field = _FIELD_PROBLEM.match(message)
    return f"{loc}.{field.group(1)}: {field.group(2)}" if field else f"{loc}: {message}"


def validation_errors(exc: ValidationError, raw: Any) -> list[str]:
    """pydantic's errors as ``location: message`` lines (never the offending values)."""
    return [
        _located_line(_format_loc(tuple(e["loc"]), raw), _format_message(e))
        for e in exc.errors(include_input=False)
    ]


MOCK_ENV = "HISTORY_PROXY_MOCK"
"""Set to ``1`` (``serve --mock`` sets it for its workers): every upstream is the built-in mock."""


def mock_chosen(env: dict[str, str] | None = None) -> bool:
    """Whether ``$HISTORY_PROXY_MOCK`` asks for the built-in mock (``1``, ``true``, ``yes``, ``on``)."""
    environ = os.environ if env is None else env
    return environ.get(MOCK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def with_mock_upstreams(config: Config) -> Config:
    """``config`` with every upstream answered by the built-in mock (its keys dropped: nothing leaves)."""
    upstreams = {
        name: upstream.model_copy(update={"base_url": "mock://", "api_key": None})
        for name, upstream in config.upstreams.items()
    }
    return config.model_copy(update={"upstreams": upstreams})


def default_role_errors(data: dict[str, Any]) -> list[str]:
    """``identity.default_role``, when the file sets it, must name a role of ``policies.roles``: else
    callers without a role header would silently run only the global chain."""
    identity = data.get("identity")
    if not isinstance(identity, dict) or not isinstance(identity.get("default_role"), str):
        return []
    policies = data.get("policies")
    roles = policies.get("roles") if isinstance(policies, dict) else None
    names = list(roles) if isinstance(roles, dict) else []
    role = identity["default_role"]
    if role in names:
        return []
    known = f"roles: {', '.join(names)}" if names else "policies.roles names none"
    return [f"identity.default_role: {role!r} names no role in policies.roles ({known})"]


def parse_config(raw: Any, env: dict[str, str] | None = None, source: str = "config") -> Config:
    """Validate an already-parsed YAML document (every upstream the mock when :func:`mock_chosen`)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): must be a mapping"], source)
    data, errors = interpolate(raw, env)
    if errors:
        raise ConfigError(errors, source)
    unnamed_role = default_role_errors(data)
    try:
        names = list(data["upstreams"]) if isinstance(data.get("upstreams"), dict) else []
        config = Config.model_validate(data, context={"upstream_names": names})
    except ValidationError as exc:
        raise ConfigError(validation_errors(exc, data) + unnamed_role, source) from None
    if unnamed_role:
        raise ConfigError(unnamed_role, source)
    return with_mock_upstreams(config) if mock_chosen(env) else config


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Read, interpolate and validate a config file (the default one without a path)."""
    file = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror or exc}"], str(file)) from None
    try:
        raw = read_yaml(text)
    except YamlError as exc:
        raise ConfigError(exc.errors, str(file)) from None
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


class _FileSchema(GenerateJsonSchema):
    """The file as written: a number or a boolean may also be a ``${VAR}`` read when the file is loaded."""

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return _or_variable(super().int_schema(schema))

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return _or_variable(super().float_schema(schema))

    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return _or_variable(super().bool_schema(schema))


def _or_variable(schema: JsonSchemaValue) -> JsonSchemaValue:
    return {"anyOf": [schema, {"type": "string", "pattern": VARIABLE_PATTERN}]}


VARIABLE_PATTERN = r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$"
"""A whole value read from the environment (``${RETRIES}``, ``${RETRIES:-2}``)."""


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the config file as written (``${VAR}`` may stand for a number or a boolean)."""
    return Config.model_json_schema(by_alias=True, schema_generator=_FileSchema)
