"""Processes for the relay tests, each started as `python relay_processes.py ROLE ...`:

router URL STORE WORKERS LIMIT [announce]
                                  takes the lease, builds a wolfpack "jobs" for the workers,
                                  applies LIMIT commands per step until SIGTERM; with
                                  "announce", prints "step" as each step with work begins
publisher URL STORE NAME COUNT    publishes NAME:0 .. NAME:COUNT-1 to "jobs", 100 per command
confirmer URL STORE WORKER        takes WORKER's deliveries, notes each in the list
                                  "results" as WORKER:body, confirms them; stops when the key
                                  "stop" exists
crossing URL SIDE A B             routes shard A (SIDE "a") or B (SIDE "b") of the crossing
                                  wiring (test_relay_shards.py) until SIGTERM: on A, "orders"
                                  COPYs to B's "audit" and MOVEs to B's "work"; on B, those
                                  DELIVER to "log" and "w"
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis

from engine import Engine, Message
from engine.patterns import wolfpack
from engine.relay import RelayClient, RelayRouter


def leased(url: str, store: str, lease_ms: int) -> tuple[Engine, RelayRouter]:
    """An engine on `store` and its relay router holding the lease (exit 3 if it cannot)."""
    engine = Engine()
    engine.store_create("redis", store, url=url)
    engine.set_default_store(store)
    relay = RelayRouter(engine, store, name=f"pid{os.getpid()}", lease_ms=lease_ms)
    if not relay.acquire(timeout=60):
        sys.exit(3)
    return engine, relay


def router(url: str, store: str, workers: str, limit: str, announce: str = "") -> None:
    engine, relay = leased(url, store, 1000)
    for worker in workers.split(","):
        wolfpack(engine, "jobs", worker, credit=-1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.is_set():
        if announce and relay.store.client.llen(relay.inbox):
            print("step", flush=True)
        if not relay.run_once(limit=int(limit)):
            stop.wait(0.005)


def crossing(url: str, side: str, a: str, b: str) -> None:
    engine, relay = leased(url, a if side == "a" else b, 500)
    if side == "a":
        engine.queue_create("orders")
        engine.set_remote_queues({"audit": b, "work": b})
        engine.selector_create("orders").when_always().do_copy("audit").enable()
        engine.selector_create("orders").when_always().do_move("work").enable()
    else:
        engine.queue_create("audit")
        engine.queue_create("work")
        engine.set_remote_queues({"orders": a})
        engine.selector_create("audit").when_always().do_deliver("log").enable()
        engine.selector_create("work").when_always().do_deliver("w").enable()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    expiry = 0.0
    while not stop.is_set():
        if not relay.run_once(limit=7):  # small steps: many points to be killed at
            stop.wait(0.002)
        if time.monotonic() >= expiry:  # a commit now and then: carried items leave
            relay.expire()
            expiry = time.monotonic() + 0.05


def publisher(url: str, store: str, name: str, count: str) -> None:
    client = RelayClient(url, store)
    total = int(count)
    for start in range(0, total, 100):
        batch = [
            Message(body=f"{name}:{n}".encode()) for n in range(start, min(start + 100, total))
        ]
        client.publish_many("jobs", batch)


def confirmer(url: str, store: str, worker: str) -> None:
    client = RelayClient(url, store)
    notes = redis.Redis.from_url(url)
    while not notes.exists("stop"):
        got = client.deliveries(worker, count=200, wait=0.2)
        if got:
            notes.rpush("results", *[f"{worker}:{d.message.body.decode()}" for d in got])
            client.confirm(got)


if __name__ == "__main__":
    roles = {"router": router, "publisher": publisher, "confirmer": confirmer,
             "crossing": crossing}  # fmt: skip
    roles[sys.argv[1]](*sys.argv[2:])
