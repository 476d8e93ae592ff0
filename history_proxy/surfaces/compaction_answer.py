"""The answer to a Responses request the proxy compacted inline: its ``compaction`` item first in ``output``.

An emulated ``context_management`` compaction (:mod:`history_proxy.surfaces.compaction`) sends the
upstream the compacted input; the client must still receive the proxy's ``compaction`` item, as
OpenAI returns its own, so that its next request carries the item and not the history it replaced.
A whole ``response`` gets the item first in ``output``. A stream gets the item's
``response.output_item.added`` / ``response.output_item.done`` events at ``output_index`` 0 before the
first event that is not ``response.created``, ``response.in_progress`` or an ``error``; every later ``output_index``
is one up, every later ``sequence_number`` two up, and the final ``response`` (completed, incomplete or
failed) lists the item first. Only the answers of inline-compacted requests go through this rewrite
(an :class:`history_proxy.upstream.reply.AnswerRewrite`); every other answer is relayed raw.
"""

from __future__ import annotations

import json
from typing import Any

from history_proxy.surfaces.compaction import with_item
from history_proxy.surfaces.sse_rewrite import EventRewrite

_BEFORE_OUTPUT = frozenset({"response.created", "response.in_progress", "error"})
_ADDED = 2
"""Events the item adds to a stream (``added`` and ``done``)."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class InlineCompaction(EventRewrite):
    """Puts the proxy's ``compaction`` item first in a ``response``, whole or streamed."""

    def __init__(self, item: dict[str, Any]) -> None:
        super().__init__()
        self.item = item
        self._inserted = False

    def whole(self, body: bytes) -> bytes:
        """A JSON ``response`` with the item first in ``output`` (anything else: as it came)."""
        return with_item(body, self.item) or body

    def events(self, data: bytes) -> bytes:
        """The events with the item's two inserted before the first output event, the later ones moved."""
        out: list[bytes] = []
        for block in data.split(b"\n\n"):
            if not block:
                continue
            event = _data_of(block)
            if event is None:
                out.append(block)
                continue
            if not self._inserted and event.get("type") not in _BEFORE_OUTPUT:
                out += self._item_events(event.get("sequence_number"))
                self._inserted = True
            out.append(self._event(block, event))
        return b"".join(part + b"\n\n" for part in out)

    def _item_events(self, sequence: object) -> list[bytes]:
        """The item's two events, numbered where the event they come before was."""
        first = sequence if isinstance(sequence, int) else None
        events = []
        for n, kind in enumerate(("response.output_item.added", "response.output_item.done")):
            event: dict[str, Any] = {"type": kind}
            if first is not None:
                event["sequence_number"] = first + n
            event |= {"output_index": 0, "item": self.item}
            events.append(b"event: " + kind.encode() + b"\ndata: " + _dumps(event))
        return events

    def _event(self, block: bytes, event: dict[str, Any]) -> bytes:
        if not self._inserted:
            return block
        changed = dict(event)
        if isinstance(event.get("sequence_number"), int):
            changed["sequence_number"] = event["sequence_number"] + _ADDED
        if isinstance(event.get("output_index"), int):
            changed["output_index"] = event["output_index"] + 1
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            changed["response"] = {**response, "output": [self.item, *response["output"]]}
        return _with_data(block, changed)


def _data_of(block: bytes) -> dict[str, Any] | None:
    """The JSON object of an event's ``data:`` line (None: no such line, or not an object)."""
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            try:
                event = json.loads(line[5:])
            except ValueError:
                return None
            return event if isinstance(event, dict) else None
    return None


def _with_data(block: bytes, event: dict[str, Any]) -> bytes:
    lines = block.split(b"\n")
    return b"\n".join(b"data: " + _dumps(event) if line.startswith(b"data:") else line for line in lines)
