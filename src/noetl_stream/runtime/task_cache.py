"""A command's tasks as the worker runs them, validated once per distinct task list.

Every command of a step carries the same list (a 500-item loop sends it 500 times); validating
it into `Task` models each time was a fixed cost of every step. The cache is keyed by a digest of
the list's JSON, so a command only ever gets the tasks it carries itself, whoever sent it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.dsl.models import Task

TASK_LISTS_KEPT = 512

_kept: dict[bytes, tuple[Task, ...]] = {}


def command_tasks(raw: list[Any]) -> tuple[Task, ...]:
    """The validated tasks of a command's `tasks` list (raises pydantic's ValidationError)."""
    key = hashlib.blake2b(jsonutil.dumps(raw), digest_size=16).digest()
    tasks = _kept.get(key)
    if tasks is None:
        # Task models are frozen: one tuple can serve every command that carries this list.
        tasks = tuple(Task.model_validate(t) for t in raw)
        if len(_kept) >= TASK_LISTS_KEPT:
            del _kept[next(iter(_kept))]
        _kept[key] = tasks
    return tasks
