"""Rate limits per tenant and per role (``limits.per_tenant``, ``limits.per_role``) and where they are
counted (``limits.redis_url``): a leaf of pydantic models, so loading a config never imports Redis."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr

from history_proxy.config.strict import StrictModel

REDIS_URL = re.compile(r"^(rediss?|unix)://")


class RateLimits(StrictModel):
    """Requests and tokens a minute, over a sliding window of 60 s (each unset: unbounded).

    ```yaml
    limits:
      per_tenant: {requests_per_minute: 600, tokens_per_minute: 2000000}
      per_role: {worker: {requests_per_minute: 300}}
    ```
    """

    requests_per_minute: int | None = Field(default=None, gt=0)
    """Requests admitted in any 60 s; the next one is answered 429 with ``Retry-After``."""
    tokens_per_minute: int | None = Field(default=None, gt=0)
    """Input tokens sent upstream in any 60 s (the upstream's own count when it reports one, else the
    proxy's); once spent, requests are answered 429 until the window moves on. An admitted request
    reserves its ``Content-Length`` / 4 at once and settles to the tokens sent when it ends."""


def redis_url_or_none(value: SecretStr | None) -> SecretStr | None:
    """An empty URL (``${REDIS_URL:-}`` unset) is none; any other must name a Redis scheme."""
    if value is None or not value.get_secret_value():
        return None
    if not REDIS_URL.match(value.get_secret_value()):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return value
