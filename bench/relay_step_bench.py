"""The router's CPU per routed message, alone (issue 20). Prints figures; asserts nothing.

    python bench/relay_step_bench.py [--messages N] [--batch B] [--acks A] [--repeat R]
                                     [--profile FILE] [--journal on|off|both]

What the service's Celery worker does for each message of the STOMP end to end bench,
without the other processes' noise: a private redis-server (AOF, appendfsync always), the
service's router class (xumpweb.runtime's, journal on) routing a queue whose one DELIVER
selector (credit unlimited) feeds a destination. Each round appends B publish commands of
one 100-byte message each (as a STOMP server's group commit appends them), routes them
(steps of up to 500 commands, as the standing router does), takes the deliveries off the
outbox, appends confirms of A tags each and routes those. Only the router's calls
(run_once) are timed, by this process's CPU clock (time.process_time): CPU microseconds
per message, publish and confirm, and the wall time of those calls, which includes
Redis's answers. The best and the median of R runs of N messages are printed.
`--profile FILE` writes a cProfile of one run instead. `--journal off` routes with the
engine's event journal off (no lineage, nothing appended to the store's journal list);
`--journal both` runs on and off alternately and prints what the journal costs (SPEC §12:
recording lineage should cost at most 5 % of routing throughput).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "xumpweb.settings")

from engine import Engine, Message
from engine.relay import RelayClient, relay_keys
from engine.relay.wire import _dumps, _loads
from tests.conftest import RedisServer
from xumpweb.analytics.journal import journal_key
from xumpweb.runtime import _RelayRouter

BODY = b"x" * 100


def build(url: str, store: str, journal: bool = True) -> tuple[_RelayRouter, RelayClient]:
    engine = Engine(journal=journal)
    engine.store_create("redis", store, url=url)
    engine.set_default_store(store)
    router = _RelayRouter(engine, store, name="bench", lease_ms=10_000)
    router.recent = deque(maxlen=100)
    router.journal_key = journal_key(store)
    router.journal_limit = 2_000_000
    router.wiring_key = f"xump:{{{store}}}:wiring"
    assert router.acquire(timeout=5)
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("out").enable()
    return router, RelayClient(url, store)


def one_run(router: _RelayRouter, client: RelayClient, total: int, batch: int, acks: int):
    """CPU and wall seconds of the router's steps for `total` messages, publish and confirm."""
    redis_client = client.client
    inbox, outbox, _ = relay_keys(router.store.name)
    outbox += "out"
    journal = router.journal_key
    cpu = wall = 0.0
    sent = 0
    while sent < total:
        commands = []
        for _ in range(batch):
            message = Message("orders.new", {"persistent": "true"}, BODY)
            command, _, _ = client.publish_command("q", [message])
            commands.append(command)
        redis_client.rpush(inbox, *commands)
        sent += batch
        cpu, wall = drain(router, cpu, wall)
        items = redis_client.lpop(outbox, batch) or []
        tags = [client_tag(item) for item in items]
        confirms = [_confirm(tags[i : i + acks]) for i in range(0, len(tags), acks)]
        if confirms:
            redis_client.rpush(inbox, *confirms)
        cpu, wall = drain(router, cpu, wall)
        redis_client.delete(journal)  # the archive export would drain it
    return cpu, wall


def drain(router: _RelayRouter, cpu: float, wall: float) -> tuple[float, float]:
    started_cpu, started = time.process_time(), time.perf_counter()
    while router.run_once():
        pass
    return cpu + time.process_time() - started_cpu, wall + time.perf_counter() - started


def client_tag(item: bytes) -> str:
    return _loads(item)["tag"]


def _confirm(tags: list[str]) -> bytes:
    return _dumps({"op": "confirm", "tags": tags})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per run")
    parser.add_argument("--batch", type=int, default=100, help="publishes appended at once")
    parser.add_argument("--acks", type=int, default=10, help="tags per confirm command")
    parser.add_argument("--repeat", type=int, default=5, help="runs (best and median printed)")
    parser.add_argument("--profile", help="write a cProfile of one run to this file")
    parser.add_argument("--journal", choices=("on", "off", "both"), default="on",
                        help="the engine's event journal (both: on and off, compared)")  # fmt: skip
    options = parser.parse_args()
    import django

    django.setup()
    modes = {"on": (True,), "off": (False,), "both": (True, False)}[options.journal]
    cpus: dict[bool, list[float]] = {mode: [] for mode in modes}
    walls: dict[bool, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            routers = {}
            for mode in modes:  # one router at a time holds its own store's lease
                routers[mode] = build(server.url, f"b{uuid.uuid4().hex[:8]}", mode)
                one_run(*routers[mode], 2_000, options.batch, options.acks)  # warm-up
            if options.profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
                one_run(*routers[modes[0]], options.messages, options.batch, options.acks)
                profiler.disable()
                profiler.dump_stats(options.profile)
                return
            for _ in range(options.repeat):
                for mode in modes:  # alternately, so a busy moment costs both the same
                    cpu, wall = one_run(*routers[mode], options.messages, options.batch,
                                        options.acks)  # fmt: skip
                    cpus[mode].append(cpu * 1e6 / options.messages)
                    walls[mode].append(wall * 1e6 / options.messages)
            for _, client in routers.values():
                client.close()
        finally:
            server.kill()
    print(f"relay step bench ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}): "
          f"{options.messages:,} messages a run, publishes appended {options.batch} at once, "
          f"{options.acks} tags a confirm")  # fmt: skip
    for mode in modes:
        print(f"  journal {'on' if mode else 'off'}: router CPU us per message: best "
              f"{min(cpus[mode]):.1f}, median {statistics.median(cpus[mode]):.1f} "
              f"({', '.join(f'{c:.1f}' for c in cpus[mode])}); wall us per message: best "
              f"{min(walls[mode]):.1f}, median {statistics.median(walls[mode]):.1f}")  # fmt: skip
    if len(modes) == 2:
        on, off = statistics.median(cpus[True]), statistics.median(cpus[False])
        print(f"  the journal costs {(on / off - 1) * 100:+.1f} % of the router's CPU per "
              f"message (medians): throughput {(1 - off / on) * 100:.1f} % lower")  # fmt: skip


if __name__ == "__main__":
    main()
