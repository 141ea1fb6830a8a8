"""Request-reply for plain NATS clients: `nats req noetl.rpc.execute '{...}'` gets the server's
answer, `{accepted, execution_id, errors, conflict}`.

A core request on `<prefix>.requests.execute` is answered by JetStream itself (the publish ack:
"stored"), since that subject belongs to a stream. The `<prefix>.rpc.*` subjects belong to none:
the servers serve them as a queue group, put the request into the stream with the requester's
inbox as its `reply_to`, and the server that handles it answers there, as it answers any
`reply_to`. The message id is the execution id plus a digest of the body, so a re-sent identical
request is dropped by the stream while a different one under the same id reaches the server,
which answers that the id is taken (`conflict`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError

from noetl_stream import ids, jsonutil, messages
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import RequestReply
from noetl_stream.server.execution_ids import new_execution_id

log = logging.getLogger("noetl_stream.rpc")

QUEUE_GROUP = "noetl-servers"
DUPLICATE_WAIT_S = 2.0  # how long an identical re-sent request waits for the first one's state


def rpc_subject(prefix: str, action: str) -> str:
    return f"{prefix}.rpc.{action}"


def request_msg_id(execution_id: str, body: bytes) -> str:
    """`req:<id>:<digest>`: the same request twice is one message; another body is another."""
    return ids.request_msg_id(execution_id, body)


class RequestResponder:
    """Serves `<prefix>.rpc.execute` and `<prefix>.rpc.cancel` for the lifetime of a server."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        prefix = self.bus.topology.prefix
        self._subs = [
            await self.bus.nc.subscribe(rpc_subject(prefix, "execute"), queue=QUEUE_GROUP,
                                        cb=self._execute),
            await self.bus.nc.subscribe(rpc_subject(prefix, "cancel"), queue=QUEUE_GROUP,
                                        cb=self._cancel)]

    async def stop(self) -> None:
        for sub in self._subs:
            # Stopping: a connection already closed or draining has dropped the subscription.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

    async def _execute(self, msg: Msg) -> None:
        body = await self._body(msg)
        if body is None:
            return
        execution_id = body.get("execution_id")
        if execution_id is None:  # made here, so the answer and the message id can name it
            execution_id = body["execution_id"] = new_execution_id()
        checked = execution_id if isinstance(execution_id, str) else None
        problem = "must be a string" if checked is None else messages.execution_id_problem(checked)
        if checked is None or problem is not None:
            await self._answer(msg, RequestReply(accepted=False, errors=[
                f"bad execution request: execution_id: {problem}"]))
            return
        data = jsonutil.dumps(body)
        try:
            ack = await self.bus.js.publish(
                self.bus.topology.execute_request_subject(), data,
                headers={"Nats-Msg-Id": request_msg_id(checked, data)})
        except (NatsError, TimeoutError) as exc:
            await self._answer(msg, RequestReply(accepted=False, execution_id=checked,
                                                 errors=[f"not stored: {exc or type(exc).__name__}"]))
            return
        if ack.duplicate:
            # The same request was stored moments ago and answers its own sender: say what it did.
            await self._answer(msg, await self._earlier_outcome(checked))

    async def _cancel(self, msg: Msg) -> None:
        body = await self._body(msg)
        if body is None:
            return
        try:
            await self.bus.js.publish(self.bus.topology.cancel_request_subject(),
                                      jsonutil.dumps(body))
        except (NatsError, TimeoutError) as exc:
            await self._answer(msg, RequestReply(accepted=False, execution_id=None,
                                                 errors=[f"not stored: {exc or type(exc).__name__}"]))

    async def _body(self, msg: Msg) -> JsonObject | None:
        """The request as an object with the requester's inbox as `reply_to`; None (answered)
        when it is not a JSON object.
        """
        try:
            body: JsonValue = jsonutil.loads(msg.data)
        except ValueError as exc:
            body, problem = None, f"not JSON: {exc}"
        else:
            problem = "" if isinstance(body, dict) else "the body must be a JSON object"
        if not isinstance(body, dict):
            await self._answer(msg, RequestReply(accepted=False, errors=[f"bad request: {problem}"]))
            return None
        if msg.reply:
            body["reply_to"] = msg.reply
        return body

    async def _earlier_outcome(self, execution_id: str) -> RequestReply:
        executions = await self.bus.js.key_value("noetl_executions")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DUPLICATE_WAIT_S
        while True:
            try:
                if (await executions.get(execution_id)).value:
                    return RequestReply(accepted=True, execution_id=execution_id)
            except KeyNotFoundError:
                pass
            if loop.time() > deadline:
                return RequestReply(accepted=False, execution_id=execution_id, errors=[
                    "the same request was sent moments ago and has not started an execution "
                    "(rejected, or no server has handled it yet); its events say which"])
            await asyncio.sleep(0.1)

    async def _answer(self, msg: Msg, reply: RequestReply) -> None:
        if msg.reply:
            await self.bus.nc.publish(msg.reply, reply.model_dump_json().encode())
