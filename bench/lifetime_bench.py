"""Message lifetime (SPEC §8) throughput. Prints figures; asserts nothing.

    python bench/lifetime_bench.py                        # 1,000,000 delayed messages
    python bench/lifetime_bench.py --count 100000         # smaller
    python bench/lifetime_bench.py --redis-url redis://127.0.0.1:27001/0   # a server of yours

(a) delayed messages scheduled into a Redis store through the engine (publish_many, batches
    of --batch), then fired by `tick(now)` as they fall due (a batch per tick): messages/s
    each way. Without --redis-url a private redis-server is started on a free port (AOF as
    the store expects, fsync every second so the disk does not dominate) and stopped after.
(b) routing throughput of a wolfpack (2 workers, credit 10, publish -> deliver -> confirm)
    on the RAM store whose service queue has 10 priority levels (random priorities),
    against the same on a plain queue (bench/engine_bench.py's wolfpack). Messages are
    published 100 at a time, so most of them wait in the service queue (its levels) for
    credit: the levels are what is measured.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Engine, Message
from engine.patterns import wolfpack


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(directory: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory,
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
         "--daemonize", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    import redis

    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return server, f"redis://127.0.0.1:{port}/0"


def bench_delays(url: str, count: int, batch: int) -> tuple[float, float, int]:
    """(scheduled/s, fired/s, how many fired)."""
    store = f"bench{os.getpid()}"
    eng = Engine()
    eng.store_create("redis", store, url=url)
    eng.queue_create("later", store=store)  # no selectors: fired messages wait there
    t0 = float(int(time.time()) + 1_000_000)  # far ahead: the engine's time stands there
    eng.tick(t0)
    # due times spread over `count` ms, in an order unlike the publishing order
    delays = [((n * 7919) % count) / 1000 + 1 for n in range(count)]
    body = b"x" * 100
    gc.collect()
    start = time.perf_counter()
    for at in range(0, count, batch):
        eng.publish_many("later", [Message(body=body, delay=d) for d in delays[at : at + batch]])
    scheduled = time.perf_counter() - start
    assert eng.stats("later")["scheduled"] == count
    step = batch / 1000  # a tick fires about `batch` messages
    now = t0 + 1
    gc.collect()
    start = time.perf_counter()
    while eng.stats("later")["scheduled"]:
        now += step
        eng.tick(now)
    fired_seconds = time.perf_counter() - start
    fired = eng.queue_fetch("later").depth
    eng.queue_delete("later")
    eng.backend(store).client.delete(f"xump:{{{store}}}:lastkey", f"xump:{{{store}}}:queues")
    return count / scheduled, fired / fired_seconds, fired


def bench_wolfpack(count: int, priorities: int) -> float:
    eng = Engine()
    eng.queue_create("jobs", priorities=priorities)
    for worker in ("w1", "w2"):
        wolfpack(eng, "jobs", worker, credit=10)
    rng = random.Random(7)
    messages = [
        Message(address="job", body=b"x" * 100, headers={"priority": rng.randrange(10)})
        for _ in range(1000)
    ]
    publish_many, confirm = eng.publish_many, eng.confirm

    def run() -> None:
        for at in range(0, count, 100):
            waiting = deque(publish_many("jobs", messages[at % 1000 : at % 1000 + 100]))
            while waiting:
                waiting.extend(confirm(waiting.popleft()))

    gc.collect()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    assert eng.stats("jobs")["routed"] == count // 100 * 100
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="delayed messages")
    parser.add_argument("--batch", type=int, default=1000, help="messages per publish/tick")
    parser.add_argument("--routed", type=int, default=200_000, help="wolfpack messages")
    parser.add_argument("--redis-url", help="a Redis server to use (default: start one)")
    args = parser.parse_args()
    print(f"Xump lifetime benchmark, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    server = None
    directory = tempfile.mkdtemp(prefix="xump-lifetime-bench-")
    try:
        url = args.redis_url
        if url is None:
            if shutil.which("redis-server") is None:
                sys.exit("redis-server is not installed; give --redis-url")
            server, url = start_redis(directory)
        schedule, fire, fired = bench_delays(url, args.count, args.batch)
        print(
            f"(a) {args.count:,} delayed messages, Redis store, batches of {args.batch:,}: "
            f"scheduled {schedule:,.0f} msg/s, fired {fire:,.0f} msg/s ({fired:,} fired)"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(directory, ignore_errors=True)
    plain = bench_wolfpack(args.routed, 1)
    levels = bench_wolfpack(args.routed, 10)
    print(
        f"(b) wolfpack 2 workers, credit 10, RAM store: plain queue {plain:,.0f} msg/s, "
        f"10 priority levels {levels:,.0f} msg/s ({levels / plain:.0%} of plain)"
    )


if __name__ == "__main__":
    main()
