"""Static facts about a playbook's net, found once per playbook: forward predecessors of each
step, back-edges, and what every command of a step carries unchanged (its tasks).

An arc is a back-edge when, in a depth-first walk from the start step, it points at a step still
on the walk's stack (pagination loops, retry loops). Back-edges re-enter a step without a join.
Steps in one strongly connected component can run each other again, so a step whose token stays
in its component has not yet decided its other arcs (dead-path elimination waits for it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from noetl_stream import refs
from noetl_stream.dsl import keychain, net
from noetl_stream.dsl.models import Playbook
from noetl_stream.dsl.task_list import TaskList
from noetl_stream.router.budgets import budget_s
from noetl_stream.router.reads import reads_context, step_reads, task_results_read


@dataclass(frozen=True)
class NetGraph:
    forward_preds: dict[str, tuple[str, ...]]
    back_edges: frozenset[tuple[str, str]]
    components: dict[str, int]  # strongly connected component of each step
    start: str = ""  # the start step's name, looked up once (every command asks)
    # Each step's tasks as its commands carry them, dumped once per playbook rather than per
    # command (a 500-item loop sends the same list 500 times). Never changed once built.
    task_lists: dict[str, TaskList] = field(default_factory=dict)
    # The names each step's commands read (its worker-side templates and the keychain's), and
    # the steps whose python code reads `context` (any finished step): found with Jinja's and
    # Python's AST, once per playbook rather than once per command.
    command_reads: dict[str, frozenset[str]] = field(default_factory=dict)
    reads_context: frozenset[str] = frozenset()
    # Seconds a command of each step may run before its watchdog fails it (None: no watchdog),
    # and the playbook's payload limit, which every command carries.
    budgets: dict[str, float | None] = field(default_factory=dict)
    max_payload_bytes: int = refs.DEFAULT_MAX_PAYLOAD_BYTES
    # Pipeline steps whose per-task results a template reads (`<step>.results.<task>`): their
    # commands ask the worker to keep them in the step's result.
    task_results: frozenset[str] = frozenset()

    def is_join(self, step: str) -> bool:
        return len(self.forward_preds.get(step, ())) > 1

    def is_back_edge(self, src: str, dst: str) -> bool:
        return (src, dst) in self.back_edges

    def stays_in_cycle(self, src: str, dst: str) -> bool:
        """True when the arc src -> dst keeps the token inside a cycle that can run src again."""
        return src == dst or (src in self.components
                              and self.components.get(dst) == self.components[src])


# As many graphs as the server keeps parsed playbooks (server/server.py reads this size), so
# every playbook in use keeps its graph. Keyed by identity: an entry holds its playbook, so its
# id cannot be reused while it is cached; the least recently used entry goes first.
CACHE_SIZE = 1_000
_CACHE: OrderedDict[int, tuple[Playbook, NetGraph]] = OrderedDict()


def graph_of(playbook: Playbook) -> NetGraph:
    key = id(playbook)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is playbook:
        _CACHE.move_to_end(key)
        return hit[1]
    g = _build(playbook)
    _CACHE[key] = (playbook, g)
    _CACHE.move_to_end(key)
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return g


def _build(playbook: Playbook) -> NetGraph:
    keychain_reads = keychain.reads(playbook.keychain)
    shape = net.shape_of(playbook)
    return NetGraph(shape.forward_preds, shape.back_edges,
                    net.components([s.name for s in playbook.steps], shape.succ), start=shape.start,
                    task_lists={s.name: TaskList.of(s.tasks) for s in playbook.steps},
                    command_reads={s.name: frozenset(step_reads(s) | keychain_reads)
                                   for s in playbook.steps},
                    reads_context=frozenset(s.name for s in playbook.steps if reads_context(s)),
                    budgets={s.name: budget_s(playbook, s) for s in playbook.steps},
                    max_payload_bytes=refs.max_payload_bytes(playbook.executor),
                    task_results=task_results_read(playbook))
