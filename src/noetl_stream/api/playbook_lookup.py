"""The parsed playbook an execution runs: its text is in KV `noetl_catalog` under the content key
its router state names.

Parsed playbooks are kept by content key: a key always names the same text, and an open
execution page asks for its playbook several times a second while events arrive, where parsing
takes milliseconds to tens of milliseconds on the process that also routes.
"""

from __future__ import annotations

from collections import OrderedDict

from noetl_stream.api.context import ApiContext
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.execution_lookup import detail, load_state
from noetl_stream.api.routes_catalog import read_text
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.router.state import ExecutionState

PARSED_KEPT = 64
_parsed: OrderedDict[tuple[str, frozenset[str]], Playbook] = OrderedDict()


async def playbook_by_key(ctx: ApiContext, playbook_key: str) -> Playbook | None:
    """The playbook stored under a content key, None when the catalog has no such text;
    PlaybookError when the tool kinds installed here do not read it.
    """
    key = (playbook_key, ctx.kinds)
    found = _parsed.get(key)
    if found is not None:
        _parsed.move_to_end(key)
        return found
    text = await read_text(ctx, playbook_key)
    if text is None:
        return None
    found = parse_playbook(text, playbook_key, kinds=ctx.kinds).playbook
    _parsed[key] = found
    if len(_parsed) > PARSED_KEPT:
        _parsed.popitem(last=False)
    return found


async def state_and_playbook(ctx: ApiContext, execution_id: str) -> tuple[ExecutionState, Playbook]:
    """404 for an unknown id, 409 for a rejected request (it has no state), 404 when the text is
    gone from the catalog, 422 when the installed tool kinds no longer read it.
    """
    state = await load_state(ctx, execution_id)
    if state is None:
        found = await detail(ctx, execution_id)  # 404 when nobody has heard of it
        raise ApiError(409, f'execution "{execution_id}" was {found.status}: it has no playbook '
                       "state", details={"status": found.status})
    try:
        playbook = await playbook_by_key(ctx, state.playbook_key)
    except PlaybookError as exc:
        raise ApiError(422, f'the playbook of execution "{execution_id}" does not parse with the '
                       "tool kinds installed here", details=[str(i) for i in exc.issues]) from None
    if playbook is None:
        raise not_found(f'the playbook text "{state.playbook_key}" of execution "{execution_id}"')
    return state, playbook
