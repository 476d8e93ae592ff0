"""Message helpers shared by every filter: annotations, turns, groups and validity checks.

Messages are plain dicts as they arrive in a chat-completions body. Nothing here mutates its input.

Vocabulary (docs/architecture.md, invariants):

- a **turn** starts at a turn-start message (a ``user`` message, or one annotated
  ``message_type: task``) and runs to the next one; messages before the first turn start form a
  preamble turn of their own;
- a **group** is an assistant message with ``tool_calls`` plus the tool messages that follow it, or
  any other message alone. Dropping filters drop whole groups so tool pairs never break.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Message = dict[str, Any]


ANNOTATION_KEYS = frozenset({"tags", "message_type", "phase_id", "agent"})


KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


SYSTEM_ROLES = frozenset({"system", "developer"})


OPAQUE = "history_opaque"
"""Set (to True) by a surface adapter on a view message that stands for native items the proxy does
not read (tool declarations, compaction, unknown items): a filter keeps or drops it, and the adapter
sends its items whole. Among the leading system messages such a message is one of the instructions."""


TASK = "task"


ACTION = "action"


OBSERVATION = "observation"


SYNTHESIS = "synthesis"


FINAL = "final"


GLOBAL_OBSERVATION = "global_observation"


MESSAGE_TYPES = frozenset({TASK, ACTION, OBSERVATION, SYNTHESIS, FINAL, GLOBAL_OBSERVATION})


# Inferred kinds for messages that carry no annotation and are neither task, action nor observation.
CONVERSATION = "conversation"


SYSTEM = "system"


DEFAULT_COMPLETION_TOOLS = frozenset({"final_answer", "submit", "task_complete"})


class NotApplicable(ValueError):
    """A filter cannot apply to this input (answered as a 400 naming the filter)."""


def text_of(content: Any) -> str:
    """The text of a message's content: the string itself, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def has_text(message: Message) -> bool:
    """True when the message has non-blank text content."""
    return bool(text_of(message.get("content")).strip())


def image_count(content: Any) -> int:
    """How many image parts a content list holds."""
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url")


