"""A plain NATS client that speaks only the documented wire format: JSON request bodies on
`noetl.requests.execute`, events read from `noetl.events.<id>.>`, replies on a core inbox."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from noetl_stream.messages import split_outcome_pool

END_EVENTS = ("execution.completed", "execution.failed", "execution.cancelled", "execution.rejected")


@dataclass
class EventFeed:
    """Everything published on `noetl.events.<id>.>`, as a live subscriber sees it."""

    events: list[dict[str, Any]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def types(self) -> list[str]:
        return [e["event_type"] for e in self.events]

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event_type"] == event_type]

    @property
    def final(self) -> dict[str, Any]:
        return next(e for e in self.events if e["event_type"] in END_EVENTS)


class PlainClient:
    """A bare nats-py connection: publishes request bodies, follows events, receives replies."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc

    async def follow(self, execution_id: str) -> EventFeed:
        feed = EventFeed()

        async def on_msg(msg: Msg) -> None:
            event = json.loads(msg.data)
            event.setdefault("event_type", split_outcome_pool(msg.subject.split(".", 3)[3])[0])
            feed.events.append(event)
            if event["event_type"] in END_EVENTS:
                feed.ended.set()

        await self.nc.subscribe(f"noetl.events.{execution_id}.>", cb=on_msg)
        await self.nc.flush()
        return feed

    async def publish_request(self, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        await self.nc.publish("noetl.requests.execute", data)
        await self.nc.flush()

    async def run(self, execution_id: str, playbook: str, *, timeout_s: float = 30.0,
                  **fields: Any) -> EventFeed:
        feed = await self.follow(execution_id)
        await self.publish_request({"execution_id": execution_id, "playbook": playbook, **fields})
        await asyncio.wait_for(feed.ended.wait(), timeout_s)
        return feed

    async def reply_inbox(self) -> tuple[str, asyncio.Queue[dict[str, Any]]]:
        inbox = self.nc.new_inbox()
        replies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_reply(msg: Msg) -> None:
            await replies.put(json.loads(msg.data))

        await self.nc.subscribe(inbox, cb=on_reply)
        await self.nc.flush()
        return inbox, replies
