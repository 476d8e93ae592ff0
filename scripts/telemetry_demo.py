"""A three-agent run through a traced history-proxy, for docs/telemetry.md's picture.

``python scripts/telemetry_demo.py --proxy http://127.0.0.1:8080 --collector http://127.0.0.1:6006/v1/traces``

A planner, a coder and a reviewer, each an ``invoke_agent`` span of the client's own (exported to
``--collector`` by the OpenTelemetry SDK, as an instrumented agent framework would), make their
model calls through the proxy with the openai SDK, the W3C trace context injected. The proxy (run
with ``telemetry.enabled`` and the same collector, e.g. ``config/default.yaml`` plus the
``telemetry`` section) adds its spans under each call. Prints the trace id.
"""

from __future__ import annotations

import argparse
from typing import Any

import openai
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TOOL_OUTPUT = "\n".join(
    f"src/module_{i}.py: def handler_{i}(request): return route(request, {i})" for i in range(60)
)


def history(turns: int) -> list[dict[str, Any]]:
    """A coder's conversation: a task, then ``turns`` tool calls with long outputs."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coder. Use the tools."},
        {"role": "user", "content": "Find where requests are routed and add a timeout."},
    ]
    for i in range(turns):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "grep", "arguments": f'{{"n": {i}}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": TOOL_OUTPUT})
    messages.append({"role": "user", "content": "Continue."})
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--collector", required=True)
    args = parser.parse_args()
    provider = TracerProvider(resource=Resource.create({"service.name": "agents"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=args.collector)))
    tracer = provider.get_tracer("demo-agents")
    client = openai.OpenAI(base_url=f"{args.proxy}/v1", api_key="demo", max_retries=0)
    agents = [
        ("planner", "planner", "gpt-4o-mini", history(2)),
        ("coder#1", "worker", "gpt-4o", history(12)),
        ("reviewer", "default", "gpt-4o-mini", history(1)),
    ]
    with tracer.start_as_current_span("run three agents") as run:
        for name, role, model, messages in agents:
            with tracer.start_as_current_span(
                f"invoke_agent {name}", attributes={"gen_ai.agent.name": name}
            ) as span:
                headers = {"X-Agent-Role": role, "X-Agent-Name": name, "X-Conversation-Id": "demo-run-1"}
                TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(span))
                client.chat.completions.create(model=model, messages=messages, extra_headers=headers)  # type: ignore[arg-type]
        print(f"{run.get_span_context().trace_id:032x}")
    provider.shutdown()


if __name__ == "__main__":
    main()
