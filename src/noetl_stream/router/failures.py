"""Errors of steps whose templates failed on the router side, located like parse errors."""

from __future__ import annotations

from typing import Any

from noetl_stream.dsl.models import Playbook, Step
from noetl_stream.errors import TemplateError


def template_failure(playbook: Playbook, step: Step, exc: TemplateError,
                     **extra: Any) -> dict[str, Any]:
    """The error a step fails with when one of its templates failed: the message starts with the
    playbook's file and the step's line, so a reader goes straight to the template.
    """
    return {"message": str(exc.at(playbook.file, step.line)), "kind": "template", **extra}


def cause_of(event: dict[str, Any]) -> str:
    """How an event is named in an error: its type, and the step it reports on."""
    cause = str(event.get("event_type") or "an event")
    step = event.get("step")
    return cause + (f' of step "{step}"' if isinstance(step, str) and step else "")
