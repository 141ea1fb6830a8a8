"""What the router's rule modules may ask of the engine that applies an event. Pure.

The engine (router/engine.py) owns one execution's state while it applies one event. The modules
that hold the rules of one concern - loops, listeners, the watchdog, cancellation, children, case
audit events - receive it as a `Router`: the state they read and change (the marking, the
step records, the loop bookkeeping), the clock value of this event, the outbox through `emit`
and `send`, and the engine's few operations they hand control back to (issuing a command,
finishing a run, folding an outcome). They never import the engine, so the modules form no import
cycle and each one can be read against this page alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from noetl_stream.dsl.models import Playbook, Step
from noetl_stream.events import OutcomeEvent
from noetl_stream.jsonutil import JsonValue
from noetl_stream.router.graph import NetGraph
from noetl_stream.router.state import ExecutionState, Outgoing, Run


class Router(Protocol):
    """The engine as the rule modules see it."""

    pb: Playbook
    graph: NetGraph  # what is static about the playbook, found once
    state: ExecutionState
    now: float  # the time this event is applied at (never a clock read)
    # Spec 001: the branches the outcome being applied found true (case_events.py).
    case_matched: list[str]

    def emit(self, event_type: str, msg_id: str, **payload: object) -> None:
        """Queue an event of the execution in the outbox."""

    def send(self, message: Outgoing) -> None:
        """Queue a command, timer or cancel request in the outbox."""

    def context(self, *, reads: Iterable[Any] = (), args: Mapping[str, object] | None = None,
                extra: Mapping[str, object] | None = None) -> dict[str, Any]:
        """A template context holding what the templates in `reads` name."""

    def fire(self, name: str, args: dict[str, JsonValue]) -> None:
        """A token reaches the step `name`: admit it and start a run of it."""

    def command(self, step: Step, run: Run, index: int | None, item: object) -> None:
        """Issue the command of a run, or of one loop iteration of it."""

    def finish_run(self, run: Run, *, ok: bool, result: JsonValue, error: dict[str, JsonValue] | None,
                   route: str | None = None) -> None:
        """End a run: record its step, route its arcs."""

    def on_outcome(self, event: OutcomeEvent) -> None:
        """Apply an outcome (`step.done`, `loop.iteration.failed`, ...) to its run."""

    def patch_ctx(self, ok: bool, event: OutcomeEvent) -> None:
        """Merge an ok outcome's `ctx_patch` into the execution's ctx."""
