"""One door per endpoint: every spelling of a shaped route is served as that route.

The routes whose requests the proxy shapes (each surface's in :data:`history_proxy.surfaces.table.TABLE`:
``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages``, ``/v1/messages/count_tokens``;
and ``/v1/history/preview``) are matched exactly by the edge. A spelling it did not recognise used
to be forwarded raw as "any other ``/v1/...``" path, skipping every chain, while nginx and many
gateways serve it as the real endpoint. So a ``POST``
whose path, with repeated slashes merged, trailing slashes and surrounding whitespace removed and
letters lower-cased, is a shaped route is served as that route (:func:`normalise`). Percent-encoded
characters are decoded by the server before (``/v1/chat%2Fcompletions`` is the chat route), and
paths with dot segments, backslashes, semicolons or encoded NUL or percent signs are refused by
:func:`history_proxy.server.edge.check_path`.
"""

from __future__ import annotations

import re

from starlette.types import Scope

from history_proxy.surfaces.table import TABLE

PREVIEW_ROUTE = "/v1/history/preview"
SHAPED_ROUTES = frozenset({surface.route for surface in TABLE if "{" not in surface.route} | {PREVIEW_ROUTE})
"""Every surface's route (a new row of the surface table has its door here at once) and the preview."""
_SLASHES = re.compile(r"/{2,}")
LIMITED_PREFIX = "/v1/"
"""Requests under this path (however spelled) count against ``limits``; health, metrics, admin never do."""


def loose(route: str) -> str:
    """``route`` as the doors read it: repeated slashes merged, surrounding whitespace and trailing
    slashes removed, letters lower-cased."""
    return _SLASHES.sub("/", route.strip()).rstrip("/").lower()


def canonical(route: str) -> str | None:
    """The shaped route ``route`` spells, if any (None: it names no shaped route)."""
    if route in SHAPED_ROUTES:
        return route
    spelled = loose(route)
    return spelled if spelled in SHAPED_ROUTES else None


def limited(route: str) -> bool:
    """Whether the guard's limits count a request to ``route`` (the path below the root path): every
    spelling of a path under ``/v1/`` (``//v1/chat/completions``, ``/V1/messages``, ``/v1//models``)."""
    return route.startswith(LIMITED_PREFIX) or loose(route).startswith(LIMITED_PREFIX)


def normalise(scope: Scope, route: str) -> str:
    """``route`` (the path below the root path) as the shaped route it spells, ``scope`` rewritten to it.

    Other routes come back unchanged. Only ``POST`` requests are shaped, so only they are rewritten.
    """
    if scope["method"] != "POST":
        return route
    shaped = canonical(route)
    if shaped is None or shaped == route:
        return route
    root: str = scope.get("root_path", "")
    scope["path"] = root + shaped
    scope["raw_path"] = scope["path"].encode("utf-8")
    return shaped
