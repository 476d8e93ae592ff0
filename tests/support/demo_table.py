"""Reading `history-proxy demo`'s table: one row per role, unfiltered -> shaped."""

from __future__ import annotations

import re

ROW = re.compile(
    r"^(?P<role>\w+) +(?P<t0>[\d,]+) -> (?P<t1>[\d,]+) \(-\d+%\) +(?P<c0>[\d,]+) -> (?P<c1>[\d,]+) \(x[\d.]+\) +"
    r"(?P<e0>\d+)% \((?P<n0>\d+)/(?P<d0>\d+)\) -> (?P<e1>\d+)% \((?P<n1>\d+)/(?P<d1>\d+)\)$"
)


def number(text: str) -> int:
    return int(text.replace(",", ""))
