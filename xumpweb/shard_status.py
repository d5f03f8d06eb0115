"""What each shard is doing (SPEC §10): its queues, its waiting work and who routes it, for
`GET /api/shards`, the console's dashboard and `/metrics`.

Theory of operation. Every figure is read, never kept: the wiring says how many queues each
shard holds (the Queue rows' stores, one database query for every shard), and each shard's
own Redis keys say the rest, read with one pipeline per shard (a shard's keys share one hash
tag, so on a Redis Cluster the pipeline stays on the one node that holds them):

  lease      the router holding the shard, "<node>:<pid>:<thread>#<fence>" (absent: nobody
             routes it now)
  snapshot   the router's stats, JSON; a router writes `router` (its name without the
             fence), `since` (when it took the lease) and `steps_per_second`
  inbox      commands waiting for the shard's router (LLEN)
  forward    messages waiting to be carried to another shard (LLEN)

`since` and `steps_per_second` are reported only when the snapshot's `router` is the lease's
current holder: a snapshot left by a router that has gone (or written before routers named
themselves in it) says nothing true of who routes now, so those figures are null.

A shard whose keys cannot be read (its Redis node is down) is reported with `ok` false and
the error's text, its Redis figures null: one node down pauses the shards on it, and the
others are still reported. Nothing here raises for Redis.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from django.db.models import Count

from engine.relay.wire import forward_keys
from xumpweb import shards
from xumpweb.runtime import keys, service
from xumpweb.wiring.models import Queue

logger = logging.getLogger("xump.shards")


def shard_statuses() -> list[dict[str, Any]]:
    """Every shard of `shards.names()`, shard 0 first: {name, queues, inbox,
    forward_backlog, routed_by, since, steps_per_second, ok, problem}."""
    counted = dict(Queue.objects.values_list("store__name").annotate(count=Count("id")).order_by())
    running = service()  # each shard read through its own client (its node, on a cluster)
    return [_status(running.shards.get(name, running).redis, name, counted.get(name, 0))
            for name in shards.names()]  # fmt: skip


def _status(client: redis.Redis, store: str, queues: int) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": store, "queues": queues, "inbox": None, "forward_backlog": None,
        "routed_by": None, "since": None, "steps_per_second": None, "ok": True, "problem": None,
    }  # fmt: skip
    named = keys(store)
    pipe = client.pipeline(transaction=False)
    pipe.get(named["lease"]).get(named["snapshot"]).llen(named["inbox"])
    pipe.llen(forward_keys(store)["forward"])
    try:
        lease, raw_snapshot, inbox, forward = pipe.execute()
    except redis.RedisError as error:
        found.update(ok=False, problem=f"cannot read shard {store!r} from Redis: {error}")
        return found
    found.update(inbox=inbox, forward_backlog=forward)
    if lease is None:
        return found
    holder = lease.decode().rpartition("#")[0] or lease.decode()
    found["routed_by"] = holder
    snapshot = _snapshot(store, raw_snapshot)
    if snapshot.get("router") == holder:
        found["since"] = _number(snapshot.get("since"))
        found["steps_per_second"] = _number(snapshot.get("steps_per_second"))
    return found


def _snapshot(store: str, raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        found = json.loads(raw)
    except ValueError as error:
        logger.warning("shard %r: the router's snapshot is not JSON (%s)", store, error)
        return {}
    return found if isinstance(found, dict) else {}


def _number(value: Any) -> float | None:
    """A figure from the snapshot; None when missing or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value
