"""A request of any surface cut to a token budget, still valid for its own API (overflow recovery, issue 18).

When the upstream refuses a request as too long, the proxy sends it once more cut to a budget
(:mod:`history_proxy.pipeline.overflow` reads the refusal and computes the budget). Chat completions are cut
as they are; a Responses or Messages body goes through its adapter: native body -> view ->
``token_limiter``'s rule on the view (whole groups, oldest first; the leading system message, the
newest user message and the newest group stay) -> the adapter's ``rebuild``. So what is kept goes
verbatim, ``reasoning`` and ``thinking`` items are never edited, call and result pairs stay whole,
and a Messages history opens with a user message. A Messages body for an upstream with
``cache_control`` gets its native marks placed again, as its first send did.

A Responses request with ``previous_response_id`` or ``conversation`` keeps its history at the
provider: the proxy has nothing to cut (``None``).
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.invariants import broken_invariants
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import InvalidRequestError
from history_proxy.filters.base import FilterContext
from history_proxy.filters.cache_control import CacheControl
from history_proxy.filters.token_limiter import TokenLimiter
from history_proxy.pipeline import overflow
from history_proxy.surfaces._view import View
from history_proxy.surfaces.marks import place_marks
from history_proxy.surfaces.table import Surface, surface_of


def history_tokens(surface: Surface | str, body: Any, tokens: TokenCounters) -> int | None:
    """``body``'s history by our count (a chat body's messages, else its view), or ``None`` when the
    proxy may not cut it."""
    surface = surface_of(surface)
    if surface.body_is_view:
        history = body.get("messages") if isinstance(body, dict) else None
    else:
        view = _view(surface, body, tokens)
        history = view.messages if view is not None else None
    if not isinstance(history, list):
        return None
    return tokens.get(model=_model(body)).messages(history)


def fit(
    surface: Surface | str,
    body: Any,
    budget: int,
    tokens: TokenCounters,
    *,
    marks: CacheControl | None = None,
) -> dict[str, Any] | None:
    """``body`` cut to ``budget`` tokens of its history, as its own API's request, or ``None`` when
    no smaller valid request can be built.

    ``marks``: the ``cache_control`` slot to place native marks with again (a surface with native marks).
    """
    surface = surface_of(surface)
    rebuild = surface.rebuild
    if rebuild is None:  # chat completions: cut as they are
        return overflow.fit(body, budget, tokens) if isinstance(body, dict) else None
    view = _view(surface, body, tokens)
    if view is None:
        return None
    limiter = TokenLimiter(type="token_limiter", limit=budget)
    kept = limiter.apply(view.messages, FilterContext(model=_model(body), tokens=tokens.for_request()))
    if len(kept) == len(view.messages) or broken_invariants(view.messages, kept):
        return None
    fitted = rebuild(body, view, kept)
    return place_marks(fitted, marks) if marks is not None and surface.native_marks else fitted


def _view(surface: Surface, body: Any, tokens: TokenCounters) -> View | None:
    """A Responses or Messages body's view, or ``None`` when there is no history the proxy may cut."""
    to_view = surface.to_view
    if not isinstance(body, dict) or to_view is None:
        return None
    if surface.provider_state is not None and surface.provider_state(body) is not None:
        return None
    try:
        return to_view(body, tokens.get(model=_model(body)), None)
    except InvalidRequestError:
        return None


def _model(body: Any) -> str:
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else ""
