"""``worker_compaction`` (Plexus's ``WorkerAgentConversationFilter``, seed 002): call-only actions out, then truncation.

Old assistant messages that carry only tool calls are removed with their results, keeping the newest
such message so the agent still sees the call it is answering; then ``tool_result_truncation``.
"""

from __future__ import annotations

from typing import Literal

from proxy.core.messages import Message, group_spans, has_text, is_action
from proxy.filters.base import FilterContext
from proxy.filters.tool_result_truncation import ToolResultLimits


class WorkerCompaction(ToolResultLimits):
    """Remove old tool-call-only actions with their results, then truncate old tool results.

    Every assistant message that has tool calls and no text is removed together with all its
    tool results, except the newest such message (the call the agent is working on; Plexus keeps
    it to avoid loops). Then ``tool_result_truncation`` runs over what is left.

    ```yaml
    worker: [{type: worker_compaction, keep_recent: 2, max_chars: 500}]
    ```
    """

    type: Literal["worker_compaction"]
    cache_friendly = (
        "mostly: the prefix is stable up to the previous tool-call-only action, which the next one "
        "removes, and to the result that just aged past keep_recent"
    )

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        spans = group_spans(messages)
        bare = [(a, b) for a, b in spans if is_action(messages[a]) and not has_text(messages[a])]
        removed = set(bare[:-1])
        kept = [m for a, b in spans if (a, b) not in removed for m in messages[a:b]]
        return self.truncate_old_results(kept, ctx)
