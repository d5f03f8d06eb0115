"""Routing over shards (SPEC §10, issue 23): how routing throughput grows with the number of
processes that route. Prints figures; asserts nothing.

    python bench/shard_bench.py                       # 4 shards on a private 3-node cluster
    python bench/shard_bench.py --single              # the same 4 shards on one redis-server
    python bench/shard_bench.py --messages 5000       # a smoke run

Each shard is a Redis store of its own (its keys under its own hash tag, so on a cluster
the shards spread over the nodes) holding the same wiring: a queue "orders" whose topic
selector DELIVERs `orders.#` to destination "billing" and whose DEFAULT selector COPYs the
rest to "audit", which DELIVERs to "archive". Every inbox is filled first (`--messages`
publishes per shard, through the relay client, as the service's web processes append
them); then the routers start at one signal and the figure is messages routed per second,
from the signal until every inbox is empty: routing alone, with pre-filled inboxes.

Routers are engine.relay's RelayRouter, one per shard lease, each applying up to 500
inbox commands per atomic step (the Celery worker's router is the same class, with its
lease watch around it). With W routing processes each routes S/W shards in turn.

Every node runs with AOF and appendfsync always, as the service's Redis does. The run
needs redis-server and redis-cli (`make test`'s set-up installs them).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import Engine, Message
from engine.relay import RelayClient, RelayRouter
from engine.stores.redis_connect import connect
from tests.conftest import RedisServer, start_cluster

STEP = 500  # inbox commands per routing step, as the service's routers take them
BATCH = 200  # publish commands per RPUSH while filling


def wired_engine(url: str, shard: str, after: str) -> tuple[Engine, RelayRouter]:
    """A router of `shard` holding its lease, with the bench's wiring (`after`: the next
    shard, where `cross.#` messages go)."""
    engine = Engine()
    engine.store_create("redis", shard, url=url)
    engine.set_default_store(shard)
    relay = RelayRouter(engine, shard, name=f"bench-{os.getpid()}", lease_ms=30_000)
    if not relay.acquire(timeout=30):
        raise RuntimeError(f"could not take the lease of shard {shard}")
    inbound = f"inbound-{after}"
    mine = f"inbound-{shard}"
    if after != shard:
        engine.set_remote_queues({inbound: after})
    if "orders" not in {info.name for info in engine.queues()}:
        engine.queue_create("orders")
        engine.queue_create("audit")
        engine.queue_create(mine)
        if after == shard:
            inbound = mine
        orders = engine.selector_create
        orders("orders").when_match("topic", "orders.#").do_deliver("billing").enable()
        orders("orders").when_match("topic", "cross.#").do_move(inbound).enable()
        orders("orders").when_default().do_copy("audit").enable()
        engine.selector_create("audit").when_always().do_deliver("archive").enable()
        engine.selector_create(mine).when_always().do_deliver("billing").enable()
    return engine, relay


def fill(url: str, shard: str, count: int, cross: float) -> None:
    """`count` publishes of one message each, appended to the shard's inbox as the
    service's processes append them (a web process's group commit puts several in one
    RPUSH): a `cross` share of them for the next shard's queue, the rest half for
    "billing", half for "archive"."""
    every = round(1 / cross) if cross else 0
    with closing(RelayClient(url, shard)) as client:
        for start in range(0, count, BATCH):
            payloads = []
            for n in range(start, min(start + BATCH, count)):
                if every and n % every == 0:
                    address = "cross.eu"
                else:
                    address = "orders.eu" if n % 2 else "returns.eu"
                message = Message(body=b"x" * 100, address=address)
                payloads.append(client.publish_command("orders", [message])[0])
            client.client.rpush(client.inbox, *payloads)


def route(url: str, shards: list[str], ring: list[str], ready, go, stop) -> None:
    """One routing process: a router per shard, stepping each in turn (each carries what
    it sends to another shard) until told to stop."""
    routers = [wired_engine(url, shard, ring[(ring.index(shard) + 1) % len(ring)])[1]
               for shard in shards]  # fmt: skip
    ready.put(os.getpid())
    go.wait()
    while not stop.is_set():
        if not sum(relay.run_once(STEP) for relay in routers):
            stop.wait(0.001)
    for relay in routers:
        relay.store.release_lease()


def delivered(url: str, shards: list[str]) -> int:
    client, _ = connect(url)
    try:
        return sum(
            client.llen(f"xump:{{{shard}}}:outbox:{destination}")
            for shard in shards
            for destination in ("billing", "archive")
        )
    finally:
        client.close()


def run(
    url: str, shards: list[str], processes: int, messages: int, cross: float
) -> tuple[float, int]:
    """Messages routed per second by `processes` routing processes over `shards`: from the
    signal until every message has made its delivery."""
    context = multiprocessing.get_context("spawn")
    ready, go, stop = context.Queue(), context.Event(), context.Event()
    # wire every shard first (so no process pays for it inside the timed part), then fill
    for at, shard in enumerate(shards):
        _engine, relay = wired_engine(url, shard, shards[(at + 1) % len(shards)])
        relay.store.release_lease()
        relay.store.close()
    for shard in shards:
        fill(url, shard, messages, cross)
    parts = [shards[n::processes] for n in range(processes)]
    workers = [context.Process(target=route, args=(url, part, shards, ready, go, stop))
               for part in parts]  # fmt: skip
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=120)
    total = messages * len(shards)
    started = time.perf_counter()
    go.set()
    while (done := delivered(url, shards)) < total:
        time.sleep(0.002)
    took = time.perf_counter() - started
    stop.set()
    for worker in workers:
        worker.join()
    return done / took, done


def shard_names(url: str, count: int) -> list[str]:
    """`count` new store names, spread over the cluster's nodes as evenly as can be."""
    client, cluster = connect(url)
    if not cluster:
        client.close()
        return [f"shard-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    primaries = sorted(node.name for node in client.get_primaries())
    names: list[str] = []
    while len(names) < count:
        name = f"shard-{uuid.uuid4().hex[:8]}"
        wanted = primaries[len(names) % len(primaries)]
        if client.get_node_from_key(f"xump:{{{name}}}:").name == wanted:
            names.append(name)
    client.close()
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--messages", type=int, default=20_000, help="publishes per shard")
    parser.add_argument("--workers", default="1,2", help="routing processes to compare")
    parser.add_argument(
        "--cross", type=float, default=0.0,
        help="share of the messages MOVEd to a queue of the next shard (0 to 1)",
    )  # fmt: skip
    parser.add_argument(
        "--single", action="store_true", help="one redis-server instead of a 3-node cluster"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="shard-bench-") as work:
        if args.single:
            server = RedisServer(Path(work))
            server.start()
            url, stop = server.url, server.stop
            where = "one redis-server"
        else:
            made = iter(range(100))
            cluster = start_cluster(lambda: Path(work) / f"cluster-{next(made)}")
            url, stop = cluster.url, cluster.stop
            where = "a 3-node Redis Cluster"
        try:
            load = os.getloadavg()[0]
            print(f"{args.shards} shards on {where} (AOF, appendfsync always); "
                  f"{args.messages:,} publishes per shard, {args.cross:.0%} to the next "
                  f"shard; load {load:.2f}")  # fmt: skip
            figures = {}
            for processes in counts:
                names = shard_names(url, args.shards)
                rate, done = run(url, names, processes, args.messages, args.cross)
                figures[processes] = rate
                print(f"  {processes} routing process(es): {rate:>10,.0f} msg/s routed "
                      f"({done:,} deliveries)")  # fmt: skip
            if len(counts) > 1:
                base = figures[counts[0]]
                for processes in counts[1:]:
                    print(f"  {processes} against {counts[0]}: x{figures[processes] / base:.2f}")
        finally:
            stop()


if __name__ == "__main__":
    main()
