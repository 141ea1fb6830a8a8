"""Typed messages the server builds from values it already holds, without validating them again.

A command the router issues is made of a parsed playbook's values and the execution's state,
every one checked where it came in; a worker validates the command it receives from the bytes.
pydantic's `model_construct` skips validation too, but walks the model's fields, defaults and
aliases on every call, which cost more than the rest of building a command. `built` makes the
same object from a dict that already holds every field in the model's order.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def built(model: type[M], fields: dict[str, object]) -> M:
    """A `model` holding `fields` as they are (not copied): every field of the model, in its
    order, as `model_construct` would leave them; the model's extra fields, when it allows them,
    are none.
    """
    made = model.__new__(model)
    object.__setattr__(made, "__dict__", fields)
    object.__setattr__(made, "__pydantic_fields_set__", set(fields))
    allows_extra = model.model_config.get("extra") == "allow"
    object.__setattr__(made, "__pydantic_extra__", {} if allows_extra else None)
    object.__setattr__(made, "__pydantic_private__", None)
    return made
