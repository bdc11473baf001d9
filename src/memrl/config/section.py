"""The base of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for config sections: strict about keys, lenient about scalar spelling."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)
