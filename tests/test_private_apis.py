"""Each use of a dependency's private API, checked against the installed version.

The proxy reaches into five private places, each from one module (docs/architecture.md, "Fences
around dependencies' private APIs"; docs/performance.md, "Tricks that reach into private
attributes"). An upgrade that moves one must fail here, by name, rather than slow the proxy down or
break it quietly; a second module reaching the same place fails here too:

| private API | used by (in ``history_proxy/``) | for |
|---|---|---|
| ``tiktoken.Encoding._mergeable_ranks`` | ``core/encodings.py`` | dropping a 27 MB Python copy of the ranks |
| ``logging._srcfile`` | ``observability/access.py`` | skipping the caller lookup of each access line |
| ``BaseModel.__pydantic_private__`` | ``filters/base.py`` | ``Filter.private``: no ``__getattr__`` |
| ``uvicorn``'s ``HttpToolsProtocol`` | ``server/protocol.py`` | bounding the request head as it arrives |
| OpenTelemetry's ``BatchProcessor._queue`` | ``observability/otel.py`` | a full span queue drops at once |
"""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path

import pytest
import tiktoken
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, PrivateAttr
from uvicorn.protocols.http import httptools_impl

from history_proxy.core.tokens import TokenCounters
from history_proxy.observability.otel import BoundedBatchSpanProcessor
from history_proxy.server.protocol import BoundedHttpToolsProtocol


def test_tiktoken_keeps_the_python_rank_table_proxy_core_encodings_releases() -> None:
    TokenCounters().get(model="gpt-4o").text("loads the encoding")  # as the proxy loads it (offline)
    encoding = tiktoken.encoding_for_model("gpt-4o")
    assert isinstance(getattr(encoding, "_mergeable_ranks", None), dict), (
        "tiktoken no longer keeps Encoding._mergeable_ranks: see release_rank_table in history_proxy/core/encodings.py"
    )


def test_logging_still_reads_srcfile_before_looking_up_the_caller() -> None:
    assert hasattr(logging, "_srcfile"), (
        "logging._srcfile is gone: see write_access_line in history_proxy/observability/access.py"
    )
    assert "_srcfile" in inspect.getsource(logging.Logger._log), (
        "Logger._log no longer tests logging._srcfile: see history_proxy/observability/access.py"
    )


def test_sys_getframe_still_names_the_caller_the_access_line_reports() -> None:
    def caller() -> tuple[str, str]:
        frame = sys._getframe(1)
        return frame.f_code.co_filename, frame.f_code.co_name

    assert caller() == (__file__, "test_sys_getframe_still_names_the_caller_the_access_line_reports"), (
        "sys._getframe(1) no longer gives the caller's frame: see write_access_line in "
        "history_proxy/observability/access.py"
    )


def test_pydantic_keeps_private_attributes_in_pydantic_private() -> None:
    class Holder(BaseModel):
        _state: int = PrivateAttr(default=7)

    held = Holder().__pydantic_private__
    assert isinstance(held, dict) and held.get("_state") == 7, (
        "pydantic moved private attributes out of __pydantic_private__: "
        "see Filter.private in history_proxy/filters/base.py"
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
        f"uvicorn's HttpToolsProtocol has no {method}: see BoundedHttpToolsProtocol in history_proxy/server/protocol.py"
    )


def test_uvicorn_protocol_still_holds_the_state_the_bounded_protocol_reads() -> None:
    source = inspect.getsource(httptools_impl)
    for name in ("self.url", "self.cycle", "self.client", "self.transport", "self.headers"):
        assert name in source, (
            f"uvicorn's HttpToolsProtocol no longer sets {name}: see history_proxy/server/protocol.py"
        )
    cycle = inspect.getsource(httptools_impl.RequestResponseCycle)
    for name in ("response_complete", "response_started"):
        assert name in cycle, (
            f"uvicorn's RequestResponseCycle has no {name}: see history_proxy/server/protocol.py"
        )


def test_opentelemetry_batch_processor_still_has_the_queue_the_bounded_processor_reads() -> None:
    counter = Counter("spans_dropped", "test", ["reason"], registry=CollectorRegistry())
    processor = BoundedBatchSpanProcessor(InMemorySpanExporter(), counter)
    try:
        assert len(processor._queue) == 0 and processor._limit > 0, (
            "OpenTelemetry's BatchProcessor changed its _queue or _max_queue_size: "
            "see history_proxy/observability/otel.py"
        )
        inner = processor._batch_processor
        assert "timeout_millis" in inspect.signature(inner.shutdown).parameters, (
            "OpenTelemetry's BatchProcessor.shutdown takes no timeout_millis: see history_proxy/observability/otel.py"
        )
    finally:
        processor.shutdown()


PACKAGE = Path(__file__).resolve().parents[1] / "history_proxy"
FENCES = {
    "_mergeable_ranks": "core/encodings.py",
    "_srcfile": "observability/access.py",
    "__pydantic_private__": "filters/base.py",
    "httptools_impl": "server/protocol.py",
    "._batch_processor": "observability/otel.py",
    "sys._getframe": "observability/access.py",
}


@pytest.mark.parametrize(("private", "module"), sorted(FENCES.items()))
def test_each_private_api_is_reached_from_its_one_module(private: str, module: str) -> None:
    users = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if private in path.read_text("utf-8")
    )
    assert users == [module], f"{private} is used in {users}: keep each private API in one module"
