"""The surface table: everything the proxy knows about each API it shapes, in one place.

A :class:`Surface` is one API route the proxy shapes: chat completions, Responses (and its
``/compact`` and ``/input_tokens``), Messages and Messages ``count_tokens``, and the routes whose bodies
pass the global and tenant policies only (``/v1/completions``, ``/v1/messages/batches``).
Its row says where it is served (``route``) and forwarded (``upstream_path``),
which upstream APIs serve it, how its body becomes the chain's view and back (``to_view``,
``rebuild``, ``validate``), whether it carries native cache marks, its error shape and in-band stream
error, the headers it adds when the client sent none, and whether a request refused for length is
fitted and retried. The edge dispatches on :data:`BY_ROUTE`; shaping (:mod:`history_proxy.surfaces.shape`),
fitting (:mod:`history_proxy.surfaces.fit`), the overflow retry and the error answers read these attributes,
never the surface's name. Adding a surface is one adapter module and one row here (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounter
from history_proxy.errors import (
    ANTHROPIC,
    GOOGLE,
    OPENAI,
    StreamError,
    chat_stream_error,
    gemini_stream_error,
    messages_stream_error,
    responses_stream_error,
)
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import engine, gemini, messages, policy_only, responses
from history_proxy.surfaces._view import HISTORY_AT_PROVIDER, Shaped, View
from history_proxy.surfaces.history_free import instructions_through_policy
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.messages_pinned import through_policy
from history_proxy.surfaces.messages_valid import valid_for_messages

SurfaceName = Literal["chat", "responses", "messages", "engine", "gemini"]
"""The one vocabulary for an API: metric labels, notes, ``?api=`` on a preview, replays."""

ToView = Callable[[dict[str, Any], TokenCounter | None, ViewMemo | None], View]
Rebuild = Callable[[dict[str, Any], View, Sequence[Message]], dict[str, Any]]
ThroughPolicy = Callable[[Pipeline, Shaped, Identity, str, str | None], Shaped]
PolicyOnly = Callable[[Pipeline, dict[str, Any], Identity, str | None], Shaped]


@dataclass(frozen=True, slots=True, eq=False)
class Surface:
    """One API route the proxy shapes, and everything that differs between APIs."""

    name: SurfaceName
    """The API's name (``count_tokens`` is the Messages API: its name is ``messages``)."""
    route: str
    """The path the proxy serves it on, below any root path."""
    upstream_path: str
    """The path it is forwarded to, below the upstream's base URL."""
    served_by: frozenset[str]
    """The ``upstreams.<name>.api`` values whose upstreams serve it (a mock serves every surface)."""
    history: str
    """The body field holding the history (named in a 400 when the body is not an object)."""
    to_view: ToView | None = None
    """The body as chat messages for the chain; ``None``: the body's ``messages`` are the view (chat)."""
    rebuild: Rebuild | None = None
    """The native body for the view messages the chain kept."""
    validate: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    """Applied to a shaped body before it is sent (Messages: emptied blocks and messages removed)."""
    provider_state: Callable[[dict[str, Any]], str | None] | None = None
    """Why the history lives at the provider (Responses' ``previous_response_id``), if it can."""
    through_policy: ThroughPolicy | None = None
    """The history-free policy filters over what the view does not carry (Responses' instructions,
    Messages' pinned messages), after the chain (:mod:`history_proxy.surfaces.history_free`)."""
    empty_note: str = ""
    """The note of a request whose view is empty (forwarded unfiltered, the upstream judges)."""
    native_marks: bool = False
    """Native ``cache_control`` marks are placed on the shaped body for an upstream that takes them."""
    error_shape: str = OPENAI
    """The key of :data:`history_proxy.errors.ERROR_SHAPES` its errors are written in."""
    stream_error: StreamError = chat_stream_error
    """The in-band event a stream of it ends with when the upstream broke off."""
    default_headers: tuple[tuple[str, str], ...] = ()
    """Headers sent upstream when the client named none of that name."""
    refits: bool = True
    """A request refused as too long is fitted to a budget and sent once more."""
    model_type_error: str = "'model' must be a string"
    """The API's own words when ``model`` is not a string."""
    policy_only: PolicyOnly | None = None
    """The body carries conversations but no chain's view: only the global and tenant policies'
    history-free filters apply (:mod:`history_proxy.surfaces.policy_only`)."""
    compaction_items: bool = False
    """Its body may carry Responses ``compaction`` items (:mod:`history_proxy.surfaces.compaction`)."""
    compacts: bool = False
    """It compacts a history (``/v1/responses/compact``): answered by the proxy itself for an upstream
    whose ``responses_compaction`` is ``emulate``."""
    answers: bool = False
    """Answered by the proxy itself, never forwarded (the engine contract, ``/v1/compress``)."""
    streams: bool = False
    """The route itself asks for a stream (Gemini's ``streamGenerateContent``), whatever the body says."""
    key_in_query: bool = False
    """The API may carry the client's key as ``?key=`` (Gemini): dropped when the upstream has its own
    key or the client's key is a proxy key (:func:`history_proxy.upstream.headers.query_without_key`)."""

    @property
    def body_is_view(self) -> bool:
        """The body's ``messages`` are the view itself (chat completions: nothing to convert)."""
        return self.to_view is None


