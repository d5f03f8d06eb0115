"""The store watch: a STOMP session or a JSON WebSocket subscriber ends when Redis stays
away under one of its subscriptions (stompgate/session.py's module doc, "Redis away", and
live/consumers.py's).

One task per process, while it has subscriptions, looks every LOOK_EVERY at each watched
subscription's `silent(now)` (how long Redis has not answered it, once past the bound) and
tells its session (`store_gone`). A look reads a few fields a subscription: nothing a message
waits for.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from xumpweb.live.head_view import POP_WAIT

# seconds a session rides out Redis being away under one of its subscriptions (its takes
# failing, or one in flight not answered STORE_AWAY seconds past POP_WAIT) before it ends
# with an ERROR naming Redis
STORE_AWAY = 10.0
LOOK_EVERY = 0.25  # seconds between the watch's looks at the subscriptions


def silence(
    now: float, away_since: float | None, problem: str, asked: float | None
) -> tuple[float, str] | None:
    """How long Redis has not answered a subscription and why, once that is past the bound
    (else None): since its first failed take (`away_since`, failing with `problem`), or
    since a take it never answered was asked (`asked`)."""
    if away_since is not None and now - away_since >= STORE_AWAY:
        return now - away_since, problem
    if asked is not None and now - asked >= POP_WAIT + STORE_AWAY:
        return now - asked, "a read of the outbox was not answered"
    return None


class Watched(Protocol):
    def silent(self, now: float) -> tuple[float, str] | None: ...

    def store_gone(self, silent: float, problem: str) -> None: ...


_watched: set[Watched] = set()
_watcher: asyncio.Task | None = None


def watch(sub: Watched) -> None:
    """Watch `sub` until `unwatch` (or until it is told the store is gone)."""
    global _watcher
    _watched.add(sub)
    running = asyncio.get_running_loop()
    if _watcher is None or _watcher.done() or _watcher.get_loop() is not running:
        _watcher = asyncio.create_task(_watch())


def unwatch(sub: Watched) -> None:
    _watched.discard(sub)


async def _watch() -> None:
    while _watched:
        await asyncio.sleep(LOOK_EVERY)
        now = time.monotonic()
        for sub in list(_watched):
            silent = sub.silent(now)
            if silent is not None:
                _watched.discard(sub)
                sub.store_gone(*silent)
