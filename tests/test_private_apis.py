"""Each use of a dependency's private API, checked against the installed version.

The proxy reaches into four private places, each from one module (docs/performance.md, "Tricks that
reach into private attributes"). An upgrade that moves one must fail here, by name, rather than
slow the proxy down or break it quietly:

| private API | used by | for |
|---|---|---|
| ``tiktoken.Encoding._mergeable_ranks`` | ``proxy/core/encodings.py`` | dropping a 27 MB Python copy of the ranks |
| ``logging._srcfile`` | ``proxy/observability/metrics.py`` | skipping the caller lookup of each access line |
| ``BaseModel.__pydantic_private__`` | ``proxy/filters/base.py`` | ``Filter.private``: no ``__getattr__`` |
| ``uvicorn``'s ``HttpToolsProtocol`` | ``proxy/server/protocol.py`` | bounding the request head as it arrives |
"""

from __future__ import annotations

import inspect
import logging

import pytest
import tiktoken
from pydantic import BaseModel, PrivateAttr
from uvicorn.protocols.http import httptools_impl

from proxy.core.tokens import TokenCounters
from proxy.server.protocol import BoundedHttpToolsProtocol


def test_tiktoken_keeps_the_python_rank_table_proxy_core_encodings_releases() -> None:
    TokenCounters().get(model="gpt-4o").text("loads the encoding")  # as the proxy loads it (offline)
    encoding = tiktoken.encoding_for_model("gpt-4o")
    assert isinstance(getattr(encoding, "_mergeable_ranks", None), dict), (
        "tiktoken no longer keeps Encoding._mergeable_ranks: see release_rank_table in proxy/core/encodings.py"
    )


def test_logging_still_reads_srcfile_before_looking_up_the_caller() -> None:
    assert hasattr(logging, "_srcfile"), (
        "logging._srcfile is gone: see Metrics in proxy/observability/metrics.py"
    )
    assert "_srcfile" in inspect.getsource(logging.Logger._log), (
        "Logger._log no longer tests logging._srcfile: see proxy/observability/metrics.py"
    )


def test_pydantic_keeps_private_attributes_in_pydantic_private() -> None:
    class Holder(BaseModel):
        _state: int = PrivateAttr(default=7)

    held = Holder().__pydantic_private__
    assert isinstance(held, dict) and held.get("_state") == 7, (
        "pydantic moved private attributes out of __pydantic_private__: see Filter.private in proxy/filters/base.py"
    )


@pytest.mark.parametrize(
    "method",
    [
        "__init__",
        "connection_made",
        "data_received",
        "on_headers_complete",
        "on_message_complete",
        "send_400_response",
        "connection_lost",
    ],
)
def test_uvicorn_still_has_each_protocol_method_the_bounded_protocol_extends(method: str) -> None:
    base = httptools_impl.HttpToolsProtocol
    assert BoundedHttpToolsProtocol.__mro__[1] is base
    assert callable(getattr(base, method, None)), (
        f"uvicorn's HttpToolsProtocol has no {method}: see BoundedHttpToolsProtocol in proxy/server/protocol.py"
    )


def test_uvicorn_protocol_still_holds_the_state_the_bounded_protocol_reads() -> None:
    source = inspect.getsource(httptools_impl)
    for name in ("self.url", "self.cycle", "self.client", "self.transport", "self.headers"):
        assert name in source, (
            f"uvicorn's HttpToolsProtocol no longer sets {name}: see proxy/server/protocol.py"
        )
    cycle = inspect.getsource(httptools_impl.RequestResponseCycle)
    for name in ("response_complete", "response_started"):
        assert name in cycle, f"uvicorn's RequestResponseCycle has no {name}: see proxy/server/protocol.py"
