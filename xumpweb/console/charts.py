"""The queue page's charts: depth and rates over the last hour (xumpweb/series.py keeps the
samples), as JSON for static/js/queue_charts.js."""

from __future__ import annotations

import redis
from django.http import HttpRequest, JsonResponse

from engine.errors import XumpError
from xumpweb import series
from xumpweb.access import requires
from xumpweb.console.common import snapshot_by_name
from xumpweb.runtime import service


@requires("read", queue="name")
def queue_series(request: HttpRequest, name: str) -> JsonResponse:
    """{"queue", "every", "series": {"time": [...], "depth": [...], "published": [...], ...}},
    ending with the router's latest snapshot (at most about a second old)."""
    by_name, snap = snapshot_by_name()
    running = service()
    try:
        running = running.shard_of(name)  # its samples are kept by its shard's router
    except (XumpError, redis.RedisError):
        pass  # gone (or Redis away): its samples, if any, read as none
    found = series.read(running.redis, running.keys["series"], name, by_name.get(name),
                        snap.get("time"))  # fmt: skip
    return JsonResponse({"queue": name, "every": series.EVERY, "series": found})
