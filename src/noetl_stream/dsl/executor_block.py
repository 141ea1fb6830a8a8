"""The parts of NoETL's `executor:` block that decide what runs: `spec.entry_step` (the step an
execution starts at), `spec.final_step` (refused) and `requires.tools` (the kinds the playbook
needs). `spec.policy` is read by layering.py and refs.py. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from noetl_stream.jsonutil import JsonValue


def entry_step(executor: Mapping[str, JsonValue]) -> str | None:
    """`executor.spec.entry_step`, the step NoETL's runtimes start at, or None."""
    spec = executor.get("spec")
    entry = spec.get("entry_step") if isinstance(spec, Mapping) else None
    return str(entry) if entry is not None else None


def problems(executor: Mapping[str, JsonValue], steps: Collection[str],
             kinds: Collection[str]) -> list[tuple[str, str]]:
    """(field, message) for an executor block this runtime cannot honour."""
    out: list[tuple[str, str]] = []
    entry = entry_step(executor)
    if entry is not None and entry not in steps:
        out.append(("executor.spec.entry_step", f'entry_step "{entry}" names no step of the '
                                                "workflow"))
    spec = executor.get("spec")
    if isinstance(spec, Mapping) and spec.get("final_step") is not None:
        out.append(("executor.spec.final_step",
                    "NoETL form not run here: executor.spec.final_step (a step NoETL's CLI runs "
                    "once the workflow has quiesced); instead, name that step `end`: every step "
                    "without `next:` then hands on to it, and it runs once after all of them"))
    requires = executor.get("requires")
    tools = requires.get("tools") if isinstance(requires, Mapping) else None
    for tool in tools if isinstance(tools, list) else []:
        if str(tool) not in kinds:
            out.append(("executor.requires.tools", f'the playbook requires tool kind "{tool}", '
                                                   "which this runtime does not run"))
    return out
