"""Errors of steps whose templates failed on the router side, located like parse errors."""

from __future__ import annotations

from typing import Any

from noetl_stream.dsl.models import Step
from noetl_stream.errors import TemplateError
from noetl_stream.router.interface import Router


def file_of(router: Router) -> str:
    """The file an execution's messages name: the one its request named. The server parses a text
    once for every request that sends it, so the playbook's own `file` is the first request's;
    it serves for a state started before states kept their file.
    """
    return router.state.playbook_file or router.pb.file


def template_failure(router: Router, step: Step, exc: TemplateError,
                     **extra: Any) -> dict[str, Any]:
    """The error a step fails with when one of its templates failed: the message starts with the
    execution's file and the step's line, so a reader goes straight to the template.
    """
    return {"message": str(exc.at(file_of(router), step.line)), "kind": "template", **extra}


def cause_of(event: dict[str, Any]) -> str:
    """How an event is named in an error: its type, and the step it reports on."""
    cause = str(event.get("event_type") or "an event")
    step = event.get("step")
    return cause + (f' of step "{step}"' if isinstance(step, str) and step else "")
