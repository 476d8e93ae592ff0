"""What the surface adapters share: the back-reference, content parts, and running the chain on a view.

A surface adapter presents a native request (Responses ``input`` items, Messages ``messages``) to the
filters as chat messages, the **view**. Every view message made from native items carries
:data:`REF`, the index of its :class:`Unit` (the native items it stands for). Filters keep fields they
do not own, so the back-reference survives the chain; the adapter then rebuilds the native request
from the surviving view messages: an unchanged view message gives back its native items verbatim, a
changed one has only its changed text written into them. :data:`REF` holds an int, which the token
recipe never counts, and never reaches an upstream: only native items are sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any

import orjson

from history_proxy.core.identity import Identity
from history_proxy.core.messages import ANNOTATION_KEYS, Message, text_of
from history_proxy.core.summary_input import NATIVE_PART, PLACEHOLDER_URL, VIEW_REF
from history_proxy.core.tokens import TokenCounter
from history_proxy.pipeline.report import report_head
from history_proxy.pipeline.run import Pipeline, PipelineResult

REF = VIEW_REF
"""The view message's key holding the index of its native unit."""

TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
IMAGE_TYPES = frozenset({"image", "input_image", "image_url"})
OPENAI_MODEL_PREFIXES = ("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "codex", "ft:gpt", "text-", "davinci")

HISTORY_AT_PROVIDER = "history_at_provider"
"""The note of a request whose history lives at the provider (forwarded unfiltered)."""


@dataclass(slots=True)
class Unit:
    """The native items one view message stands for; ``kind`` tells the adapter how to write them back."""

    kind: str
    index: int = -1
    """The native item's (or message's) position; -1 for body-level units (instructions, system)."""
    items: Sequence[int] = ()
    """Further positions (a Responses step's items; a Messages block index)."""
    opaque: bool = False
    """Kept or dropped whole, never edited."""


@dataclass
class View:
    """A native request as chat messages, with the units their back-references point at."""

    messages: list[Message]
    units: list[Unit]
    spans: list[int] = field(default_factory=list)
    """Where each native message's view messages start (the refs of message ``i`` are
    ``range(spans[i], spans[i + 1])``); kept by adapters whose units follow the native order."""
    first_mark: int | None = None
    """The first native message carrying a client's ``cache_control`` mark (kept by the Messages
    adapter when it has a memo; None: no message carries one; -1: not looked for)."""
    reused: int = 0
    """How many leading native messages kept their view from the memo."""
    rewritten: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """Native messages written back with a filter's text for their one tool result: the text and the
    native written (kept by the Messages adapter; an elided observation comes back every turn)."""
    counts: list[int | None] = field(default_factory=list)
    """Each view message's tokens by the chat recipe, counted while it was built; None for a message
    the pipeline must check and count itself (see ``Pipeline.run``'s ``counted``)."""

    @property
    def natives(self) -> int:
        """How many native messages (input items) the view was built from."""
        return max(len(self.spans) - 1, 0)

    def prefix(self, natives: int) -> View:
        """A new view of this one's first ``natives`` native messages (``spans`` kept), to go on from."""
        cut, mark = self.spans[natives], self.first_mark
        return View(
            self.messages[:cut],
            self.units[:cut],
            self.spans[:natives],
            first_mark=mark if mark is not None and mark < natives else None,
            reused=natives,
            rewritten={i: done for i, done in self.rewritten.items() if i < natives},
            counts=self.counts[:cut],
        )

    def add(self, message: Message, unit: Unit, tokens: int | None = None) -> Message:
        message[REF] = len(self.units)
        self.units.append(unit)
        self.messages.append(message)
        self.counts.append(tokens)
        return message


@dataclass
class Shaped:
    """A surface request after the chain: the native body to send and what the chain did."""

    body: dict[str, Any]
    result: PipelineResult
    reused: int = 0
    """Native messages (input items) whose view came from the view memo."""
    converted: int = 0
    """Native messages (input items) converted into the view for this request."""


def ref_of(message: Message) -> int | None:
    """The unit index a view message points at (None for a message a filter made)."""
    ref = message.get(REF)
    return ref if isinstance(ref, int) and not isinstance(ref, bool) else None


def view_part(part: Any) -> Any:
    """A native content part as a chat content part: text and images as such, anything else by type only."""
    if not isinstance(part, dict):
        return {"type": "unknown"}
    kind = part.get("type")
    if kind.__class__ is not str:
        return {"type": "unknown"}
    if kind in TEXT_TYPES and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind in IMAGE_TYPES:
        return {"type": "image_url", "image_url": {"url": PLACEHOLDER_URL}, NATIVE_PART: part}
    return {"type": str(kind)}


def view_content(content: Any) -> Any:
    """Native message content as view content (a string stays a string)."""
    if isinstance(content, list):
        return [view_part(part) for part in content]
    return content if isinstance(content, str) else None


def counted_content(content: str | list[Any], counter: TokenCounter) -> tuple[Any, int]:
    """Native content as view content (:func:`view_content`) and its tokens by the chat recipe."""
    if isinstance(content, str):
        return content, counter.text(content)
    parts = [view_part(part) for part in content]
    known, count = counter.known.get, counter.text
    tokens = 0
    for part in parts:
        text = part.get("text")
        if text is not None:
            tokens += known(text) or count(text)
    return parts, tokens


def written_back(native: Any, before: Any, after: Any, text_type: str) -> Any:
    """``native`` content with the view's change from ``before`` to ``after`` written into it.

    Part for part when the view kept the parts (only changed texts are replaced); otherwise the
    view's text replaces the native content (as one text part when it was a list).
    """
    if after == before:
        return native
    if isinstance(native, str) or not isinstance(native, list):
        return text_of(after)
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before) == len(native):
        out = list(native)
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            changed = new != old and isinstance(new, dict) and isinstance(new.get("text"), str)
            if changed and isinstance(native[i], dict) and "text" in native[i]:
                out[i] = {**native[i], "text": new["text"]}
        return out
    text = text_of(after)
    return [{"type": text_type, "text": text}] if text else []


