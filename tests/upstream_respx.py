"""respx for the proxy's upstream client.

It sends through :class:`history_proxy.upstream.transport.LeanTransport`."""

from __future__ import annotations

from typing import Any, ClassVar

import httpx
from respx.mocks import AbstractRequestMocker

from history_proxy.upstream.transport import Address, ResponseAnswer, Timeouts, wire_headers

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
"""Environment variables that send the upstream client through an HTTP proxy (and past this mocker)."""

UPSTREAM_MOCKER = "lean"
"""respx's mocker for the proxy's upstream client: ``respx.mock(using=UPSTREAM_MOCKER)``."""


class LeanTransportMocker(AbstractRequestMocker):
    """respx for :class:`history_proxy.upstream.transport.LeanTransport`, the proxy's upstream transport.

    respx's default mocker patches httpcore, which the proxy no longer sends through; this one
    answers the transport's requests from the routes, through both of its doors (httpx's
    ``handle_async_request`` and the raw ``exchange``, whose request is rebuilt here as the httpx
    request it would be on the wire), and passes unrouted ones to the network. Clients of the proxy
    in tests (httpx over ASGI, the openai SDK) are never intercepted.
    """

    name = UPSTREAM_MOCKER
    targets: ClassVar[list[str]] = ["history_proxy.upstream.transport.LeanTransport"]
    target_methods: ClassVar[list[str]] = ["handle_async_request", "exchange"]

    @classmethod
    def to_httpx_request(cls, **kwargs: Any) -> httpx.Request:
        if "request" in kwargs:
            request: httpx.Request = kwargs["request"]
            return request
        address: Address = kwargs["address"]
        method: str = kwargs["method"].upper()
        timeouts: Timeouts = kwargs["timeouts"]
        return httpx.Request(
            method,
            address.url,
            headers=wire_headers(address, method, kwargs["headers"], kwargs["body"]),
            content=kwargs["body"],
            extensions={"timeout": {**timeouts._asdict(), "pool": timeouts.connect}},
        )

    @classmethod
    async def from_async_httpx_response(
        cls, httpx_response: httpx.Response, target: Any, **kwargs: Any
    ) -> Any:
        # a fresh response around the route's stream, as the transport hands one over
        response = httpx.Response(
            httpx_response.status_code,
            headers=httpx_response.headers.raw,
            stream=httpx_response.stream,
            extensions=httpx_response.extensions,
        )
        return response if "request" in kwargs else ResponseAnswer(response)
