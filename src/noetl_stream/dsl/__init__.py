"""DSL front end: YAML text -> validated, normalized `Playbook` IR (pure but for reading files)."""

from noetl_stream.dsl.models import Arc, LoopSpec, NextSpec, Playbook, Rule, Step, Task
from noetl_stream.dsl.parser import ParseResult, load_playbook, parse_playbook

__all__ = [
    "Arc",
    "LoopSpec",
    "NextSpec",
    "ParseResult",
    "Playbook",
    "Rule",
    "Step",
    "Task",
    "load_playbook",
    "parse_playbook",
]
