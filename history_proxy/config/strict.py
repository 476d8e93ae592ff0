"""The base of every config mapping: frozen, unknown keys rejected, booleans and numbers kept apart."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from history_proxy.core.plain_types import plain_fields


class StrictModel(BaseModel):
    """A config mapping: immutable once loaded, and a key it does not declare is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, data: Any) -> Any:
        """A boolean is not a number, nor a number a boolean (``retries: yes``)."""
        return plain_fields(cls.model_fields, data)
