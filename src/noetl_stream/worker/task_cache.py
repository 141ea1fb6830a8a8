"""A command's tasks as the worker runs them, validated once per distinct task list.

Every command of a step carries the same list (a 500-item loop sends it 500 times); validating
it into `Task` models each time was a fixed cost of every step. The cache is keyed by the list's
JSON itself, so a command only ever gets the tasks it carries, whoever sent it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.dsl.models import Task

TASK_LISTS_KEPT = 512


def command_tasks(raw: list[Any]) -> tuple[Task, ...]:
    """The validated tasks of a command's `tasks` list (raises pydantic's ValidationError)."""
    return _validated(jsonutil.dumps(raw))


@lru_cache(maxsize=TASK_LISTS_KEPT)
def _validated(text: bytes) -> tuple[Task, ...]:
    # Task models are frozen: one tuple can serve every command that carries this list.
    return tuple(Task.model_validate(t) for t in jsonutil.loads(text))
