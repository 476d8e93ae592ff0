"""An upstream's prompt-cache pricing in the config file: a preset name or the five numbers.

```yaml
upstreams:
  openai: {base_url: "https://api.openai.com/v1", pricing: openai}
  claude: {base_url: "...", cache_control: true, pricing: {preset: anthropic, ttl_s: 3600, write: 2.0}}
```

Without ``pricing`` an upstream with ``cache_control: true`` is priced as Anthropic, any other as OpenAI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from history_proxy.config.strict import StrictModel
from history_proxy.core.cost import PRESETS, Pricing

PresetName = Literal["openai", "anthropic"]


class PricingConfig(StrictModel):
    """Prompt-cache prices relative to the uncached input price; unset numbers come from ``preset``."""

    preset: PresetName = "openai"
    """The provider whose published prices fill the numbers not given here."""
    read: float | None = Field(default=None, ge=0)
    """Price of a cached input token (OpenAI and Anthropic: 0.1)."""
    write: float | None = Field(default=None, ge=0)
    """Price of an input token written to the cache (Anthropic 1.25 for 5 min, 2.0 for 1 h; OpenAI 1.0)."""
    min_tokens: int | None = Field(default=None, ge=0)
    """Shortest cacheable prompt (1,024 for both)."""
    block: int | None = Field(default=None, ge=1)
    """Cached reads count in whole blocks of this many tokens (OpenAI 128)."""
    ttl_s: float | None = Field(default=None, gt=0)
    """How long an unused cached prefix lives (300)."""

    @model_validator(mode="before")
    @classmethod
    def _preset_name(cls, value: Any) -> Any:
        return {"preset": value} if isinstance(value, str) else value

    def pricing(self) -> Pricing:
        """The resolved prices."""
        base = PRESETS[self.preset]
        given = {k: v for k, v in self.model_dump(exclude={"preset"}).items() if v is not None}
        if not given:
            return base
        return Pricing(**{**base.__dict__, **given, "name": f"{self.preset} (custom)"})


def default_pricing(cache_control: bool) -> Pricing:
    """The pricing of an upstream that names none: Anthropic's when it takes cache marks, else OpenAI's."""
    return PRESETS["anthropic" if cache_control else "openai"]


def pricing_option(value: str) -> Pricing:
    """A command line's pricing: a preset name, or a YAML/JSON file holding a pricing mapping.

    Raises ``ValueError`` with the one line to show.
    """
    if value in ("openai", "anthropic"):
        return PricingConfig.model_validate(value).pricing()
    try:
        data = yaml.safe_load(Path(value).read_text(encoding="utf-8"))
        return PricingConfig.model_validate(data).pricing()
    except OSError as exc:
        raise ValueError(
            f"--pricing {value}: not a preset (openai, anthropic) nor a readable file: {exc.strerror or exc}"
        ) from None
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"--pricing {value}: not a pricing mapping: {exc}".splitlines()[0]) from None
