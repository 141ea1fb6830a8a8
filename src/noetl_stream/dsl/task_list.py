"""A step's tasks as a command carries them (messages.Command `tasks`): the JSON objects they
travel as, and the DSL's `Task` models they are read as.

The router builds one list per step from the models it parsed, dumped once per playbook, so a
command is published exactly as the dump reads. A worker receives the JSON: every command of a
step carries the same list (a 500-item loop sends it 500 times), and validating it into `Task`
models each time was a fixed cost of every step. So a received list is validated once per
distinct list, keyed by its JSON itself (a command only ever gets the tasks it carries, whoever
sent it), and only when the pipeline first reads it: a task this worker cannot read fails its
step (pydantic's ValidationError, the worker's `malformed command`) rather than the delivery of
the whole command.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidatorFunctionWrapHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from noetl_stream import jsonutil
from noetl_stream.dsl.models import Task
from noetl_stream.jsonutil import JsonObject

TASK_LISTS_KEPT = 512


class TaskList:
    """The tasks of one step, as sent (`wire`) and as read (`tasks`)."""

    __slots__ = ("_tasks", "wire")

    def __init__(self, wire: list[JsonObject], tasks: tuple[Task, ...] | None = None) -> None:
        self.wire = wire  # never changed: the router hands one list to every command of a step
        self._tasks = tasks

    @classmethod
    def of(cls, tasks: Iterable[Task]) -> TaskList:
        """The list of parsed tasks, dumped once."""
        models = tuple(tasks)
        return cls([t.model_dump(mode="json") for t in models], models)

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The validated tasks (raises pydantic's ValidationError for a task it cannot read)."""
        if self._tasks is None:
            self._tasks = _validated(jsonutil.dumps(self.wire))
        return self._tasks

    def encoded(self) -> object:
        """What it is published as (jsonutil.Encodable): the list as sent."""
        return self.wire

    def __len__(self) -> int:
        return len(self.wire)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskList) and other.wire == self.wire

    def __repr__(self) -> str:
        return f"TaskList({self.wire!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        # A received list is checked to be a list of objects (as `list[dict]` was, with its
        # messages); a TaskList (the router's own) is taken as it is.
        return core_schema.no_info_wrap_validator_function(
            cls._received,
            core_schema.list_schema(core_schema.dict_schema(core_schema.str_schema())),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda v: v.wire),
        )

    @classmethod
    def _received(cls, value: object, check: ValidatorFunctionWrapHandler) -> TaskList:
        return value if isinstance(value, TaskList) else cls(check(value))

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "array", "items": {"type": "object", "additionalProperties": True}}


@lru_cache(maxsize=TASK_LISTS_KEPT)
def _validated(text: bytes) -> tuple[Task, ...]:
    # Task models are frozen: one tuple can serve every command that carries this list. They are
    # made from the key's own copy, so they share nothing with the command they came with.
    return tuple(Task.model_validate(t) for t in jsonutil.loads(text))
