"""The cyclic garbage collector's thresholds in a process that routes events or runs steps.

Python collects its youngest generation every 700 net allocations of container objects. A
server and worker allocate a few hundred per step (messages, event bodies, futures, tasks), and
with many executions in flight much of that is still alive when the collector runs: it is moved
to older generations, which then fill up and set off full collections that walk the whole heap
(parsed playbooks, models, modules: about 50 ms each here). In the in-process benchmark's W3 that
was about 0.6 s of CPU per 6,000 steps, some 10% of the process's CPU (bench/README.md). With the
youngest generation collected every GEN0_THRESHOLD allocations instead, nearly all of it is
garbage by then: the same W3 spends under 0.1 s collecting and no full collection runs, at the
same resident size. Cyclic garbage is still collected; the older generations keep their ratios.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 10_000


def tune_collector() -> None:
    """Collect the youngest generation every GEN0_THRESHOLD allocations (a higher setting, made
    by the embedding program, is kept).
    """
    gen0, gen1, gen2 = gc.get_threshold()
    if 0 < gen0 < GEN0_THRESHOLD:
        gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


def freeze_start_up() -> int:
    """Once a long-running server or worker has started: collect what start-up left behind, then
    move every object still alive (modules, classes, schemas, the topology, the services' own
    parts) to the permanent generation, which no collection walks. A full collection of a
    started server or worker walked these ~80,000 objects and more, 44-120 ms during which the
    process answered nothing (bench/README.md); afterwards it walks only what was made since.
    Frozen objects are still freed by reference counting; a cycle among them that becomes
    garbage later is never collected, but what start-up made lives as long as the process.
    Returns the number of objects frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
