"""Who is consuming: every connected subscriber of every process, in Redis.

Theory of operation. A subscriber connection lives in one web process (or, once they exist,
a STOMP process); the consumers page and /api/consumers must see them all, so each
connection writes what it is into Redis and refreshes it every REFRESH_EVERY seconds, with
an expiry (TTL_MS): a connection whose process died leaves by itself within the expiry.

    xump:{S}:consumer:<id>        STRING (expiring) JSON: the connection's info (`Info`)
    xump:{S}:consumers            SET    ids that may be connected (pruned when read)
    xump:{S}:consumer-close:<id>  STRING (expiring) an operator asked <id> to close

Any transport registers the same way: make an id with `new_id()`, call `refresh()` with
its info every REFRESH_EVERY seconds (its answer says whether an operator asked the
connection to close: it then closes, and gives back the deliveries it holds, unsettled,
as a consumer leaving does), and `forget()` when it ends. The info's `transport` names the
kind ("websocket-json" today; "stomp-websocket", "stomp-tcp" later).

Closing goes through Redis, not the Channels layer: a connection reads its close mark with
the refresh it makes anyway, so it costs no reader per connection, and closes within one
refresh period.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any, TypedDict

import orjson
import redis
import redis.asyncio as aioredis

REFRESH_EVERY = 1.0  # seconds between a connection's refreshes
TTL_MS = 3000  # a registration outlives its connection by at most this
CLOSE_TTL = 30  # seconds a close mark waits for its connection's next refresh
HOST = socket.gethostname()


class Info(TypedDict, total=False):
    id: str
    transport: str
    destination: str
    who: str
    remote: str
    since: float  # epoch seconds it connected
    credit: int  # deliveries it would take now
    in_flight: int  # delivered to it, not settled yet
    acked: int  # deliveries it settled with an ack since it connected
    acks_per_second: float  # over the last refresh period
    host: str
    pid: int


def keys(store: str) -> dict[str, str]:
    prefix = f"xump:{{{store}}}:"
    return {
        "info": prefix + "consumer:",
        "ids": prefix + "consumers",
        "close": prefix + "consumer-close:",
    }


def new_id() -> str:
    """A connection id: 16 hex digits (safe in URLs and Channels group names)."""
    return secrets.token_hex(8)


def valid_id(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


def where() -> dict[str, Any]:
    return {"host": HOST, "pid": os.getpid()}


async def refresh(client: aioredis.Redis, store: str, info: Info) -> bool:
    """Write the connection's info (and keep it listed); True when an operator asked it to
    close (the mark is taken: it is obeyed once)."""
    k = keys(store)
    pipe = client.pipeline(transaction=False)
    pipe.set(k["info"] + info["id"], orjson.dumps(info), px=TTL_MS)
    pipe.sadd(k["ids"], info["id"])
    pipe.delete(k["close"] + info["id"])
    answers = await pipe.execute()
    return bool(answers[2])


async def forget(client: aioredis.Redis, store: str, connection: str) -> None:
    k = keys(store)
    pipe = client.pipeline(transaction=False)
    pipe.delete(k["info"] + connection, k["close"] + connection)
    pipe.srem(k["ids"], connection)
    await pipe.execute()


def listing(client: redis.Redis, store: str) -> list[Info]:
    """Every connection registered now, oldest first; ids whose info expired are pruned."""
    k = keys(store)
    ids = sorted(member.decode() for member in client.smembers(k["ids"]))
    if not ids:
        return []
    found: list[Info] = []
    gone = []
    for connection, raw in zip(ids, client.mget([k["info"] + i for i in ids]), strict=True):
        if raw is None:
            gone.append(connection)
        else:
            found.append(orjson.loads(raw))
    if gone:
        client.srem(k["ids"], *gone)
    found.sort(key=lambda info: (info.get("since", 0), info.get("id", "")))
    return found


def fetch(client: redis.Redis, store: str, connection: str) -> Info | None:
    raw = client.get(keys(store)["info"] + connection)
    return None if raw is None else orjson.loads(raw)


def close(client: redis.Redis, store: str, connection: str) -> bool:
    """Ask a connection to close; False when no such connection is registered."""
    k = keys(store)
    if not client.exists(k["info"] + connection):
        return False
    client.set(k["close"] + connection, b"1", ex=CLOSE_TTL)
    return True
