"""Step results outside the execution's state: KV `noetl_step_results` (router/state.py says why).

A small result stays inline in the state's record (its JSON at most SMALL_RESULT bytes, while
the results kept inline in what the state writes take at most INLINE_BUDGET together), so a step
that returns little costs no write of its own; it leaves the state with its record, in the page
of settled records (below). Any other result is written once, before the state that refers to
it is committed, under `<execution_id>.<sha256 of its JSON, 32 hex digits>` (with its format's
`schema_version`, formats.py); the state keeps only that key. A key names
its content, so a server that dies after writing and before committing, or two servers that
apply the same events, write the same entry again, and a stale writer can never change what a
committed state refers to. A loop's iteration results are written a page at a time (a mapping of
iteration -> result) the same way, and so are settled step records (step name -> record), so
the state written at each commit does not grow with the steps that finished before; the keys of
those pages are stored ten at a time too (router/page_index.py). A value
larger than LARGEST_INLINE goes to the object store `noetl_results` and its entry holds the
reference.

Values are cached in the process (bounded in bytes), so a state reloaded after a conflict or a
failed commit reads none of them again; a server that has never seen the execution (a restart,
another server) reads the ones the state names when it loads it.

The summary an `execution.*` event carries names every step's result: when its JSON is larger
than the limit the server gives (half a NATS message), its `steps` (and then its `result`) go to
the object store and the event carries references, which `run`, `watch --json`, workers and a
parent's `return_step` (tools/playbook.py) resolve.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from noetl_stream import jsonutil, refs
from noetl_stream.dsl.views import STEP_RESULTS_BUCKET, stored_key
from noetl_stream.errors import InfrastructureError
from noetl_stream.formats import STEP_RESULT, VERSION_FIELD
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router import page_index
from noetl_stream.router.page_index import Index
from noetl_stream.router.state import ExecutionState, LoopState, Outgoing, StepRecord
from noetl_stream.state.results import ResultStore

BUCKET = STEP_RESULTS_BUCKET
LARGEST_INLINE = 512 * 1024  # bytes of a KV entry; larger values go to the object store
# A result kept in the state's record instead of an entry of its own: at most SMALL_RESULT
# bytes of JSON (far below the 100 KiB from which a template sees `_ref`, dsl/views.py), and
# INLINE_BUDGET bytes for all of them, so a commit stays small however many steps return little
# (a page of settled records then holds at most that much of them too).
SMALL_RESULT = 1024
INLINE_BUDGET = 16 * 1024
CACHE_BYTES = 128 * 1024 * 1024
SUMMARY_FIELDS = ("steps", "result")  # moved out of a large summary, in this order
# An entry is {"schema_version": N, "v": value} or, for a large value, {..., "o": reference}.
ENTRY_HEAD = b'{"' + VERSION_FIELD.encode() + b'":' + str(STEP_RESULT.current).encode() + b',"v":'

Holder = StepRecord | ExecutionState
_Write = tuple[str, bytes, object]  # key, the value's JSON, the value (for the cache)


class StepResults:
    """Stores and loads the results an execution's state refers to by key."""

    def __init__(self, js: JetStreamContext, objects: ResultStore, *,
                 cache_bytes: int = CACHE_BYTES,
                 publish: Callable[[str, bytes], Awaitable[object]] | None = None) -> None:
        self.js = js
        self.objects = objects
        self._kv: KeyValue | None = None
        # The server's stored publisher (bus/stored_publish.py), where given: the same write to
        # the bucket, acknowledged as before, with less work than nats-py's KeyValue.put on a
        # step's path (the server writes a step's result before the commit that names it).
        self._publish = publish
        self._cache: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._cached_bytes = 0
        self._cache_limit = cache_bytes

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(BUCKET)
            except NotFoundError:
                raise InfrastructureError(f'KV bucket "{BUCKET}" does not exist; '
                                          "run `noetl-stream init`") from None
        return self._kv

    # -- writing -----------------------------------------------------------------------------
    async def store(self, state: ExecutionState) -> None:
        """Keep the state's new small results inline, write the others and record their keys.
        Raises TypeError/ValueError for a value JSON cannot hold (the commit's check names it).
        """
        writes: list[_Write] = []
        fresh = state.unstored()
        room = INLINE_BUDGET - state.inline_result_bytes() if fresh else 0
        for holder in fresh:
            data = jsonutil.dumps(holder.result)
            if len(data) <= min(SMALL_RESULT, room):
                holder.keep_inline(len(data))
                room -= len(data)
                continue
            key = _hash(data)
            holder.hold(holder.result, key)
            writes.append((key, data, holder.result))
        for loop in _loops(state):
            if loop.items_key is None and len(items := loop.items_written()) > SMALL_RESULT:
                loop.items_stored(_hash(items))
                writes.append((str(loop.items_key), items, loop.items))
            page = loop.complete_page()
            while page is not None:
                key, data = _keyed(page)
                loop.page_stored(key, page)
                writes.append((key, data, page))
                page = loop.complete_page()
            writes += _folds(loop.pages, loop.page_index)
        # After the results: a record is paged only once its result is placed.
        records = state.complete_record_page()
        while records is not None:
            key, data = _keyed(records)
            state.record_page_stored(key, records)
            writes.append((key, data, records))
            records = state.complete_record_page()
        writes += _folds(state.step_pages, state.step_page_index)
        if writes:
            await asyncio.gather(*(self._put(state.execution_id, key, data, value)
                                   for key, data, value in _distinct(writes)))

    async def _put(self, execution_id: str, key: str, data: bytes, value: object) -> None:
        name = f"{execution_id}.{key}"
        if name in self._cache:
            return  # stored by this process already: same key, same bytes
        entry = ENTRY_HEAD + data + b"}"
        if len(entry) > LARGEST_INLINE:
            ref = await self.objects.put_bytes(data)
            entry = jsonutil.dumps(STEP_RESULT.stamp({"o": ref}))
        bucket = await self._bucket()  # a missing bucket is named as such
        if self._publish is not None:
            await self._publish(f"$KV.{BUCKET}.{name}", entry)
        else:
            await bucket.put(name, entry)
        self._remember(name, value, len(data))

    # -- reading -----------------------------------------------------------------------------
    async def load(self, state: ExecutionState, *, steps: bool = True) -> None:
        """Put the step records and results a state just read refers to back in memory; with
        `steps` False, of the results only the execution's own (what a report shows).
        """
        execution_id = state.execution_id
        for loop in state.loops_without_items():  # what `status` shows of a loop needs them
            items = await self._get(execution_id, str(loop.items_key))
            if not isinstance(items, list):
                raise InfrastructureError(f'the items of a loop of execution {execution_id} in '
                                          f'"{BUCKET}" are no list')
            loop.items = items
        if state.record_pages_unloaded():
            keys = await self._page_keys(execution_id, state.step_pages, state.step_page_index)
            state.record_pages_loaded(await self._get_all(execution_id, keys))
        holders = state.unloaded() if steps else [h for h in state.unloaded() if h is state]
        loops = state.unloaded_loops() if steps else []
        keys = [h.result_key for h in holders if h.result_key is not None]
        values = dict(zip(keys, await self._get_all(execution_id, keys), strict=True))
        for holder in holders:
            holder.hold(values[str(holder.result_key)], holder.result_key)
        for loop in loops:
            pages = await self._page_keys(execution_id, loop.pages, loop.page_index)
            for page in await self._get_all(execution_id, pages):
                loop.page_loaded(page if isinstance(page, dict) else {})

    async def _page_keys(self, execution_id: str, pages: list[str], index: Index) -> list[str]:
        """The keys of every stored page in order, the folded ones read from their entries
        (router/page_index.py): each level's entries name the next lower level's keys.
        """
        entries: list[str] = []
        for keys in [*reversed(index), pages]:
            named = await self._get_all(execution_id, entries)
            entries = [key for value in named for key in _key_list(value, execution_id)] + keys
        return entries

    async def _get_all(self, execution_id: str, keys: list[str]) -> list[object]:
        return list(await asyncio.gather(*(self._get(execution_id, key) for key in keys)))

    async def _get(self, execution_id: str, key: str) -> object:
        name = f"{execution_id}.{key}"
        cached = self._cache.get(name)
        if cached is not None:
            self._cache.move_to_end(name)
            return cached[0]
        try:
            entry = await (await self._bucket()).get(name)
        except KeyNotFoundError:
            raise InfrastructureError(f'result "{key}" of execution {execution_id} is missing '
                                      f'from "{BUCKET}" (expired or removed)') from None
        raw = entry.value or b"{}"
        # Older entries are migrated; one a newer release wrote raises NewerFormat.
        name_of = f'result "{key}" of execution {execution_id}'
        body = STEP_RESULT.read(jsonutil.loads(raw), name_of)
        # An object's bytes are checked against their hash by the object store.
        value = jsonutil.loads(await self.objects.fetch(_object_ref(body, name_of))) \
            if "o" in body else body.get("v")
        self._remember(name, value, len(raw))
        return value

    def _remember(self, key: str, value: object, size: int) -> None:
        if size > self._cache_limit or key in self._cache:
            return
        self._cache[key] = (value, size)
        self._cached_bytes += size
        while self._cached_bytes > self._cache_limit:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached_bytes -= dropped


