"""Trace lines of the bench's traced messages (engine/relay/trace.py), published beside the
path by the live processes (the web server's WebSocket consumers and group commit, the
STOMP server), never on it: each line goes out in a task of its own, which nothing waits
for."""

from __future__ import annotations

import asyncio
import contextlib

import redis

from engine.relay.trace import trace_channel, trace_line
from xumpweb.live.lean_redis import LeanRedis

_tracing: set[asyncio.Task] = set()  # trace lines on their way (held until sent)


def trace_later(client: LeanRedis, store: str, hop: str, at: float, mids: list[str]) -> None:
    """Publish a trace line (engine/relay/trace.py) beside the path, not on it: a task of
    its own, which nothing waits for; lost if Redis refuses it (a bench sees it missing)."""

    async def send() -> None:
        with contextlib.suppress(redis.RedisError):
            await client.execute(("PUBLISH", trace_channel(store), trace_line(hop, at, mids)))

    task = asyncio.create_task(send())
    _tracing.add(task)
    task.add_done_callback(_tracing.discard)


async def traces_sent(within: float = 1.0) -> None:
    """Wait (at most `within` seconds) for the trace lines on their way: a connection that
    ends closes the Redis client they go out on (bench-only; nothing waits without them)."""
    if _tracing:
        await asyncio.wait(set(_tracing), timeout=within)
