"""What /api/health and the dashboard say about the Redis in use beyond "it answers".

* Refusing writes: a Redis at `maxmemory` with `noeviction`, a read-only replica, or one
  whose last background save failed (`stop-writes-on-bgsave-error`) answers PING but
  refuses every publish. A tiny write of a probe key (with an expiry) finds that out, and
  INFO memory finds a Redis too full for one more body (the probe alone may still fit).
* Durability: SPEC §7 promises that an acknowledged publish survives a kill -9 of Redis,
  which holds only with `appendonly yes` and `appendfsync always`. `make run` starts its
  own Redis that way (scripts/ensure_redis.py); a Redis given by XUMP_REDIS_URL is checked
  with CONFIG GET, and a managed Redis that forbids CONFIG is reported as unknown.
"""

from __future__ import annotations

from typing import Any

import redis

PROBE_TTL_MS = 60_000
FULL = 0.99  # of maxmemory: no room for a message body


def write_refusal(client: redis.Redis, probe_key: str) -> str | None:
    """Why Redis refuses writes (its own error text), or None when a write goes through.
    A full Redis (noeviction, at `FULL` of maxmemory) counts as refusing: it still takes
    the tiny probe, but not the next message body."""
    try:
        client.set(probe_key, b"1", px=PROBE_TTL_MS)
    except redis.ResponseError as error:  # OOM, READONLY, MISCONF ...
        return f"Redis refuses writes: {error}"
    memory = client.info("memory")
    limit, used = memory.get("maxmemory", 0), memory.get("used_memory", 0)
    if limit and memory.get("maxmemory_policy") == "noeviction" and used >= FULL * limit:
        return (f"Redis refuses writes: used memory {used} bytes is at its maxmemory "
                f"{limit} (maxmemory-policy noeviction)")  # fmt: skip
    return None


def durability(client: redis.Redis) -> dict[str, Any]:
    """{"appendonly", "appendfsync", "durable": bool | None, "warning": text or absent}."""
    try:
        found = client.config_get("append*")
    except redis.ResponseError as error:  # CONFIG renamed or forbidden (managed Redis)
        return {
            "appendonly": "unknown", "appendfsync": "unknown", "durable": None,
            "warning": "cannot read Redis's persistence settings (CONFIG GET refused: "
            f"{error}); a 202 means on disk only with appendonly yes and appendfsync always",
        }  # fmt: skip
    appendonly = _text(found.get("appendonly", "unknown"))
    appendfsync = _text(found.get("appendfsync", "unknown"))
    report: dict[str, Any] = {"appendonly": appendonly, "appendfsync": appendfsync}
    report["durable"] = appendonly == "yes" and appendfsync == "always"
    if appendonly != "yes":
        report["warning"] = ("Redis keeps no append-only file (appendonly no): a 202 is in "
                             "memory only, and a Redis restart loses what it held")  # fmt: skip
    elif appendfsync != "always":
        report["warning"] = (f"Redis writes its append-only file to disk {appendfsync!r}, "
                             "not on every write (appendfsync always): a 202 can be lost if "
                             "Redis or the machine dies within that window")  # fmt: skip
    return report


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
