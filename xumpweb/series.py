"""Each queue's figures over the last hour, for the queue page's charts.

The router samples its stats snapshot every EVERY seconds (runtime.Router._snapshot) into
one bounded Redis list per queue: at most KEEP samples (an hour), each a JSON array
[time, depth, published, delivered, confirmed, dead_lettered]; the list expires an hour
after its last sample, so a deleted queue's series goes by itself. One pipelined round trip
of three commands per queue every 10 s: about 300 commands a second at 1,000 queues.
Rates are derived when read (counter differences between samples), so a sample is never
rewritten. The router hands the write to one background thread (record_later): about 50 ms
at 1,000 queues (bench/console_bench.py) that routing does not wait for.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from typing import Any

import redis

EVERY = 10  # seconds between samples
KEEP = 360  # samples kept per queue: an hour
FIELDS = ("depth", "published", "delivered", "confirmed", "dead_lettered")

logger = logging.getLogger("xump.series")
_writing = threading.Lock()  # held while a background write runs


def sample(queue: dict[str, Any], taken: float) -> list[Any]:
    """One queue's sample from a snapshot entry."""
    stats = queue.get("stats") or {}
    return [round(taken, 3), queue.get("depth", 0),
            *(stats.get(key, 0) for key in FIELDS[1:])]  # fmt: skip


def record(client: redis.Redis, prefix: str, queues: list[dict[str, Any]], taken: float) -> None:
    """Append one sample of every queue (`prefix` + name is a queue's list)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        key = prefix + queue["name"]
        pipe.rpush(key, json.dumps(sample(queue, taken), separators=(",", ":")))
        pipe.ltrim(key, -KEEP, -1)
        pipe.expire(key, KEEP * EVERY + 60)
    pipe.execute()


def record_later(
    client: redis.Redis, prefix: str, queues: list[dict[str, Any]], taken: float
) -> bool:
    """record() in a background thread; False (and nothing written) while the last one
    still runs (a sample is then missing, which the charts show as a longer step)."""
    if not _writing.acquire(blocking=False):
        return False

    def write() -> None:
        try:
            record(client, prefix, queues, taken)
        except redis.RedisError as problem:
            logger.warning("cannot write the charts' samples: %s", problem)
        finally:
            _writing.release()

    threading.Thread(target=write, name="xump-series", daemon=True).start()
    return True


def read(
    client: redis.Redis, prefix: str, name: str, latest: dict[str, Any] | None = None,
    latest_time: float | None = None,
) -> dict[str, list[Any]]:  # fmt: skip
    """A queue's series: {"time": [...], "depth": [...], "published": [per s], ...}; the rates
    are per second since the sample before (None for the first). `latest` (the snapshot's
    entry of the queue) ends the series with the present."""
    samples = [json.loads(raw) for raw in client.lrange(prefix + name, 0, -1)]
    if latest is not None and latest_time is not None:
        samples.append(sample(latest, latest_time))
    samples.sort(key=lambda s: s[0])
    kept: list[list[Any]] = []
    for found in samples:  # two routers around a hand-over may both have sampled
        if kept and found[0] - kept[-1][0] < 1.0:
            continue
        kept.append(found)
    series: dict[str, list[Any]] = {"time": [s[0] for s in kept], "depth": [s[1] for s in kept]}
    for index, key in enumerate(FIELDS[1:], start=2):
        rates: list[float | None] = [None]
        for before, after in itertools.pairwise(kept):
            elapsed = after[0] - before[0]
            rates.append(round(max(0, after[index] - before[index]) / elapsed, 2))
        series[key] = rates[: len(kept)]
    return series
