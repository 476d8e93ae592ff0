"""What every filter shares: the request context it reads and the config model it extends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, model_validator

from history_proxy.core.cost import Pricing
from history_proxy.core.messages import DEFAULT_COMPLETION_TOOLS, Message
from history_proxy.core.plain_types import plain_fields
from history_proxy.core.tokens import TokenCounters


class Summarizer(Protocol):
    """Writes a summary of some messages with a model (implemented over the proxy's HTTP client)."""

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str: ...


class RecallStore(Protocol):
    """Where elided outputs are kept for recall (``last_n_observations`` with ``recall: true``): keyed by
    tenant and handle, bounded in bytes, entries expiring. Implemented in
    :mod:`history_proxy.pipeline.recall`; a filter only puts and gets."""

    def put(self, tenant: str | None, handle: str, text: str) -> None: ...

    def get(self, tenant: str | None, handle: str) -> str | None: ...


@dataclass(frozen=True)
class FilterContext:
    """Everything a filter may know about the request besides its messages."""

    role: str = "default"
    agent: str | None = None
    phase: str | None = None
    model: str = ""
    tenant: str | None = None
    completion_tools: frozenset[str] = DEFAULT_COMPLETION_TOOLS
    tokens: TokenCounters = field(default_factory=TokenCounters)
    summarizer: Summarizer | None = None
    upstream: str | None = None
    """Name of the upstream the request is routed to."""
    window: int | None = None
    """The request model's context window (config ``context_windows``, then the packaged table)."""
    reserve: int = 0
    """The request's ``max_completion_tokens`` / ``max_tokens``: the answer's room in that window."""
    pricing: Pricing | None = None
    """The routed upstream's prompt-cache prices (cost-aware filters; none: Anthropic's, the stricter)."""
    recall: RecallStore | None = None
    """Where ``recall`` keeps the outputs it elides, for this request's tenant (none: only what the
    request itself holds can be restored)."""
    token_ratio: float = 1.0
    """The routed upstream's input tokens per token the proxy counts for this model's family
    (:mod:`history_proxy.core.calibration`): token limits are divided by it."""
    notes: list[str] = field(default_factory=list)
    """Filters may append short outcome notes (e.g. ``summarize:fallback``); shown in headers and logs."""


class Filter(BaseModel):
    """Base of every filter config model: frozen, unknown keys rejected.

    Subclasses declare ``type: Literal["name"]`` and implement :meth:`apply` (or, for the one
    filter that needs I/O, ``async def apply_async``). ``apply`` returns a new list and never
    assigns into its input; unchanged messages pass through as the same objects.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, data: Any) -> Any:
        """A boolean is not a number, nor a number a boolean (``n: yes``); see :mod:`history_proxy.core.plain_types`."""
        return plain_fields(cls.model_fields, data)

    cache_friendly: ClassVar[str] = ""
    """One line for the docs: whether consecutive requests keep an identical kept prefix, and the knob."""

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise NotImplementedError

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        """Why this filter changed nothing on a request of ``tokens`` tokens (the report's ``why_unchanged``);
        each filter says it in its own terms (``not triggered: under budget (812 of 100000 tokens)``)."""
        return "nothing on this request matched what it removes"

    def budget(self, ctx: FilterContext | None = None) -> int | None:
        """The token limit this filter enforces on the request of ``ctx``, if any (reported as
        within_limit / tokens_over); a limit written as a share of the window needs ``ctx``."""
        return None

    def private(self, name: str) -> Any:
        """The private attribute ``name`` (declared with ``PrivateAttr``), read where pydantic keeps it.

        ``self._name`` gets there through pydantic's ``__getattr__``, which asks the attribute for a
        ``__get__`` and pays for a raised ``AttributeError`` on every read (~10 us): too slow for a
        filter's per-request path.
        """
        return self.__pydantic_private__[name]  # type: ignore[index]

    @property
    def type_name(self) -> str:
        return str(getattr(self, "type"))  # noqa: B009 - declared by each subclass, not on the base

    def describe(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