def without_annotations(item: Any) -> Any:
    """A native item without the proxy's annotation keys (the same object when it has none)."""
    if isinstance(item, dict) and not ANNOTATION_KEYS.isdisjoint(item):
        return {k: v for k, v in item.items() if k not in ANNOTATION_KEYS}
    return item


def annotations_of(item: dict[str, Any]) -> dict[str, Any]:
    """The annotation keys a client put on a native item, for the view."""
    return {k: v for k, v in item.items() if k in ANNOTATION_KEYS}


def unchanged(view: View, sent: Sequence[Message]) -> bool:
    """Whether the chain handed back the view's own messages, all of them, in order (nothing to rebuild)."""
    return len(sent) == len(view.messages) and all(map(is_, sent, view.messages))


def compact_json(value: Any) -> str:
    """``value`` as compact JSON with sorted keys (tool inputs and actions shown as call arguments)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # integers past 64 bits, and the like
        return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def is_openai_model(model: str) -> bool:
    """Whether the token recipe is OpenAI's own for ``model`` (otherwise counts are estimates)."""
    return model.lower().startswith(OPENAI_MODEL_PREFIXES)


async def run_view(
    pipeline: Pipeline,
    view: View,
    model: str,
    identity: Identity,
    upstream: str | None,
    rebuild: Callable[[Sequence[Message]], dict[str, Any]],
    surface: str,
) -> Shaped:
    """Run the caller's chain over ``view`` and rebuild the native body from what it kept."""
    counted = view.counts if len(view.counts) == len(view.messages) else None
    result = await pipeline.run(
        {"model": model, "messages": view.messages}, identity, upstream, cache_marks=False, counted=counted
    )
    sent = result.body["messages"]
    body = rebuild(sent)
    _annotate(result.report, model, surface)
    return Shaped(body, replace(result, body=body), view.reused, view.natives - view.reused)


def unfiltered(
    pipeline: Pipeline,
    body: dict[str, Any],
    view: View,
    model: str,
    identity: Identity,
    upstream: str | None,
    surface: str,
    why: str,
) -> Shaped:
    """The request forwarded as it came, its figures counted over the view, with a note saying why."""
    counter = pipeline.tokens.for_request().get(model=model)
    tokens = counter.messages(view.messages) if view.messages else 0
    side = {"messages": len(view.messages), "tokens": tokens}
    note = f"{HISTORY_AT_PROVIDER}:{why}"
    report = report_head(identity, model, upstream, [], side, dict(side), [])
    report["notes"] = [*identity.notes, note]
    report["mode"] = "enforce"
    _annotate(report, model, surface)
    result = PipelineResult(
        body=body,
        report=report,
        tokens_before=tokens,
        tokens_after=tokens,
        messages_before=len(view.messages),
        messages_after=len(view.messages),
        tokens_forwarded=tokens,
        messages_forwarded=len(view.messages),
    )
    return Shaped(body, result, view.reused, view.natives - view.reused)


def _annotate(report: dict[str, Any], model: str, surface: str) -> None:
    report["surface"] = surface
    if not is_openai_model(model):
        report["tokens_estimated"] = True
        report["tokens_note"] = "counted with OpenAI's recipe over the chat view: an estimate for this model"
