"""Errors of steps whose templates failed on the router side, located like parse errors."""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream.dsl.models import Step
from noetl_stream.errors import TemplateError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.router.interface import Router
from noetl_stream.router_events import RouterEvent


def file_of(router: Router) -> str:
    """The file an execution's messages name: the one its request named. The server parses a text
    once for every request that sends it, so the playbook's own `file` is the first request's;
    it serves for a state started before states kept their file.
    """
    return router.state.playbook_file or router.pb.file


def template_failure(router: Router, step: Step, exc: TemplateError,
                     **extra: JsonValue) -> dict[str, JsonValue]:
    """The error a step fails with when one of its templates failed: the message starts with the
    execution's file and the step's line, so a reader goes straight to the template.
    """
    return {"message": str(exc.at(file_of(router), step.line)), "kind": "template", **extra}


def cause_of(event: RouterEvent | Mapping[str, object]) -> str:
    """How an event is named in an error: its type, and the step it reports on. An event the
    router applies, or a body of a log as it was recorded.
    """
    if isinstance(event, Mapping):
        etype, step = event.get("event_type"), event.get("step")
    else:
        etype, step = event.event_type, getattr(event, "step", None)
    cause = etype if isinstance(etype, str) and etype else "an event"
    return cause + (f' of step "{step}"' if isinstance(step, str) and step else "")
