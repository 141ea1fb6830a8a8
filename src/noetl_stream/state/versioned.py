"""Stored records that are pydantic models carry their format's version (formats.py).

A record read without `schema_version` was written before formats had versions (version 1); an
older one is migrated before its fields are checked, so the model only ever sees the current
format. A record a newer release wrote raises NewerFormat (pydantic lets it through unchanged):
this release neither shows nor rewrites what it may misread. A record made here gets the current
version.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, model_validator

from noetl_stream.formats import Format


class Versioned(BaseModel):
    FORMAT: ClassVar[Format]

    schema_version: int = 0  # always set by _read_format: the current version once read

    @model_validator(mode="before")
    @classmethod
    def _read_format(cls, data: Any) -> Any:
        return cls.FORMAT.read(dict(data)) if isinstance(data, dict) else data
