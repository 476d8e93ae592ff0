"""The base of every config mapping: frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config mapping: immutable once loaded, and a key it does not declare is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)