async def summaries_by_reference(outbox: list[Outgoing], objects: ResultStore, limit: int) -> None:
    """Replace the large parts of `execution.*` summaries in `outbox` by object references,
    until each body's JSON takes at most `limit` bytes.
    """
    for message in outbox:
        if message.kind != "event" or not message.event_type.startswith("execution."):
            continue
        body = message.plain_body
        for name in SUMMARY_FIELDS:
            if len(jsonutil.dumps(body)) <= limit:
                break
            if body.get(name) not in (None, {}, []):
                body[name] = await objects.put_bytes(jsonutil.dumps(body[name]))


def _loops(state: ExecutionState) -> list[LoopState]:
    return [run.loop for run in state.runs.values() if run.loop is not None]


def _folds(pages: list[str], index: Index) -> list[_Write]:
    """Store each full list of page keys as an entry of its own, named by the next level."""
    writes: list[_Write] = []
    while (fold := page_index.full(pages, index)) is not None:
        level, keys = fold
        key, data = _keyed(keys)
        page_index.folded(pages, index, level, key)
        writes.append((key, data, keys))
    return writes


def _key_list(value: object, execution_id: str) -> list[str]:
    """The page keys an index entry holds."""
    if not isinstance(value, list) or not all(isinstance(key, str) for key in value):
        raise InfrastructureError(f'an index of stored pages of execution {execution_id} in '
                                  f'"{BUCKET}" holds no list of keys')
    return value


def _keyed(value: object) -> tuple[str, bytes]:
    data = jsonutil.dumps(value)
    return _hash(data), data


def _object_ref(body: JsonObject, name: str) -> JsonObject:
    """The object reference of an entry stored as {"o": reference}."""
    ref = refs.ref_of(body["o"])
    if ref is None:
        raise InfrastructureError(f'{name} in "{BUCKET}" holds no object reference')
    return ref


def _hash(data: bytes) -> str:
    return stored_key(data)  # the name a template's `{{ step._ref }}` gives (dsl/views.py)


def _distinct(writes: list[_Write]) -> list[_Write]:
    seen: dict[str, _Write] = {}
    for write in writes:
        seen.setdefault(write[0], write)
    return list(seen.values())
