"""The wolfpack benchmark on each store, side by side (issue: stores). Prints figures.

    python bench/store_bench.py [--count N] [--processes P] [--threads T] [--repeat R]
                                [--stores ram,sqlite,postgresql,redis]

2 workers, credit 100: publish -> deliver -> confirm, one call per message and in batches
of 100 (publish_many / confirm_many). SQLite runs on a file in a temporary directory with
synchronous=FULL; PostgreSQL runs when XUMP_TEST_POSTGRES_URL (or the local server) answers;
Redis runs on a private redis-server started here (AOF, appendfsync always), and
redis-benchmark's own SET rate on that server (1 client, then P x T clients) is printed with
the ratios.

On Redis it also runs the shared-store path (engine.relay): P processes of T threads each
publish one message per call (each call returns when its message is durable in the inbox),
a router process applies the inbox in batches, and 2 worker threads take deliveries and
confirm them a batch per call. A process's threads share one RelayClient, which sends the
commands waiting at once in one RPUSH (group commit); Redis also writes the AOF and fsyncs
once per event-loop turn for every client served in it. So concurrent publishers share the
fsyncs that a lone caller waits for one at a time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Engine, Message
from engine.patterns import wolfpack
from engine.relay import RelayClient, RelayRouter
from tests.conftest import RedisServer
from tests.engine.conftest import drop_postgres_rows, drop_redis_keys
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
    for store in engine.stores():
        if store.url and store.url.startswith("postgresql"):
            drop_postgres_rows(store.url, store.name)
            import psycopg

            with psycopg.connect(store.url, autocommit=True) as connection:
                connection.execute("DELETE FROM xump_store WHERE store = %s", (store.name,))
        elif store.kind == "redis":
            drop_redis_keys(store.url, store.name)


def redis_benchmark_set_rate(port: int, clients: int) -> float | None:
    """redis-benchmark's SET requests/s on the same server, no pipelining: with one client
    (the way one engine talks to it) and with many (the way concurrent publishers do)."""
    if shutil.which("redis-benchmark") is None:
        return None
    result = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-n", "20000", "-c", str(clients),
         "-q", "--csv"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in result.stdout.splitlines():
        if line.startswith('"SET"'):
            return float(line.split(",")[1].strip('"'))
    return None


def serve_relay(url: str, store: str, ready, stop) -> None:  # type: ignore[no-untyped-def]
    """The router process of the relay run: wolfpack on `store`, applying its inbox."""
    engine = Engine()
    engine.store_create("redis", store, url=url)
    router = RelayRouter(engine, store, name="bench")
    router.acquire()
    engine.set_default_store(store)
    for worker in ("w1", "w2"):
        wolfpack(engine, "jobs", worker, credit=100)
    ready.set()
    router.serve(stop)


def publish_relayed(url: str, store: str, count: int, threads: int) -> None:
    """One publisher process of the relay run: `threads` threads sharing a client, each
    making `count` publishes, one message per call."""
    client = RelayClient(url, store)
    message = Message(body=b"x" * 100)

    def publish() -> None:
        for _ in range(count):
            client.publish("jobs", message)

    running = [threading.Thread(target=publish) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    client.close()


def relayed(url: str, count: int, processes: int, threads: int) -> tuple[float, float]:
    """Concurrent single-message publishers through the relay; (publishes/s, messages/s
    published, delivered and confirmed)."""
    store = f"relay{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("fork")
    ready, stop = context.Event(), context.Event()
    router = context.Process(target=serve_relay, args=(url, store, ready, stop))
    router.start()
    ready.wait(30)
    received = [0]
    lock = threading.Lock()
    done = threading.Event()

    def work(worker: str) -> None:
        client = RelayClient(url, store)
        while not done.is_set():
            batch = client.deliveries(worker, count=100, wait=0.2)
            if batch:
                client.confirm(batch)
                with lock:
                    received[0] += len(batch)
                    if received[0] >= count:
                        done.set()
        client.close()

    share = count // (processes * threads)
    count = share * processes * threads
    workers = [threading.Thread(target=work, args=(w,)) for w in ("w1", "w2")]
    senders = [
        context.Process(target=publish_relayed, args=(url, store, share, threads))
        for _ in range(processes)
    ]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    published = time.perf_counter() - start
    finished = done.wait(300)
    inbox = RelayClient(url, store)
    while finished and inbox.client.llen(inbox.inbox):  # the router applied every confirm
        time.sleep(0.001)
    confirmed = time.perf_counter() - start
    done.set()
    for thread in workers:
        thread.join()
    stop.set()
    router.join(30)
    inbox.close()
    drop_redis_keys(url, store)
    if not finished:
        raise RuntimeError(f"the relay run confirmed {received[0]:,} of {count:,} messages")
    return count / published, count / confirmed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2, help="relay publisher processes")
    parser.add_argument("--threads", type=int, default=16, help="publisher threads in each")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    parser.add_argument("--stores", default=",".join(STORES), help="which of " + ",".join(STORES))
    args = parser.parse_args()
    print(
        f"Xump store benchmark: wolfpack, 2 workers, {args.count:,} messages per run "
        f"({max(args.count // 4, 1000):,} in the persistent stores' one-call-each runs), "
        f"best of {args.repeat}"
    )
    global REDIS
    print(f"{'store':<12}{'one call each':>18}{'batches of 100':>18}")
    with tempfile.TemporaryDirectory() as redis_dir:
        if shutil.which("redis-server"):
            REDIS = RedisServer(Path(redis_dir))
            REDIS.start()
        try:
            kinds = [kind for kind in STORES if kind in args.stores.split(",")]
            rates = {kind: print_rates(kind, args.count, args.repeat) for kind in kinds}
            if REDIS is None or "redis" not in rates:
                return
            publishers = args.processes * args.threads
            runs = [relayed(REDIS.url, args.count, args.processes, args.threads)
                    for _ in range(args.repeat)]  # fmt: skip
            published, confirmed = max(runs, key=lambda run: run[1])
            print(
                f"redis relay, {args.processes} processes x {args.threads} threads publishing one "
                "message per call "
                f"(durable when it returns): {published:,.0f} publishes/s; "
                f"{confirmed:,.0f} msg/s published, delivered and confirmed"
            )
            for clients in (1, publishers):
                rate = redis_benchmark_set_rate(REDIS.port, clients)
                if not rate:
                    continue
                line = f"redis-benchmark SET, same server, {clients} client(s): {rate:,.0f} /s"
                if clients == 1 and rates.get("redis"):
                    single, batched = rates["redis"]
                    line += (f"; redis store / SET: {single / rate:.2f} one call each, "
                             f"{batched / rate:.1f} batches of 100")  # fmt: skip
                else:
                    line += f"; relay / SET: {confirmed / rate:.2f}"
                print(line)
        finally:
            if REDIS is not None:
                REDIS.stop()


STORES = ("ram", "sqlite", "postgresql", "redis")


def print_rates(kind: str, count: int, repeat: int) -> tuple[float, float] | None:
    """The best of `repeat` runs of each kind (a run on this shared machine can be slowed by
    other work, most of all by other fsyncs; none can be sped up by it)."""
    rates = []
    for run in (single, batched):
        best = 0.0
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as directory:
                engine = engine_for(kind, directory)
                if engine is None:
                    print(f"{kind:<12}{'(no server)':>18}")
                    return None
                for worker in ("w1", "w2"):
                    wolfpack(engine, "jobs", worker, credit=100)
                try:
                    best = max(best, run(engine, count if kind == "ram" or run is batched
                                                 else max(count // 4, 1000)))  # fmt: skip
                finally:
                    cleanup(engine)
        rates.append(best)
    print(f"{kind:<12}{rates[0]:>14,.0f} /s{rates[1]:>14,.0f} /s")
    return rates[0], rates[1]


if __name__ == "__main__":
    main()
