"""``custom``: a filter class loaded by import path, configured with the remaining keys."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Literal

from pydantic import ConfigDict, PrivateAttr, ValidationError, field_validator, model_validator

from history_proxy.core.messages import Message
from history_proxy.filters.base import Filter, FilterContext

IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def load_class(path: str) -> type:
    """The class named by ``package.module:ClassName`` (``ValueError`` naming the path otherwise)."""
    module_name, _, qualname = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import {path!r}: {type(exc).__name__}: {exc}") from None
    found: Any = module
    for name in qualname.split("."):
        found = getattr(found, name, None)
        if found is None:
            raise ValueError(f"cannot import {path!r}: module {module_name!r} has no {qualname!r}")
    if not isinstance(found, type):
        raise ValueError(f"{path!r} is not a class")
    return found


def instantiate(path: str, cls: type, params: dict[str, Any]) -> Any:
    """An instance of ``cls`` configured with ``params`` (``ValueError`` naming the path otherwise).

    A :class:`Filter` subclass validates the params through its own model (its ``type`` literal is
    filled in when absent); any other class is called with the params as keyword arguments.
    """
    if issubclass(cls, Filter):
        type_field = cls.model_fields.get("type")
        args: tuple[Any, ...] = (
            getattr(type_field.annotation, "__args__", ()) if type_field is not None else ()
        )
        if len(args) == 1 and "type" not in params:
            params = {"type": args[0], **params}
        try:
            return cls.model_validate(params)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(params)'}: {e['msg']}"
                for e in exc.errors(include_input=False)
            )
            raise ValueError(f"invalid params for {path!r}: {problems}") from None
    if not callable(getattr(cls, "apply", None)):
        raise ValueError(f"{path!r} has no apply(messages, ctx) method")
    try:
        return cls(**params)
    except Exception as exc:
        raise ValueError(f"cannot create {path!r} with its params: {type(exc).__name__}: {exc}") from None


class Custom(Filter):
    """Load a filter class by import path; every other key is its parameter.

    The class is imported and configured when the config is validated, so a wrong path or bad
    params stop ``check`` and ``serve``. A :class:`~history_proxy.filters.base.Filter` subclass gets its
    params validated by its own model; any other class with an ``apply(messages, ctx)`` method is
    called with the params as keyword arguments. ``apply`` delegates to the loaded instance.

    ```yaml
    worker: [{type: custom, path: "my_filters.redact:Redact", patterns: ["sk-[A-Za-z0-9]+"]}]
    ```
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    type: Literal["custom"]
    path: str
    """Where the class lives: ``package.module:ClassName``."""
    cache_friendly = "as the loaded class: this wrapper changes nothing itself"
    _target: Any = PrivateAttr(default=None)

    @field_validator("path")
    @classmethod
    def _path_names_a_class(cls, path: str) -> str:
        if not IMPORT_PATH.fullmatch(path):
            raise ValueError(f"must be 'package.module:ClassName', got {path!r}")
        return path

    @model_validator(mode="after")
    def _load(self) -> Custom:
        self._target = instantiate(self.path, load_class(self.path), dict(self.model_extra or {}))
        return self

    @property
    def target(self) -> Any:
        """The loaded, configured instance."""
        return self.private("_target")

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return self._checked(self.private("_target").apply(messages, ctx))

    async def apply_async(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        """Await the loaded class's ``apply_async`` when it has one, else call :meth:`apply`."""
        target_async = getattr(self.private("_target"), "apply_async", None)
        if target_async is not None and inspect.iscoroutinefunction(target_async):
            return self._checked(await target_async(messages, ctx))
        return self.apply(messages, ctx)

    def budget(self, ctx: FilterContext | None = None) -> int | None:
        target_budget = getattr(self.private("_target"), "budget", None)
        limit = target_budget() if callable(target_budget) else None
        return limit if isinstance(limit, int) else None

    def _checked(self, result: Any) -> list[Message]:
        if not isinstance(result, list):
            raise TypeError(f"{self.path} returned {type(result).__name__}, not a list")
        return result
