"""The wolfpack benchmark on each store, side by side (issue: stores). Prints figures.

    python bench/store_bench.py [--count N]

2 workers, credit 100: publish -> deliver -> confirm, one call per message and in batches
of 100 (publish_many / confirm_many). SQLite runs on a file in a temporary directory with
synchronous=FULL; PostgreSQL runs when XUMP_TEST_POSTGRES_URL (or the local server) answers;
Redis runs on a private redis-server started here (AOF, appendfsync always), and
redis-benchmark's own SET rate on that server is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Engine, Message
from engine.patterns import wolfpack
from tests.conftest import RedisServer
from tests.postgres import postgres_url

REDIS: RedisServer | None = None


def engine_for(kind: str, directory: str) -> Engine | None:
    engine = Engine()
    if kind == "sqlite":
        engine.store_create("sql", "db", url=f"sqlite:///{directory}/bench.sqlite3")
        engine.set_default_store("db")
    elif kind == "redis":
        if REDIS is None:
            return None
        name = f"bench{uuid.uuid4().hex[:8]}"
        engine.store_create("redis", name, url=REDIS.url)
        engine.set_default_store(name)
    elif kind == "postgresql":
        url = postgres_url()
        if url is None:
            return None
        name = f"bench{uuid.uuid4().hex[:8]}"
        engine.store_create("sql", name, url=url)
        engine.set_default_store(name)
    return engine


def single(engine: Engine, count: int) -> float:
    message = Message(body=b"x" * 100)
    start = time.perf_counter()
    waiting: deque = deque()
    for _ in range(count):
        waiting.extend(engine.publish("jobs", message))
        while len(waiting) > 50:
            waiting.extend(engine.confirm(waiting.popleft()))
    while waiting:
        waiting.extend(engine.confirm(waiting.popleft()))
    return count / (time.perf_counter() - start)


def batched(engine: Engine, count: int, batch: int = 100) -> float:
    messages = [Message(body=b"x" * 100)] * batch
    start = time.perf_counter()
    for _ in range(count // batch):
        waiting = engine.publish_many("jobs", messages)
        while waiting:
            waiting = engine.confirm_many(waiting)
    return count // batch * batch / (time.perf_counter() - start)


def cleanup(engine: Engine) -> None:
    from tests.engine.conftest import drop_postgres_rows, drop_redis_keys

    for store in engine.stores():
        if store.url and store.url.startswith("postgresql"):
            drop_postgres_rows(store.url, store.name)
            import psycopg

            with psycopg.connect(store.url, autocommit=True) as connection:
                connection.execute("DELETE FROM xump_store WHERE store = %s", (store.name,))
        elif store.kind == "redis":
            drop_redis_keys(store.url, store.name)


def redis_benchmark_set_rate(port: int) -> float | None:
    """redis-benchmark's SET requests/s on the same server (one client, no pipelining, the
    way the engine talks to it), for the ratio."""
    if shutil.which("redis-benchmark") is None:
        return None
    result = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-n", "20000", "-c", "1", "-q",
         "--csv"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in result.stdout.splitlines():
        if line.startswith('"SET"'):
            return float(line.split(",")[1].strip('"'))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    args = parser.parse_args()
    print(f"Xump store benchmark: wolfpack, 2 workers, {args.count:,} messages per run")
    global REDIS
    print(f"{'store':<12}{'one call each':>18}{'batches of 100':>18}")
    with tempfile.TemporaryDirectory() as redis_dir:
        if shutil.which("redis-server"):
            REDIS = RedisServer(Path(redis_dir))
            REDIS.start()
        try:
            for kind in ("ram", "sqlite", "postgresql", "redis"):
                print_rates(kind, args.count)
            if REDIS is not None:
                rate = redis_benchmark_set_rate(REDIS.port)
                if rate:
                    print(
                        f"redis-benchmark SET on the same server (1 client): {rate:,.0f} requests/s"
                    )
        finally:
            if REDIS is not None:
                REDIS.stop()


def print_rates(kind: str, count: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        rates = []
        for run in (single, batched):
            engine = engine_for(kind, directory)
            if engine is None:
                break
            for worker in ("w1", "w2"):
                wolfpack(engine, "jobs", worker, credit=100)
            try:
                rates.append(run(engine, count if kind == "ram" else max(count // 4, 1000)))
            finally:
                cleanup(engine)
        if not rates:
            print(f"{kind:<12}{'(no server)':>18}")
            return
        print(f"{kind:<12}{rates[0]:>14,.0f} /s{rates[1]:>14,.0f} /s")


if __name__ == "__main__":
    main()
