"""Template contexts: the names a template may read, with bare-name resolution (ARCHITECTURE §8).

Bare names resolve in the read order args -> ctx -> iter -> step results -> workload; the
reserved names (`workload`, `ctx`, `args`, ...) always win. Shared by router and worker, pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_stream.dsl.values import LIST_MARK, ListView, LoopResults, job_view
from noetl_stream.dsl.views import http_view, output_view, step_view, task_view

__all__ = ["LIST_MARK", "ListView", "LoopResults", "build_context", "http_view", "job_view",
           "output_view", "step_view", "task_view"]

RESERVED = ("workload", "ctx", "args", "input", "iter", "vars", "execution_id", "event", "result",
            "output", "outcome", "response", "error", "_prev", "_task", "_attempt", "keychain")


def build_context(*, workload: Mapping[str, Any], ctx: Mapping[str, Any],
                  args: Mapping[str, Any] | None = None, iter_vars: Mapping[str, Any] | None = None,
                  vars_: Mapping[str, Any] | None = None, steps: Mapping[str, Any] | None = None,
                  execution_id: str = "", extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    args = args or {}
    iter_vars = iter_vars or {}
    # `job` comes first: a workload key, step, iterator or ctx name `job` hides it.
    context: dict[str, Any] = {"job": job_view(execution_id)}
    context.update(workload)
    if steps:
        context.update(steps)
    # `iter.parent` (spec 002 §6.4) is reached only through `iter`: as a bare name it would hide
    # a workload key called `parent`.
    context.update({k: v for k, v in iter_vars.items() if k != "parent"})
    context.update(ctx)
    context.update(args)
    context.update({
        "workload": workload,
        "ctx": ctx,
        "args": args,
        "input": args,
        "iter": iter_vars,
        "vars": vars_ or {},
        "execution_id": execution_id,
    })
    if extra:
        context.update(extra)
    return context