ANTHROPIC_VERSION = "2023-06-01"
"""Sent to ``api: anthropic`` upstreams when the client named no ``anthropic-version``."""

CHAT = Surface(
    name="chat",
    route="/v1/chat/completions",
    upstream_path="/chat/completions",
    served_by=frozenset({"openai", "anthropic"}),  # Anthropic also serves OpenAI-compatible chat
    history="messages",
)
RESPONSES = Surface(
    name="responses",
    route="/v1/responses",
    upstream_path="/responses",
    served_by=frozenset({"openai"}),
    history="input",
    to_view=responses.to_view,
    rebuild=responses.rebuild,
    provider_state=responses.provider_state,
    through_policy=instructions_through_policy,
    empty_note=f"{HISTORY_AT_PROVIDER}:no_input",  # an empty or absent input: the upstream judges
    stream_error=responses_stream_error,
    compaction_items=True,
)
MESSAGES = Surface(
    name="messages",
    route="/v1/messages",
    upstream_path="/messages",
    served_by=frozenset({"anthropic"}),
    history="messages",
    to_view=messages.to_view,
    rebuild=messages.rebuild,
    validate=valid_for_messages,
    through_policy=through_policy,
    empty_note="messages:no_user_or_assistant_message",  # only pinned messages: forwarded as they came
    native_marks=True,
    error_shape=ANTHROPIC,
    stream_error=messages_stream_error,
    default_headers=(("anthropic-version", ANTHROPIC_VERSION),),
    model_type_error="model: Input should be a valid string",  # Anthropic's words on its surface
)
COUNT_TOKENS = replace(
    MESSAGES,
    route="/v1/messages/count_tokens",
    upstream_path="/messages/count_tokens",
    refits=False,  # a count is never refused for length
)

RESPONSES_COMPACT = replace(
    RESPONSES,
    route="/v1/responses/compact",
    upstream_path="/responses/compact",
    refits=False,  # its answer replaces the history: never cut behind the client's back
    compacts=True,
)
INPUT_TOKENS = replace(
    RESPONSES, route="/v1/responses/input_tokens", upstream_path="/responses/input_tokens", refits=False
)
COMPLETIONS = Surface(
    name="chat",  # OpenAI's legacy completions: counted with chat completions
    route="/v1/completions",
    upstream_path="/completions",
    served_by=frozenset({"openai"}),
    history="prompt",
    refits=False,
    policy_only=policy_only.completions,
)
MESSAGE_BATCHES = replace(
    MESSAGES,
    route="/v1/messages/batches",
    upstream_path="/messages/batches",
    to_view=None,
    rebuild=None,
    validate=None,
    through_policy=None,
    history="requests",
    native_marks=False,
    refits=False,
    policy_only=policy_only.batches,
)
ENGINE = Surface(
    name="engine",
    route="/v1/compress",
    upstream_path="",  # never forwarded: the chain's output is the answer
    served_by=frozenset({"openai", "anthropic", "google"}),
    history="messages",
    to_view=engine.to_view,
    rebuild=engine.rebuild,
    refits=False,
    answers=True,
)

