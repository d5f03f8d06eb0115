"""Redis memory for messages held in the Redis store (issue: stores). Prints figures.

    python bench/redis_memory_bench.py [--count 1000000]

Publishes `count` messages of 100 bytes into a queue with no selectors (they stay
unprocessed) on a private redis-server, then reads INFO memory. Target: 1,000,000 messages
in at most 250 MB.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import redis

from engine import Engine, Message
from tests.conftest import RedisServer


def used_memory(url: str) -> int:
    return int(redis.Redis.from_url(url).info("memory")["used_memory"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            engine = Engine()
            engine.store_create("redis", "memory", url=server.url)
            engine.queue_create("held", store="memory")
            before = used_memory(server.url)
            batch = [Message(address="orders.new", body=b"x" * 100)] * 1000
            start = time.perf_counter()
            for _ in range(args.count // 1000):
                engine.publish_many("held", batch)
            seconds = time.perf_counter() - start
            after = used_memory(server.url)
            held = engine.queue_fetch("held").depth
        finally:
            server.stop()
    grown = after - before
    print(f"Redis store memory: {held:,} messages of 100 bytes held unprocessed")
    print(
        f"  INFO memory used_memory: {after / 1e6:,.0f} MB in all ({before / 1e6:,.1f} MB "
        f"empty); the messages {grown / 1e6:,.0f} MB = {grown / 2**20:,.0f} MiB, "
        f"{grown / held:,.0f} bytes each (target: 1,000,000 in <= 250 MB)"
    )
    print(f"  published at {args.count / seconds:,.0f} msg/s in batches of 1,000")


if __name__ == "__main__":
    main()
