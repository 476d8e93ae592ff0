"""The bookkeeping and forwarding every handler shares: the request record, routing, sending, answering.

:class:`Forwarder` opens a request's :class:`~history_proxy.observability.metrics.Exchange` (:meth:`begin`,
:meth:`identify`), picks the upstreams its key may reach (:meth:`route`), sends it upstream with this
hop's forwarding headers (:meth:`open`) and turns the upstream's answer into the edge's answer, whole
or relayed, counted and logged once however it ends (:meth:`respond`, :meth:`finish`). The app's
handlers (:mod:`history_proxy.server.app`) and the one shaped-request handler (:mod:`history_proxy.server.handler`)
call these public methods; nothing reaches into another module's privates.
"""

from __future__ import annotations

import time
from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.observability.metrics import Exchange, Metrics, request_id_for
from history_proxy.server.caller import reachable_upstreams, resolve_identity
from history_proxy.server.edge import Call, Outgoing, Relay, Whole
from history_proxy.server.forwarded import forwarded_headers
from history_proxy.server.guard import CLIENT_CLOSED
from history_proxy.summaries.compactions import CompactionStore
from history_proxy.upstream.client import Body
from history_proxy.upstream.reply import UpstreamReply

Headers = list[tuple[str, str]] | None


class Forwarder:
    """Routing, sending and answering, over the app's metrics and token counters."""

    metrics: Metrics
    tokens: TokenCounters
    compactions: CompactionStore
    """The summaries behind the proxy's own Responses ``compaction`` items (emulated compaction)."""

    def begin(self, call: Call) -> Exchange:
        """The request's record, kept in the scope for the error answer and the access line."""
        exchange = Exchange(request_id_for(call.headers), call.method, call.path, time.perf_counter())
        call.scope.setdefault("state", {})["exchange"] = exchange
        return self.metrics.telemetry.begin(exchange, call.headers, call.state.config)

    def identify(self, call: Call, exchange: Exchange) -> Identity:
        """The caller's identity (role, agent, tenant), recorded on ``exchange``."""
        return exchange.identified(resolve_identity(call.state.config, call.headers))

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count and log the request once, however it ended."""
        self.metrics.finish(exchange, status)

    def route(
        self, call: Call, body: dict[str, Any], exchange: Exchange, *, forward: bool = True
    ) -> list[str]:
        """The upstreams to try for ``body``'s model that the caller's key may reach (else 403); with
        ``forward=False`` (a preview) the request is recorded as going to none of them."""
        model = self.metrics.telemetry.requested(exchange, body)
        names = reachable_upstreams(call.state.config, call.headers, call.state.config.route(model or ""))
        exchange.routed(model, names[0] if forward else None)
        return names

    async def open(
        self,
        call: Call,
        exchange: Exchange,
        path: str,
        names: list[str],
        body: Body,
        sent: Headers = None,
        query: str | None = None,
    ) -> UpstreamReply:
        """Send the request upstream: ``sent`` headers (default: the client's) and this hop's forwarding;
        ``query`` (default: the client's) after the path."""
        exchange.attempt_sent()
        client = call.scope.get("client")
        headers = forwarded_headers(
            call.header_items if sent is None else sent,
            client[0] if client else "",
            call.scope.get("scheme", "http"),
            call.state.config.trusted_proxies,
        )
        return await call.state.upstreams.open(
            call.method,
            path,
            query=call.query if query is None else query,
            headers=headers,
            names=names,
            body=body,
            trace=exchange.trace,
        )

    async def respond(self, reply: UpstreamReply, exchange: Exchange, extra: dict[str, str]) -> Outgoing:
        """The upstream's answer for the client: relayed, or read whole and sent in one write."""
        exchange.answer_started(reply.upstream, reply.attempts, reply.status_code)
        waited_ms = reply.wait_ms
        response: Outgoing
        if reply.ok and (exchange.stream or not reply.is_whole_json):
            response = Relay(reply, lambda: self._streamed(reply, exchange))
            if exchange.stream:
                self.metrics.stream_opened(exchange)
        else:  # error answers and whole JSON answers: read at once, sent verbatim in one write
            read_started = time.perf_counter()
            response = Whole(reply.status_code, await reply.read())
            waited_ms += (time.perf_counter() - read_started) * 1000
        overhead_ms = exchange.overhead(waited_ms)
        if extra:
            extra = {**extra, "x-history-overhead-ms": f"{overhead_ms:.2f}"}
        ours = {**extra, "x-request-id": exchange.request_id}  # these replace the upstream's own
        headers = response.headers  # only content-length so far
        for name, value in reply.headers:
            name = "x-upstream-request-id" if name == "x-request-id" else name
            if name not in ours:
                headers.append((name.encode("latin-1"), value.encode("latin-1")))
        headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in ours.items()]
        if not reply.ok:
            self.finish(exchange)
        elif not isinstance(response, Relay):
            self._streamed(reply, exchange)  # relayed whole: record it now
        return response

    def _streamed(self, reply: UpstreamReply, exchange: Exchange) -> None:
        exchange.relayed(
            broken=reply.broken,
            first_byte_at=reply.first_byte_at,
            usage=reply.usage,
            status=CLIENT_CLOSED if not reply.complete and not reply.broken else None,
        )
        self.finish(exchange)
