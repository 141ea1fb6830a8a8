"""How a received event body is checked against the subject it came on: the envelope of an
event, a signal's client data (bus/signals.py is the bus side). Pure: bytes in, a JSON body or
`Malformed` out.
"""

from __future__ import annotations

from pydantic import JsonValue, ValidationError

from noetl_stream import ids, jsonutil
from noetl_stream.events import EVENT_TYPES
from noetl_stream.messages import (
    INT64_MAX,
    INT64_MIN,
    MAX_SIGNAL_BYTES,
    MAX_STEP_NAME_LENGTH,
    MAX_STEP_RUN_ID_LENGTH,
    OUTCOME_EVENTS,
    SCHEDULE_PREFIX,
    SIGNAL_PREFIX,
    TIMER_FIRED,
    TIMER_SCHEDULED,
    EventEnvelope,
    Malformed,
    bounded_json_problem,
    describe,
    execution_id_problem,
    parse_object,
    signal_name_problem,
    split_outcome_pool,
)


def decode_event_body(prefix: str, subject: str, data: bytes,
                      seq: int | None = None) -> dict[str, JsonValue]:
    """The body of the event a message on `<prefix>.events.<execution_id>.<event_type>` carries,
    as JSON, for readers that show or forward it (watchers, `logs`, the API); checked:
    identifiers valid, and a body's own `execution_id` and `event_type` equal to the subject's
    (a body never moves itself to another execution or type). Raises Malformed.

    An outcome's subject ends with the pool of the worker that published it
    (`...step.done.<pool>`, subjects.outcome_subject): its `pool` is the subject's, never the
    body's (a body that names another is refused), and None when the subject names none.

    A signal's body is the client's data, never an envelope; a timer's schedule message holds
    the `timer.fired` it becomes, and reads as `timer.scheduled`.
    """
    head = f"{prefix}.events."
    rest = subject[len(head):] if subject.startswith(head) else ""
    execution_id, _, tail = rest.partition(".")
    event_type, pool = split_outcome_pool(tail)
    problem = execution_id_problem(execution_id)
    if problem is not None:
        raise Malformed("schema", f"subject {subject[:200]!r}: {problem}")
    if event_type.startswith(SIGNAL_PREFIX):
        return _signal(execution_id, event_type, data, seq)
    event = parse_object(data)
    expected = TIMER_FIRED if event_type.startswith(SCHEDULE_PREFIX) else event_type
    for name, want in (("execution_id", execution_id), ("event_type", expected)):
        got = event.setdefault(name, want)
        if got != want:
            raise Malformed("subject_mismatch", f"the body's {name} {str(got)[:200]!r} is not "
                            f"the subject's {want!r}", event)
    if event_type in OUTCOME_EVENTS:
        claimed = event.pop("pool", None)
        if claimed is not None and claimed != pool:
            raise Malformed("subject_mismatch", f"the body's pool {str(claimed)[:200]!r} is not "
                            f"the subject's {pool!r}", event)
        event["pool"] = pool
    if not _plainly_valid(event):
        try:
            EventEnvelope.model_validate(event)
        except ValidationError as exc:
            raise Malformed("schema", describe(exc), event) from None
    if event_type.startswith(SCHEDULE_PREFIX):
        event["event_type"] = TIMER_SCHEDULED
    if seq is not None and event_type == TIMER_FIRED:
        event["seq"] = seq  # lets a listener skip a redelivered timer
    return event



def signal_size_problem(data: bytes) -> str | None:
    """Why a signal body of these bytes is refused (too large), or None."""
    if len(data) > MAX_SIGNAL_BYTES:
        return (f"a signal's data has at most {MAX_SIGNAL_BYTES} bytes as JSON "
                f"(this one {len(data)})")
    return None


def _signal(execution_id: str, event_type: str, data: bytes,
            seq: int | None) -> dict[str, JsonValue]:
    problem = signal_name_problem(event_type[len(SIGNAL_PREFIX):]) or signal_size_problem(data)
    if problem is not None:
        raise Malformed("schema", problem)
    try:
        payload = jsonutil.loads(data) if data.strip() else None
    except ValueError:
        payload = data.decode(errors="replace")  # kept as text: the record shows what came
    body_problem = bounded_json_problem(payload)
    if body_problem is not None:
        raise Malformed("schema", f"the signal's data cannot be taken: {body_problem}")
    event: dict[str, JsonValue] = {"event_type": event_type, "execution_id": execution_id,
                             "data": payload}
    if seq is not None:
        event["seq"] = seq  # lets a listener skip a redelivered signal
    return event


def _valid_type(event_type: str) -> bool:
    try:
        EventEnvelope.model_validate({"execution_id": "x", "event_type": event_type})
    except ValidationError:
        return False
    return True


# The catalog's event types (events.py), each passed by EventEnvelope's own check once.
_CATALOG_TYPES = frozenset(t for t in EVENT_TYPES if _valid_type(t))


def _plainly_valid(event: dict[str, JsonValue]) -> bool:
    """Whether `event`'s envelope is of a form EventEnvelope surely takes: a catalog type, the
    step names and ids plain strings within bounds, the iteration a 64-bit int. Most events are,
    and this costs a fraction of the model's check; any other goes through the model, which
    takes it or says what is wrong. The body's `execution_id` is the subject's, checked already.
    """
    step, run = event.get("step"), event.get("step_run_id")
    iteration, parent = event.get("iteration"), event.get("parent_execution_id")
    return (event.get("event_type") in _CATALOG_TYPES
            and (step is None or _printable(step, MAX_STEP_NAME_LENGTH))
            and (run is None or _printable(run, MAX_STEP_RUN_ID_LENGTH))
            and (iteration is None or (type(iteration) is int
                                       and INT64_MIN <= iteration <= INT64_MAX))
            and (parent is None or (type(parent) is str and ids.is_subject_token(parent))))


def _printable(value: object, limit: int) -> bool:
    # isprintable() is False for every control character the models refuse (and a few more,
    # which then go through the model).
    return type(value) is str and 0 < len(value) <= limit and value.isprintable()
