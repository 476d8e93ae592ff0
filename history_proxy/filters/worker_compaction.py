"""``worker_compaction`` (Plexus's ``WorkerAgentConversationFilter``, seed 002): call-only actions out, then truncation.

Old assistant messages that carry only tool calls are removed with their results, keeping the newest
such message so the agent still sees the call it is answering; then ``tool_result_truncation``.
"""

from __future__ import annotations

import bisect
from typing import Literal

from history_proxy.core.messages import Message, group_spans, has_text, is_action
from history_proxy.filters._cost_trigger import NOTICE_TOKENS, Item, cost_boundary, window_room
from history_proxy.filters.base import FilterContext
from history_proxy.filters.tool_result_truncation import ToolResultLimits, text_length


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
    trigger: Literal["every", "cost"] = "every"
    """``every``: compact on every request; ``cost``: remove and cut (all at once) only when the tokens
    removed repay the prompt-cache rewrite, under the upstream's pricing (docs/cost.md)."""
    cache_friendly = (
        "mostly: the prefix is stable up to the previous tool-call-only action, which the next one "
        "removes, and to the result that just aged past keep_recent; trigger: cost compacts in large "
        "steps only when it pays"
    )

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        spans = group_spans(messages)
        bare = [(a, b) for a, b in spans if is_action(messages[a]) and not has_text(messages[a])]
        if self.trigger == "cost":
            return self._apply_cost(messages, ctx, spans, bare)
        removed = set(bare[:-1])
        kept = [m for a, b in spans if (a, b) not in removed for m in messages[a:b]]
        return self.truncate_old_results(kept, ctx)

    def _apply_cost(
        self,
        messages: list[Message],
        ctx: FilterContext,
        spans: list[tuple[int, int]],
        bare: list[tuple[int, int]],
    ) -> list[Message]:
        """The compaction as a prefix of items in message order: each long tool result is a cut, each
        tool-call-only group a removal placed after its own results' cuts (removing a group implies
        them), so the boundary is one count and ``cost_boundary`` decides when it moves."""
        counter = ctx.tokens.get(model=ctx.model)
        counts = [counter.message(m) for m in messages]
        kept_chars = self.max_chars // 4 + NOTICE_TOKENS * 3  # ~4 characters a token, and the notice
        bare_set = set(bare)
        group_of: dict[int, tuple[int, int]] = {}
        items: list[Item] = []
        kinds: list[tuple[str, int]] = []  # ("cut", tool index) or ("remove", action index)
        for a, b in spans:
            cut_saving = 0
            for i in range(a, b):
                if messages[i].get("role") == "tool":
                    group_of[i] = (a, b)
                    if text_length(messages[i].get("content")) > self.max_chars:
                        saving = max(0, counts[i] - kept_chars)
                        items.append(Item(i, saving))
                        kinds.append(("cut", i))
                        cut_saving += saving
            if (a, b) in bare_set:
                items.append(Item(a, max(0, sum(counts[a:b]) - cut_saving)))
                kinds.append(("remove", a))
        bare_starts = [a for a, _ in bare]
        tools = sorted(group_of)
        keep = self.keep_recent

        def eager(end: int, available: int) -> int:
            """How long a prefix of the items the every-request compaction of ``messages[:end]`` covers."""
            newest = bisect.bisect_left(bare_starts, end) - 1
            cutoff = bare_starts[newest] if newest >= 0 else -1  # bare groups before it go

            def removed(tool: int) -> bool:
                return group_of[tool] in bare_set and group_of[tool][0] < cutoff

            remaining = [i for i in tools[: bisect.bisect_left(tools, end)] if not removed(i)]
            # the results older than this one are cut (all of them with keep_recent 0)
            old_before = remaining[len(remaining) - keep] if 0 < keep < len(remaining) else -1
            old_before = end if keep == 0 else old_before
            count = 0
            for kind, position in kinds[:available]:
                gone = position < cutoff if kind == "remove" else removed(position) or position < old_before
                if not gone:
                    break
                count += 1
            return count

        count = cost_boundary(messages, counts, items, eager, ctx.pricing, window_room(ctx))
        removed = {position for kind, position in kinds[:count] if kind == "remove"}
        cut = [position for kind, position in kinds[:count] if kind == "cut"]
        truncated = self.truncate_old_results(messages, ctx, cut)
        return [m for a, b in spans if a not in removed for m in truncated[a:b]]