MODEL = "{model}"
"""Where a route names the model in its path (Gemini's ``/v1beta/models/{model}:generateContent``)."""
GEMINI = Surface(
    name="gemini",
    route=f"/v1beta/models/{MODEL}:generateContent",
    upstream_path=f"/models/{MODEL}:generateContent",
    served_by=frozenset({"google"}),
    history="contents",
    to_view=gemini.to_view,
    rebuild=gemini.rebuild,
    empty_note="gemini:no_contents",  # countTokens over a generateContentRequest: the upstream counts it
    error_shape=GOOGLE,
    stream_error=gemini_stream_error,
    refits=False,
    key_in_query=True,
)
GEMINI_STREAM = replace(
    GEMINI,
    route=f"/v1beta/models/{MODEL}:streamGenerateContent",
    upstream_path=f"/models/{MODEL}:streamGenerateContent",
    streams=True,
)
GEMINI_COUNT = replace(
    GEMINI, route=f"/v1beta/models/{MODEL}:countTokens", upstream_path=f"/models/{MODEL}:countTokens"
)

TABLE: tuple[Surface, ...] = (
    CHAT,
    RESPONSES,
    MESSAGES,
    COUNT_TOKENS,
    RESPONSES_COMPACT,
    INPUT_TOKENS,
    COMPLETIONS,
    MESSAGE_BATCHES,
    ENGINE,
    GEMINI,
    GEMINI_STREAM,
    GEMINI_COUNT,
)
BY_ROUTE: dict[str, Surface] = {surface.route: surface for surface in TABLE if MODEL not in surface.route}
"""The surface served on each fixed route (the edge's dispatch; routes naming a model: :func:`surface_at`)."""
_BY_ACTION: dict[str, tuple[str, Surface]] = {
    surface.route.partition(MODEL)[2]: (surface.route.partition(MODEL)[0], surface)
    for surface in TABLE
    if MODEL in surface.route
}


def surface_at(path: str) -> Surface | None:
    """The surface served on ``path`` (below any root path): a fixed route, or one naming a model."""
    fixed = BY_ROUTE.get(path)
    if fixed is not None or ":" not in path:
        return fixed
    head, colon, action = path.rpartition(":")
    found = _BY_ACTION.get(colon + action)
    if found is None or not head.startswith(found[0]) or len(head) == len(found[0]):
        return None
    return found[1]


def path_model(surface: Surface, path: str) -> str:
    """The model a route naming one names in ``path`` (``""`` for a fixed route)."""
    prefix, _, suffix = surface.route.partition(MODEL)
    if not suffix:
        return ""
    return path[len(prefix) : len(path) - len(suffix)]


def upstream_path_of(surface: Surface, model: str) -> str:
    """The path ``surface`` is forwarded to, with the model its route named."""
    return surface.upstream_path.replace(MODEL, model) if model else surface.upstream_path


BY_NAME: dict[str, Surface] = {surface.name: surface for surface in reversed(TABLE)}
"""Each API's main surface by its name (``messages`` is ``/v1/messages``)."""
NAMES: tuple[SurfaceName, ...] = ("chat", "responses", "messages")


def surface_of(surface: Surface | str) -> Surface:
    """``surface`` itself, or the main surface of the API it names."""
    return surface if isinstance(surface, Surface) else BY_NAME[surface]


def error_shape_of(path: str) -> str:
    """The error shape of requests on ``path`` (below any root path): its surface's, the surface whose
    route it extends (``/v1/messages/batches`` is Anthropic's), else OpenAI's."""
    served = surface_at(path)
    if served is not None:
        return served.error_shape
    if path.startswith("/v1beta/"):
        return GOOGLE
    for surface in TABLE:
        if path.startswith(surface.route + "/"):
            return surface.error_shape
    return OPENAI
