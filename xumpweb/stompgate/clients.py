"""The connection's `client-id` (CONNECT header, as ActiveMQ has it): one live connection
per client-id across every STOMP process (TCP and WebSocket), so two programs never take
the same durable subscription at once. A second connection with a client-id in use is
refused with an ERROR, as ActiveMQ refuses it.

Held as a Redis key (the store's key space, `stomp-client:<client-id>`, holding the
session's id) with an expiry, renewed by the session while it lives and deleted when it
ends; a process killed outright frees its client-ids when the keys expire (HOLD seconds).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import redis

logger = logging.getLogger("xump.stomp")

HOLD = 15.0  # seconds a client-id stays taken without renewal
RENEW = HOLD / 3


def _key(session: Any, client_id: str) -> str:
    # hashed: a client-id is any text the client chose
    digest = hashlib.sha256(client_id.encode()).hexdigest()[:32]
    return session.service.keys["inbox"][: -len("inbox")] + "stomp-client:" + digest


def _client(session: Any) -> Any:
    """The session's client of the server holding its service's keys."""
    return session.client_of(session.service.store)


async def claim(session: Any, client_id: str) -> bool:
    """Take `client_id` for `session`; False when another connection holds it. The
    session renews it until `release`."""
    key = _key(session, client_id)
    if not await _client(session).set(key, session.id, nx=True, ex=int(HOLD)):
        return False
    session.client_id = client_id
    session.tasks.append(asyncio.create_task(_renew(session, key)))
    return True


async def _renew(session: Any, key: str) -> None:
    while not session.closed:
        await asyncio.sleep(RENEW)
        try:
            await _client(session).set(key, session.id, xx=True, ex=int(HOLD))
        except redis.RedisError as problem:
            logger.warning("cannot renew client-id of STOMP session %s: %s", session.id, problem)


async def release(session: Any) -> None:
    """Free the session's client-id (when it holds one); at the end of the connection."""
    if session.client_id is None:
        return
    key = _key(session, session.client_id)
    try:
        if (await _client(session).get(key) or b"").decode() == session.id:
            await _client(session).delete(key)
    except redis.RedisError as problem:  # it expires anyway
        logger.warning("cannot release client-id of STOMP session %s: %s", session.id, problem)