def map_text(content: Any, change: Any) -> Any:
    """Apply ``change(str) -> str`` to a string content or to every text part of a list content."""
    if isinstance(content, str):
        return change(content)
    if isinstance(content, list):
        return [
            {**part, "text": change(part["text"])}
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


def tool_calls(message: Message) -> list[dict[str, Any]]:
    """The message's tool calls (an empty list for none)."""
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def is_action(message: Message) -> bool:
    """An assistant message that carries tool calls."""
    if message.get("role") != "assistant":
        return False
    calls = message.get("tool_calls")
    return isinstance(calls, list) and bool(calls)


def call_name(call: dict[str, Any]) -> str:
    """The function name of one tool call ('' when absent)."""
    function = call.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    return ""


def tool_call_names(message: Message) -> list[str]:
    """The function names of a message's tool calls, in order."""
    return [call_name(call) for call in tool_calls(message)]


def tool_call_ids(message: Message) -> list[str]:
    """The ids of a message's tool calls, in order."""
    return [str(call.get("id")) for call in tool_calls(message)]


def tags_of(message: Message) -> frozenset[str]:
    """The message's ``tags`` annotation as a set."""
    tags = message.get("tags")
    return frozenset(tags) if isinstance(tags, list) else frozenset()


def is_turn_start(message: Message) -> bool:
    """A user message, or any message annotated ``message_type: task``.

    An annotation decides over the role: a ``user`` message annotated as an ``observation`` (a
    text-action agent's environment output) does not start a turn.
    """
    annotated = message.get("message_type")
    if annotated is not None:
        return bool(annotated == TASK)
    return message.get("role") == "user"


def classify(
    messages: Sequence[Message], completion_tools: Iterable[str] = DEFAULT_COMPLETION_TOOLS
) -> list[str]:
    """The message type of every message: its annotation, or the inference of docs/http.md (message annotations).

    Inference: user -> ``task``; assistant with tool calls -> ``action`` (``final`` when one of its
    calls names a completion tool, and then its tool results are ``final`` too); tool ->
    ``observation``; system/developer -> ``system``; other assistant text -> ``conversation``.
    """
    completion = frozenset(completion_tools)
    kinds: list[str] = []
    group_kind = OBSERVATION  # what the tool messages of the current group are
    for message in messages:
        role = message.get("role")
        inferred: str
        if role == "tool":
            inferred = group_kind
        # an action (is_action inlined: this runs for every message of every request)
        elif role == "assistant" and isinstance(calls := message.get("tool_calls"), list) and calls:
            final = not completion.isdisjoint(map(call_name, calls))
            inferred = FINAL if final else ACTION
            group_kind = FINAL if final else OBSERVATION
        else:
            inferred = TASK if role == "user" else SYSTEM if role in SYSTEM_ROLES else CONVERSATION
            group_kind = OBSERVATION
        annotated = message.get("message_type")
        kinds.append(inferred if annotated is None or not isinstance(annotated, str) else annotated)
    return kinds


def strip_annotations(messages: Sequence[Message]) -> list[Message]:
    """Copies of annotated messages without the annotation keys; other messages pass as they are."""
    return [
        m if ANNOTATION_KEYS.isdisjoint(m) else {k: v for k, v in m.items() if k not in ANNOTATION_KEYS}
        for m in messages
    ]


def is_opaque(message: Message) -> bool:
    """Whether a view message stands for native items sent whole (see :data:`OPAQUE`)."""
    return message.get(OPAQUE) is True


def leading_system_count(messages: Sequence[Message]) -> int:
    """How many system/developer messages open the list."""
    count = 0
    for message in messages:
        if message.get("role") not in SYSTEM_ROLES:
            break
        count += 1
    return count


def group_spans(messages: Sequence[Message], start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` index spans of the groups in ``messages[start:end]``.

    An assistant message with tool calls owns every tool message that directly follows it; any
    other message (a stray tool message included) is a group alone.
    """
    stop = len(messages) if end is None else end
    spans: list[tuple[int, int]] = []
    i = start
    while i < stop:
        j = i + 1
        message = messages[i]
        # an action (is_action inlined: this runs for every message of every request)
        if (
            message.get("role") == "assistant"
            and isinstance(calls := message.get("tool_calls"), list)
            and calls
        ):
            while j < stop and messages[j].get("role") == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans


def groups(messages: Sequence[Message]) -> list[list[Message]]:
    """The groups of ``messages`` as lists, in order."""
    return [list(messages[a:b]) for a, b in group_spans(messages)]


def turn_spans(messages: Sequence[Message], start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` spans of the turns in ``messages[start:end]``, group-aligned.

    A turn begins at a turn-start message that begins a group; messages before the first one form
    a preamble turn.
    """
    stop = len(messages) if end is None else end
    starts = [a for a, _ in group_spans(messages, start, stop) if is_turn_start(messages[a])]
    if not starts or starts[0] != start:
        starts.insert(0, start)
    if start == stop:
        return []
    bounds = [*starts, stop]
    return [(bounds[k], bounds[k + 1]) for k in range(len(starts))]


def current_turn_start(messages: Sequence[Message], floor: int = 0) -> int:
    """Index of the last turn-start message that begins a group (0 when none; never below ``floor``)."""
    for i in range(len(messages) - 1, floor - 1, -1):  # from the end: the current turn is usually short
        annotated, role = messages[i].get("message_type"), messages[i].get("role")
        if annotated == TASK if annotated is not None else role == "user":  # is_turn_start, inlined
            if role != "tool":  # only a tool message can sit inside another message's group
                return i
            return max(floor, turn_spans(messages)[-1][0])
    return floor


def newest_user_index(messages: Sequence[Message]) -> int | None:
    """Index of the newest ``user`` message, if any."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def keep_spans(messages: Sequence[Message], spans: Iterable[tuple[int, int]]) -> list[Message]:
    """The messages inside ``spans`` (in the order given), as one new list."""
    kept: list[Message] = []
    for a, b in spans:
        kept.extend(messages[a:b])
    return kept


def in_steps(count: int, step: int, most: int) -> int:
    """``count`` rounded up to a multiple of ``step``, at most ``most``: how the ``step`` knobs keep
    the cut (and so the kept prefix) in place across consecutive requests until the next block."""
    return min(-(-count // step) * step, most)


def how_many_to_drop(sizes: Sequence[int], excess: int, step: int) -> int:
    """How many of the oldest droppable units (groups or turns) must go to free ``excess`` tokens.

    ``sizes`` are the units' tokens, oldest first; the count is rounded up to a multiple of ``step``
    and never passes the last unit; when all of them are not enough, all go.
    """
    count, freed = 0, 0
    while count < len(sizes) and freed < excess:
        freed += sizes[count]
        count += 1
    return in_steps(count, step, len(sizes))
