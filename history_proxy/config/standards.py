"""What each upstream speaks of the providers' own context standards (issue 33).

Per upstream, ``context_management`` says what the proxy does with an Anthropic Messages request's
``context_management`` field (and its beta, ``context-management-2025-06-27``):

- ``native``: forwarded byte for byte, the beta merged into ``anthropic-beta`` when the client left
  it out; the upstream applies the edits and reports them (Anthropic's own API);
- ``emulate``: the proxy applies the client's edits itself (docs/surfaces.md, "Context standards"),
  removes the field and its beta before forwarding, and adds ``context_management.applied_edits`` to
  the answer, as Anthropic would;
- ``strip``: the field and its beta are removed and nothing is applied.

Unset, the mode follows the base URL: ``native`` for Anthropic's own API (``api.anthropic.com``),
``emulate`` for every other upstream (local servers and other vendors' Anthropic endpoints answer 400
"Extra inputs are not permitted" to a field they do not know).

Per upstream too, ``token_ratios`` seeds the calibration of the proxy's token counts against the
upstream's reported input tokens (:mod:`history_proxy.core.calibration`), by model family.

```yaml
upstreams:
  local: {base_url: "http://127.0.0.1:8080/v1", api: anthropic, context_management: emulate,
          token_ratios: {claude: 1.6}}
```
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from history_proxy.core.calibration import MAX_RATIO, MIN_RATIO

ContextManagementMode = Literal["native", "emulate", "strip"]
"""What the proxy does with a Messages request's ``context_management`` for one upstream."""

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
"""The ``anthropic-beta`` value Anthropic's API asks for with ``context_management``."""

NATIVE_HOSTS: frozenset[str] = frozenset({"api.anthropic.com"})
"""Hosts whose Messages API applies ``context_management`` itself."""

MIN_TOKEN_RATIO = MIN_RATIO
MAX_TOKEN_RATIO = MAX_RATIO
"""The bounds of a token ratio, seeded or learned (a ratio outside them is a miscount, not a tokenizer)."""


def default_context_management(base_url: str) -> ContextManagementMode:
    """``native`` for Anthropic's own API, ``emulate`` for any other base URL."""
    host = (urlsplit(base_url).hostname or "").lower()
    return "native" if host in NATIVE_HOSTS else "emulate"
