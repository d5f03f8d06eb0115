"""The console's live feed: one poller per process, frames shared by every /ws/monitor/.

Theory of operation. The router writes a snapshot of every queue's counters to Redis about
every 500 ms (runtime.Router._snapshot). One task per web process reads it every EVERY
seconds while anybody watches, turns counter deltas into per-second rates (RateMeter) and
offers the frame to every monitor connection. A frame goes out when something in it
changed, or every QUIET_EVERY seconds otherwise: the page counts a feed silent for longer
than its STALE_AFTER (2 s, static/js/dashboard.js) as stale, so the keep-alive is what lets
it tell "nothing changed" from "nothing arrives". Each connection keeps only the newest
frame it has not sent yet: a slow browser skips frames instead of piling them up.

When the snapshot cannot be read (Redis away) the hub does not fall silent: it pushes a
frame whose status says Redis is down, why, and since when, and no queues (the page keeps
the numbers it has and marks them stale).

A connection may say which queues it shows ({"type": "watch", "queues": [names], "view": n},
the dashboard's visible page): its frames then carry those queues only, with "view": n, and
"totals" over every queue still (count, depth, history, outstanding, dead letters, the sum
of publish rates). Without a watch frame a connection gets every queue (the topology page).

Frame: {"type": "monitor", "time": push time, "snapshot_time": the router's time or null,
"status": {"redis": {"ok", "detail"?, "since"?}, "routing": {"ok", "detail"?}},
"queues": [{name, depth, history_size, outstanding, dead_letter, limit, counters: {...},
rates: {published, delivered, confirmed}}], "totals": {...}, "recent": [...], "inbox": n,
"view"?: n}; while Redis is
down: {"type": "monitor", "time", "snapshot_time": the last one read, "status"} only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async

logger = logging.getLogger("xump.live")

EVERY = 0.5  # seconds between reads of the snapshot (and at most this often a frame)
QUIET_EVERY = 1.0  # seconds between frames when nothing changes (the page's keep-alive)
STALE = 2.0  # a snapshot this old, unchanged, means nobody routes: the rates are zero
ROUTER_LATE = 3.0  # a snapshot this old (the router writes one every 0.5 s): routing is down
RATES = ("published", "delivered", "confirmed")
COUNTERS = ("published", "routed", "delivered", "confirmed", "rejected", "dead_lettered",
            "dropped", "expired", "timed_out", "recalled")  # fmt: skip

MAX_WATCH = 1000  # queues one watch frame may name

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class RateMeter:
    """Per-second rates of each queue's counters, from consecutive snapshots.

    A queue first seen in a snapshot that follows one this meter read without it is new
    (made between the two): its counters were zero at the earlier snapshot, so a burst into
    a queue made a moment ago shows as a rate. A queue in the first snapshot the meter reads
    has no rate yet (its counters' earlier values are not known)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, dict[str, int]]] = {}
        self._rates: dict[str, dict[str, float]] = {}
        self._taken: float | None = None  # the time of the last snapshot read

    def rates(self, snapshot: dict[str, Any], now: float) -> dict[str, dict[str, float]]:
        taken = snapshot.get("time")
        found: dict[str, dict[str, float]] = {}
        for queue in snapshot.get("queues", []):
            name = queue["name"]
            stats = queue.get("stats", {})
            seen = last = self._last.get(name)
            if seen is None and self._taken is not None and taken is not None:
                last = (self._taken, {})  # new since the snapshot before: it was empty
            if taken is None:
                rates = dict.fromkeys(RATES, 0.0)
            elif last is not None and taken > last[0]:
                elapsed = taken - last[0]
                rates = {
                    key: round(max(0, stats.get(key, 0) - last[1].get(key, 0)) / elapsed, 1)
                    for key in RATES
                }
            elif last is not None and now - taken < STALE:
                rates = self._rates.get(name, dict.fromkeys(RATES, 0.0))
            else:
                rates = dict.fromkeys(RATES, 0.0)
            if taken is not None and (seen is None or taken > seen[0]):
                self._last[name] = (taken, dict(stats))
            found[name] = rates
        for gone in set(self._last) - set(found):
            del self._last[gone]
        self._rates = found
        if taken is not None and (self._taken is None or taken > self._taken):
            self._taken = taken
        return found


def frame(snapshot: dict[str, Any], rates: dict[str, dict[str, float]], now: float) -> dict:
    """The monitor frame for one snapshot."""
    queues = []
    for queue in sorted(snapshot.get("queues", []), key=lambda q: q["name"]):
        stats = queue.get("stats", {})
        queues.append({
            "name": queue["name"],
            "depth": queue.get("depth", 0),
            "history_size": queue.get("history_size", 0),
            "outstanding": queue.get("outstanding", 0),
            "dead_letter": queue.get("dead_letter"),
            "limit": queue.get("limit"),
            "counters": {key: stats.get(key, 0) for key in COUNTERS},
            "rates": rates.get(queue["name"], dict.fromkeys(RATES, 0.0)),
        })  # fmt: skip
    dead = {q["dead_letter"] for q in queues if q["dead_letter"]}
    totals = {
        "queues": len(queues),
        "depth": sum(q["depth"] for q in queues),
        "history_size": sum(q["history_size"] for q in queues),
        "outstanding": sum(q["outstanding"] for q in queues),
        "dead_letters": sum(
            q["depth"] for q in queues if q["name"] in dead or q["name"].startswith("$")
        ),
        "published": round(sum(q["rates"].get("published", 0.0) for q in queues), 1),
    }
    taken = snapshot.get("time")
    if taken is None or now - taken < ROUTER_LATE:
        routing: dict[str, Any] = {"ok": True}
    else:
        routing = {"ok": False, "detail": "the router has written no snapshot for "
                   f"{now - taken:.0f} s: no process routes (worker or router down)"}  # fmt: skip
    return {
        "type": "monitor",
        "time": now,
        "snapshot_time": taken,
        "status": {"redis": {"ok": True}, "routing": routing},
        "queues": queues,
        "totals": totals,
        "recent": snapshot.get("recent", []),
        "inbox": snapshot.get("inbox", 0),
    }


def down_frame(detail: str, since: float, snapshot_time: float | None, now: float) -> dict:
    """The frame while the snapshot cannot be read: what is down, why, since when."""
    return {
        "type": "monitor",
        "time": now,
        "snapshot_time": snapshot_time,
        "status": {
            "redis": {"ok": False, "detail": detail, "since": since},
            "routing": {"ok": False, "detail": "Redis is unreachable"},
        },
    }


class Feed:
    """One connection's frames: the newest unsent one only, cut to the queues it watches."""

    def __init__(self) -> None:
        self.pending: asyncio.Queue = asyncio.Queue(maxsize=1)
        self.names: frozenset[str] | None = None  # None: every queue
        self.view: int | None = None

    def put(self, offered: tuple[dict[str, Any], str]) -> None:
        if self.pending.full():
            self.pending.get_nowait()
        self.pending.put_nowait(offered)

    def watch(self, names: list[str], view: int | None) -> None:
        self.names, self.view = frozenset(names), view

    async def get(self) -> str:
        """The next frame's text for this connection (waits for one)."""
        made, text = await self.pending.get()
        if self.names is None or "queues" not in made:
            return text
        names = self.names
        cut = dict(made, queues=[q for q in made["queues"] if q["name"] in names])
        if self.view is not None:
            cut["view"] = self.view
        return _encode(cut)


class MonitorHub:
    """Reads the snapshot while anybody watches and hands frames to every watcher."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self.read = read
        self.loop = asyncio.get_running_loop()
        self.watchers: set[Feed] = set()
        self.latest: tuple[dict[str, Any], str] | None = None
        self.task: asyncio.Task | None = None
        self.meter = RateMeter()

    def join(self) -> Feed:
        """A feed of frames for one connection (it holds the newest unsent frame only)."""
        feed = Feed()
        if self.latest is not None:
            feed.put(self.latest)
        self.watchers.add(feed)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        return feed

    def again(self, feed: Feed) -> None:
        """Offer `feed` the newest frame again (it now watches other queues)."""
        if self.latest is not None:
            feed.put(self.latest)

    def leave(self, feed: Feed) -> None:
        self.watchers.discard(feed)
        if not self.watchers and self.task is not None:
            self.task.cancel()
            self.task = None
            self.latest = None
            self.meter = RateMeter()  # the next watch starts afresh, not from long ago

    def _offer(self, made: dict[str, Any]) -> None:
        self.latest = (made, _encode(made))
        for feed in self.watchers:
            feed.put(self.latest)

    async def _run(self) -> None:
        last_content: str | None = None
        last_push = 0.0
        last_snapshot_time: float | None = None
        down_since: float | None = None
        while self.watchers:
            started = time.monotonic()
            now = time.time()
            try:
                snapshot = await self.read()
            except Exception as problem:  # Redis away: say so, keep watching
                if down_since is None:
                    down_since = now
                    logger.warning("cannot read the monitor snapshot: %s", problem)
                made = down_frame(str(problem), down_since, last_snapshot_time, now)
                content = _encode(made["status"])
            else:
                down_since = None
                last_snapshot_time = snapshot.get("time")
                made = frame(snapshot, self.meter.rates(snapshot, now), now)
                content = _encode([made["queues"], made["recent"], made["inbox"],
                                   made["status"]])  # fmt: skip
            if content != last_content or started - last_push >= QUIET_EVERY:
                last_content, last_push = content, started
                self._offer(made)
            await asyncio.sleep(max(0.0, EVERY - (time.monotonic() - started)))


_hub: MonitorHub | None = None


def hub() -> MonitorHub:
    """This process's hub (one per event loop)."""
    global _hub
    if _hub is None or _hub.loop is not asyncio.get_running_loop():
        from xumpweb.runtime import service

        _hub = MonitorHub(sync_to_async(lambda: service().snapshot(), thread_sensitive=False))
    return _hub
