"""``tag_tool_call_observations``: SWE-agent's ``TagToolCallObservations`` (seed 003).

The tags land on the results of the matching calls (where ``last_n_observations`` reads them), not
only on the action.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_serializer

from history_proxy.core.messages import Message, call_name, group_spans, is_action, tags_of, tool_calls
from history_proxy.filters.base import Filter, FilterContext
from history_proxy.filters.last_n_observations import TagSet


class TagToolCallObservations(Filter):
    """Tag the results of calls to the named tools, so ``last_n_observations`` keeps (or drops) them.

    The tags are added to the ``tags`` annotation of every tool message answering a call to one of
    ``function_names``, and of the action making the call (as SWE-agent does).

    ```yaml
    worker:
      - {type: tag_tool_call_observations, function_names: [view_file], tags: [keep_output]}
      - {type: last_n_observations, n: 5}
    ```
    """

    type: Literal["tag_tool_call_observations"]
    function_names: TagSet = Field(min_length=1)
    """Tag the results of calls to tools with these names."""
    tags: TagSet = Field(default=frozenset({"keep_output"}), min_length=1)
    """Tags added to every matching result (and its action)."""
    cache_friendly = "yes: annotations only (stripped before forwarding); the content sent is unchanged"

    @field_serializer("function_names", "tags")
    def _sorted(self, names: TagSet) -> list[str]:
        return sorted(names)

    def tagged(self, message: Message) -> Message:
        """``message`` with ``tags`` added to its annotation (the same object when it had them all)."""
        present = tags_of(message)
        if self.tags <= present and isinstance(message.get("tags"), list):
            return message
        return {**message, "tags": sorted(present | self.tags)}

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        result = list(messages)
        for start, stop in group_spans(messages):
            action = messages[start]
            if not is_action(action):
                continue
            matching = {str(c.get("id")) for c in tool_calls(action) if call_name(c) in self.function_names}
            if not matching:
                continue
            result[start] = self.tagged(action)
            for i in range(start + 1, stop):
                if str(messages[i].get("tool_call_id")) in matching:
                    result[i] = self.tagged(messages[i])
        return result
