"""The ``telemetry`` config block: OpenTelemetry GenAI spans per model call, exported over OTLP/HTTP.

Off unless ``enabled: true``. Everything left unset here is read by the OpenTelemetry SDK from its
own environment variables (``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*``, ``OTEL_SEMCONV_STABILITY_OPT_IN``); ``OTEL_SDK_DISABLED=true`` turns it off whatever
this block says. What the spans carry is ``docs/telemetry.md``. A leaf: pydantic only, so loading a
config never imports the SDK.
"""

from __future__ import annotations

from pydantic import Field

from history_proxy.config.strict import StrictModel


class TelemetryConfig(StrictModel):
    """OpenTelemetry traces (``docs/telemetry.md``)::

    telemetry:
      enabled: true
      endpoint: http://127.0.0.1:4318/v1/traces   # else OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
      sample_ratio: 0.1                            # else OTEL_TRACES_SAMPLER(_ARG)
    """

    enabled: bool = False
    """Emit a span per model call (chat completions, Responses, Messages) and export it."""
    endpoint: str | None = Field(default=None, pattern=r"^https?://")
    """The OTLP/HTTP traces URL, path included (``.../v1/traces``); none: the SDK's environment
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``,
    else ``http://localhost:4318/v1/traces``)."""
    service_name: str | None = Field(default=None, min_length=1)
    """The ``service.name`` resource attribute; none: ``OTEL_SERVICE_NAME``, else ``history-proxy``."""
    sample_ratio: float | None = Field(default=None, ge=0, le=1)
    """Share of new traces recorded (a client's sampled flag is followed: parent-based); none: the
    SDK's ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based, always on)."""
    capture_content: bool = False
    """Put the forwarded messages' text in ``gen_ai.input.messages``: what the upstream received,
    after the whole chain (the global chain's secret stripping included). Off: no message text ever
    reaches a span. Keys never do."""
    capture_content_chars: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """The most text one span's ``gen_ai.input.messages`` carries: the system prompt (a quarter at
    most) and the newest messages that fit, each cut where the room ends, older ones counted."""
    max_queue_bytes: int = Field(default=32 * 1024 * 1024, ge=1024 * 1024)
    """The most (estimated) bytes of spans waiting for export; a span past it is dropped and counted
    (``history_proxy_telemetry_spans_dropped_total{reason="queue_full"}``), as past the SDK's
    ``OTEL_BSP_MAX_QUEUE_SIZE`` spans."""

    def describe(self) -> str:
        """One line for the startup summary."""
        if not self.enabled:
            return "off"
        where = self.endpoint or "OTEL_EXPORTER_OTLP_* environment"
        return f"OTLP/HTTP to {where}" + (", message text included" if self.capture_content else "")
