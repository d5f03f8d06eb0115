"""The service end to end (issue 7), beside RabbitMQ doing the same. Prints figures.

    python bench/service_bench.py [--http N] [--messages N] [--latency-seconds S]
                                  [--single-seconds S] [--only xump|rabbitmq]
                                  [--latency-only] [--ws-only] [--e2e-only] [--rate R]
                                  [--untraced]

Starts its own private redis-server (AOF, appendfsync always: a 202 means on disk), the
ASGI server (uvicorn, one process, as the Procfile runs it) and one Celery worker that
routes (XUMP_ROUTING=worker, the default; tests/web/conftest.py's start_service), then
measures:

1. HTTP batch publish: POST /api/queues/{q}/publish-batch, 5,000 messages of 100 bytes a
   request, from 1 and from 2 clients, into a queue that holds them (no selector); msg/s
   until the last 202, and the router's time to take them all in (published counter);
2. end to end, the wolfpack pattern with 2 WebSocket subscribers (each its own process):
   a publisher process posts batches of 1,000 while the subscribers take deliveries in
   "deliveries" frames (credit 1,000, batch 100), ack each frame in one "ack" frame and
   open their window by as much; msg/s from the first publish until the router has applied
   the last ack (both worker queues say confirmed = N, outstanding = 0);
3. single publishes: POST /api/queues/{q}/publish, one message a request, as fast as the
   answers come on 8 keep-alive connections (LeanHttp) for --single-seconds; publishes/s;
4. latency at 1,000 msg/s: single POST /api/queues/{q}/publish paced at 1,000 a second
   (4 keep-alive connections, a lean HTTP/1.1 client: LeanHttp), each body carrying its
   send time; p50/p99 of send -> delivery frame at the subscriber, the rate actually sent
   (a publisher waits for each 202, so a slow service is sent less), publish -> 202, and
   send -> routed (the router's timestamp) and routed -> delivery frame. Its messages
   carry the trace header (engine/relay/trace.py): the run also prints each hop's p50/p99
   (POST sent -> read by the web process -> inbox append durable -> ... as in 5.).

5. the JSON WebSocket publish path (/ws/publish/, one message a frame, each confirmed):
   one publisher pipelining with a window of WS_WINDOW frames in flight (publishes/s), and
   one sending each frame only once the last was confirmed (publishes/s and the confirm's
   p50/p99); then the latency run of 4. with the publishes sent as WebSocket frames by one
   connection, paced at 1,000 a second, not waiting for confirms. Its messages carry the
   trace header (engine/relay/trace.py), so the run also prints the p50/p99 of each hop:
   frame sent -> read by the web process -> inbox append durable -> routing step durable
   -> the subscriber's process has it -> frame written -> the subscriber has it.
   With --untraced the paced runs' messages carry no trace header (the stamps cost the
   processes a publish each a hop, which the path without them does not pay) and no hop
   table is printed.

Every body carries a serial number; each run checks that every message was delivered
exactly once (none missing, none twice) and fails loudly otherwise.

Then the same wolfpack (one durable queue, 2 competing consumers, prefetch 1,000, acks of
100 at once, persistent messages, no publisher confirms) and the same paced latency on the
local RabbitMQ (127.0.0.1:5672, guest/guest) through pika, when one answers, and the
ratios. CPU seconds per 1,000 messages of each process are printed for the Xump runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx
import orjson
import redis
from websockets.sync.client import connect

from engine.relay.trace import TRACE, parse_header, parse_line, trace_channel
from tests.conftest import RedisServer
from tests.faults.subscriber import deliveries
from tests.web.conftest import start_service

PAD = "x" * 73  # a body: 17 characters of send time, 10 of serial number, 73 of padding
BATCH = 5000
SUBSCRIBER_CREDIT, SUBSCRIBER_BATCH = 1000, 100
PATTERN_CREDIT = 1000  # the wolfpack's MOVE credit per worker
# msg/s of the paced (latency) runs: --rate, which the client processes (spawned, so
# importing this module again) read from the environment
RATE = float(os.environ.get("SERVICE_BENCH_RATE", "1000"))
# the paced runs' messages carry the trace header (--untraced: they do not, and no hop table)
TRACED = os.environ.get("SERVICE_BENCH_TRACED", "1") == "1"
SINGLE_CONNECTIONS = 8  # connections of the single-publish run
WS_WINDOW = 1000  # publish frames in flight on the pipelined WebSocket run
RABBIT = ("127.0.0.1", 5672)
TICKS = os.sysconf("SC_CLK_TCK")


def hops(sent: str, reader: str, delivered: str) -> tuple:
    """A paced run's hops, (label, from stamp, to stamp): "send" and "client" are the
    clients' own clocks, the rest the service's stamps (engine/relay/trace.py); one
    machine, one clock. `sent` names what the client sends, `reader` the process that
    reads it, `delivered` what the subscriber gets."""
    return (
        (f"{sent} -> {reader} has read it", "send", "recv"),
        ("read -> inbox append durable", "recv", "inbox"),
        ("inbox durable -> routing step durable", "inbox", "step"),
        ("step durable -> subscriber's process has it", "step", "learn"),
        ("subscriber's process has it -> frame written", "learn", "write"),
        (f"frame written -> client has the {delivered}", "write", "client"),
        (f"{sent} -> {delivered}, the whole path", "send", "client"),
    )


WS_HOPS = hops("publish frame sent", "web process", "delivery")
HTTP_HOPS = hops("POST sent", "web process", "delivery")


def body(serial: int) -> str:
    return f"{time.time():17.6f}{serial:010d}{PAD}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class CpuMeter:
    """CPU seconds the service's processes spend between start() and stop()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.spent = {name: cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}
        return self.spent


def check_once(serials: list[int], total: int, what: str) -> None:
    """Every serial from 0 to total - 1 seen exactly once, or SystemExit."""
    if len(serials) != total or set(serials) != set(range(total)):
        seen = set(serials)
        raise SystemExit(
            f"{what}: {len(serials)} deliveries of {total} messages, {len(seen)} distinct, "
            f"{total - len(seen & set(range(total)))} missing, "
            f"{len(serials) - len(seen)} delivered twice"
        )


# -- Xump -------------------------------------------------------------------------------------
def api(service, method: str, path: str, **options) -> httpx.Response:
    with service.client() as client:
        answer = client.request(method, path, **options)
    if answer.status_code >= 400:
        raise SystemExit(f"{method} {path}: {answer.status_code} {answer.text}")
    return answer


def wait_for_counter(service, queues: list[str], counter: str, total: int) -> None:
    """Poll the router's stats until `counter` summed over `queues` reaches `total` and
    nothing is outstanding."""
    deadline = time.monotonic() + 600
    with service.client() as client:
        while True:
            found = [client.get(f"/api/queues/{quote(q, safe='')}/stats").json() for q in queues]
            if (sum(s[counter] for s in found) >= total
                    and not any(s["outstanding"] for s in found)):  # fmt: skip
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"{counter} stuck at {sum(s[counter] for s in found)} of {total}")
            time.sleep(0.02)


def http_publish(service, queue: str, total: int, clients: int) -> float:
    """msg/s of batch publishes from `clients` threads, `total` messages in all."""
    path = f"/api/queues/{quote(queue, safe='')}/publish-batch"
    payload = json.dumps({"messages": [{"body": body(0)}] * BATCH})
    requests = total // BATCH

    def client(count: int) -> None:
        with service.client() as http:
            for _ in range(count):
                answer = http.post(path, content=payload,
                                   headers={"Content-Type": "application/json"})  # fmt: skip
                if answer.status_code != 202:
                    raise SystemExit(f"publish-batch: {answer.status_code} {answer.text}")

    threads = [threading.Thread(target=client, args=(requests // clients,))
               for _ in range(clients)]  # fmt: skip
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return requests // clients * clients * BATCH / (time.perf_counter() - started)


def ws_subscriber(url: str, counter, results, ready, go, done) -> None:
    """A subscriber process: batched credit, one ack frame per deliveries frame."""
    serials: list[int] = []
    latencies: list[float] = []
    routed: list[float] = []  # send -> routed (the message's timestamp, set by the router)
    traced: list[tuple] = []  # (serial, send, received, mid, trace header) of traced ones
    with connect(url, max_size=None, open_timeout=30) as socket:
        assert json.loads(socket.recv())["type"] == "subscribed"
        socket.send(json.dumps({"type": "credit", "n": SUBSCRIBER_CREDIT,
                                "batch": SUBSCRIBER_BATCH}))  # fmt: skip
        ready.set()
        for items in deliveries(socket, done.is_set, 0.2, orjson.loads):
            now = time.time()
            for item in items:
                message = item["message"]
                text = message["body"]
                latencies.append(now - float(text[:17]))
                routed.append(message["timestamp"] - float(text[:17]))
                serials.append(int(text[17:27]))
                if TRACE in message["headers"]:
                    traced.append((serials[-1], float(text[:17]), now, message["mid"],
                                   message["headers"][TRACE]))  # fmt: skip
            tags = [item["tag"] for item in items]
            socket.send(orjson.dumps({"type": "ack", "tags": tags}).decode())
            socket.send(orjson.dumps({"type": "credit", "n": len(items)}).decode())
            with counter.get_lock():
                counter.value += len(items)
    results.put((serials, latencies, time.process_time(), routed, traced))


def ws_publisher(base: str, token: str, queue: str, total: int, chunk: int, ready, go) -> None:
    """Batches of `chunk` from one HTTP client, once `go` is set."""
    path = f"{base}/api/queues/{quote(queue, safe='')}/publish-batch"
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        http.get(f"{base}/api/health")  # connected before the clock starts
        ready.set()
        go.wait()
        for start in range(0, total, chunk):
            messages = [{"body": body(n)} for n in range(start, start + chunk)]
            answer = http.post(path, json={"messages": messages})
            assert answer.status_code == 202, answer.text


class LeanHttp:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads the answer, with none of
    a general client's machinery: httpx.AsyncClient spends 1 to 2.4 ms of CPU a request, as
    much as the server it measures, which on 2 cores starves the service it loads."""

    def __init__(self, base: str, token: str) -> None:
        self.host, self.port = base.removeprefix("http://").split(":")
        self.token = token

    async def __aenter__(self) -> LeanHttp:
        self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
        return self

    async def __aexit__(self, *_: object) -> None:
        self.writer.close()

    async def post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            .encode() + payload
        )  # fmt: skip
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = next(int(line[15:]) for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))  # fmt: skip
        return status, await self.reader.readexactly(length)


async def paced_single_publishes(base: str, token: str, queue: str, total: int) -> None:
    """Single publishes at RATE a second from 4 concurrent connections."""
    path = f"/api/queues/{quote(queue, safe='')}/publish"
    started = time.perf_counter() + 0.2
    answered: list[float] = []

    async def publisher(offset: int) -> None:
        async with LeanHttp(base, token) as http:
            for n in range(offset, total, 4):
                delay = started + n / RATE - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent = time.perf_counter()
                payload = {"body": body(n), "headers": {TRACE: "on"} if TRACED else {}}
                status, text = await http.post(path, orjson.dumps(payload))
                answered.append(time.perf_counter() - sent)
                assert status == 202, text

    await asyncio.gather(*(publisher(offset) for offset in range(4)))
    rate = total / (time.perf_counter() - started)
    print_latency("latency run", rate, "202", answered)


def paced_publisher(base: str, token: str, queue: str, total: int, ready, go) -> None:
    ready.set()
    go.wait()
    asyncio.run(paced_single_publishes(base, token, queue, total))


async def ws_publishes(ws_url: str, token: str, queue: str, seconds: float,
                       window: int) -> tuple[float, list[float]]:  # fmt: skip
    """publishes/s of one /ws/publish/ connection with up to `window` publish frames
    unconfirmed (1: each sent once the last is confirmed), one message a frame, and each
    frame's send -> confirm time."""
    from websockets.asyncio.client import connect as ws_connect

    latencies: list[float] = []
    async with ws_connect(
        f"{ws_url}/ws/publish/?token={token}", max_size=None, compression=None
    ) as socket:
        assert orjson.loads(await socket.recv())["type"] == "ready"
        room = asyncio.Semaphore(window)
        sent: dict[int, float] = {}
        until = time.perf_counter() + seconds
        count = 0

        async def answers() -> None:
            while True:
                frame = orjson.loads(await socket.recv(decode=False))
                if frame["type"] == "heartbeat":
                    continue
                if frame["type"] != "published":
                    raise SystemExit(f"WebSocket publish: {frame}")
                latencies.append(time.perf_counter() - sent.pop(frame["id"]))
                room.release()

        reader = asyncio.create_task(answers())
        started = time.perf_counter()
        while time.perf_counter() < until:
            await room.acquire()
            if reader.done():
                reader.result()
            sent[count] = time.perf_counter()
            frame = {"type": "publish", "queue": queue, "id": count,
                     "message": {"body": body(count)}}  # fmt: skip
            await socket.send(orjson.dumps(frame).decode())
            count += 1
        while sent and not reader.done():
            await asyncio.sleep(0.001)
        reader.cancel()
        return count / (time.perf_counter() - started), latencies


async def paced_ws_publishes(ws_url: str, token: str, queue: str, total: int) -> None:
    """Publish frames at RATE a second on one /ws/publish/ connection, not waiting for
    their confirms (read as they come)."""
    from websockets.asyncio.client import connect as ws_connect

    answered: list[float] = []
    async with ws_connect(
        f"{ws_url}/ws/publish/?token={token}", max_size=None, compression=None
    ) as socket:
        assert orjson.loads(await socket.recv())["type"] == "ready"
        sent: dict[int, float] = {}

        async def answers() -> None:
            while len(answered) < total:
                frame = orjson.loads(await socket.recv(decode=False))
                if frame["type"] == "published":
                    answered.append(time.perf_counter() - sent.pop(frame["id"]))
                elif frame["type"] != "heartbeat":
                    raise SystemExit(f"WebSocket publish: {frame}")

        reader = asyncio.create_task(answers())
        started = time.perf_counter() + 0.2
        for n in range(total):
            delay = started + n / RATE - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[n] = time.perf_counter()
            frame = {"type": "publish", "queue": queue, "id": n,
                     "message": {"body": body(n),
                                 "headers": {TRACE: "on"} if TRACED else {}}}  # fmt: skip
            await socket.send(orjson.dumps(frame).decode())
        rate = total / (time.perf_counter() - started)
        await reader
    print_latency("WebSocket latency run", rate, "confirm", answered)


def paced_ws_publisher(base: str, token: str, queue: str, total: int, ready, go) -> None:
    ready.set()
    go.wait()
    asyncio.run(paced_ws_publishes(base.replace("http://", "ws://"), token, queue, total))


class Run:
    """Subscriber processes and a publisher process around one measured interval."""

    def __init__(self, subscriber, subscriber_args: list[tuple], publisher, publisher_args):
        context = multiprocessing.get_context("spawn")
        self.counter = context.Value("q", 0)
        self.results = context.Queue()
        self.go, self.done = context.Event(), context.Event()
        self.readies = []
        self.subscribers = []
        for arguments in subscriber_args:
            ready = context.Event()
            self.readies.append(ready)
            self.subscribers.append(context.Process(target=subscriber, args=(
                *arguments, self.counter, self.results, ready, self.go, self.done,
            )))  # fmt: skip
        ready = context.Event()
        self.readies.append(ready)
        self.publisher = context.Process(target=publisher, args=(*publisher_args, ready, self.go))

    def measure(self, total: int, settled=None) -> tuple[float, list[int], list[float], float]:
        """msg/s from `go` until `total` deliveries were counted (and `settled()` returned);
        every serial delivered, every latency, client CPU seconds."""
        for process in [*self.subscribers, self.publisher]:
            process.start()
        for ready in self.readies:
            if not ready.wait(60):
                raise SystemExit("a client process did not start")
        started = time.perf_counter()
        self.go.set()
        deadline = time.monotonic() + 600
        while self.counter.value < total:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {self.counter.value} of {total} delivered in 10 minutes")
            if self.publisher.exitcode:
                raise SystemExit(f"the publisher failed ({self.publisher.exitcode})")
            if any(subscriber.exitcode for subscriber in self.subscribers):
                raise SystemExit("a subscriber failed")
            time.sleep(0.002)
        if settled is not None:
            settled()
        elapsed = time.perf_counter() - started
        time.sleep(0.3)  # anything delivered twice arrives now, and is counted
        self.done.set()
        serials: list[int] = []
        latencies: list[float] = []
        client_cpu = 0.0
        self.routed: list[float] = []
        self.traced: list[tuple] = []
        for _ in self.subscribers:
            found, seen, cpu, *routed = self.results.get(timeout=60)
            if routed:  # Xump's subscribers also say when the router had routed each,
                self.routed.extend(routed[0])  # and what the traced messages gathered
                self.traced.extend(routed[1])
            serials.extend(found)
            latencies.extend(seen)
            client_cpu += cpu
        for process in [*self.subscribers, self.publisher]:
            process.join(timeout=30)
        return total / elapsed, serials, latencies, client_cpu


# -- the trace of the paced runs (engine/relay/trace.py): where a lone message's time goes --
class TraceListener(threading.Thread):
    """The store's trace channel, read from before a paced run starts: {mid: {hop: time}}."""

    def __init__(self, url: str, store: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(trace_channel(store))
        self.stamps: dict[str, dict[str, float]] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            found = self.pubsub.get_message(timeout=0.2)
            if found is None:
                continue
            hop, at, mids = parse_line(found["data"])
            for mid in mids:
                self.stamps.setdefault(mid, {})[hop] = at

    def stop(self) -> None:
        time.sleep(0.5)  # the last lines arrive
        self.stopping.set()
        self.join()
        self.pubsub.close()
        self.client.close()


def hop_table(
    messages: list[tuple], stamps: dict[str, dict[str, float]], hops: tuple
) -> tuple[list, int]:
    """(label, p50 ms, p99 ms) per hop of `hops` ((label, from stamp, to stamp)), from the
    `messages` ((serial, send time, client time, mid, trace header)) that have every stamp
    (the header's and the trace channel's `stamps`, by mid); how many had."""
    spans: dict[str, list[float]] = {label: [] for label, _, _ in hops}
    whole = 0
    for _, send, client, mid, header in messages:
        times = {"send": send, "client": client, **parse_header(header or ""),
                 **stamps.get(mid, {})}  # fmt: skip
        if not all(stamp in times for _, a, b in hops for stamp in (a, b)):
            continue
        whole += 1
        for label, a, b in hops:
            spans[label].append(times[b] - times[a])
    return [(label, *percentiles(spans[label])) for label, _, _ in hops], whole


def turns(total: int, paced: bool) -> Iterator[int]:
    """0 to total - 1, each when its turn comes at RATE a second if `paced` (else at once):
    the serial numbers of a publisher's messages."""
    started = time.perf_counter()
    for n in range(total):
        if paced:
            delay = started + n / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        yield n


def print_latency(run: str, rate: float, until: str, answered: list[float]) -> None:
    """A paced run's line: the rate it sent at, and the p50 and p99 from publish to `until`."""
    p50, p99 = percentiles(answered)
    print(f"  ({run}: {rate:,.0f} publishes/s sent; publish -> {until} p50 {p50:.1f} ms, "
          f"p99 {p99:.1f} ms)", flush=True)  # fmt: skip


def print_hops(found: tuple | None) -> None:
    """A paced run's hop table (hop_table's rows, how many had every stamp, of how many)."""
    if found is None:
        return
    hops, whole, counted = found
    print(f"  its hops ({whole} of {counted} traced messages after the first tenth had "
          "every stamp; each hop's percentiles are its own):")  # fmt: skip
    print(f"    {'hop':50} {'p50 ms':>8} {'p99 ms':>8}")
    for label, p50, p99 in hops:
        print(f"    {label:50} {p50:>8.2f} {p99:>8.2f}")


def percentiles(latencies: list[float]) -> tuple[float, float]:
    if len(latencies) < 2:
        return float("nan"), float("nan")
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


@contextmanager
def worker_service(
    directory: Path,
    *redis_options: str,
    shards: int = 1,
    unix: bool = False,
    web_routes: bool = False,
) -> Iterator[tuple[Any, RedisServer]]:
    """The service with routing in a Celery worker, on a redis-server of its own (started
    with `redis_options`), both under `directory`, its queues over `shards` shards
    (XUMP_SHARDS); stopped on leaving the block. `unix`: the service reaches Redis by a
    unix socket (XUMP_REDIS_URL=unix://...; Celery's broker, off the messages' way, stays
    on TCP, as when docs/live-path.md's figures were measured). `web_routes`:
    XUMP_WEB_ROUTES=true, the web process routes the store itself while it runs."""
    (directory / "redis").mkdir()
    (directory / "service").mkdir()
    socket_path = directory / "redis" / "redis.sock"
    if unix:
        redis_options = (*redis_options, "--unixsocket", str(socket_path),
                         "--unixsocketperm", "700")  # fmt: skip
    redis_server = RedisServer(directory / "redis", *redis_options)
    redis_server.start()
    service = None
    url, broker = redis_server.url, {}
    if unix:
        url, broker = f"unix://{socket_path}?db=0", {"XUMP_BROKER_URL": redis_server.url}
    try:
        service = start_service(url, directory / "service", "worker", XUMP_SHARDS=str(shards),
                                XUMP_WEB_ROUTES="true" if web_routes else "false",
                                **broker)  # fmt: skip
        service.start_worker()
        yield service, redis_server
    finally:
        if service is not None:
            service.close()
        redis_server.stop()


def bench_xump(args: argparse.Namespace, directory: Path) -> dict:
    with worker_service(directory, web_routes=args.web_routes) as (service, redis_server):
        pids = {name: process.pid for name, process in service.processes.items()}
        meter = CpuMeter({**pids, "redis": redis_server.process.pid})
        results: dict = {"cpu": {}}

        def wolfpack_run(total: int, publisher, publisher_args: tuple) -> tuple:
            router = f"bench-jobs-{uuid.uuid4().hex[:6]}"
            workers = [f"{router}-w1", f"{router}-w2"]
            for worker in workers:
                api(service, "POST", "/api/patterns", json={
                    "kind": "wolfpack", "router": router, "name": worker,
                    "credit": PATTERN_CREDIT,
                })  # fmt: skip
            urls = [(f"{service.ws_url}/ws/subscribe/{w}/?token={service.admin_token}",)
                    for w in workers]  # fmt: skip
            run = Run(ws_subscriber, urls, publisher,
                      (service.url, service.admin_token, router, *publisher_args))  # fmt: skip
            private = [f"{router}:{worker}" for worker in workers]
            listener = None
            traced = {paced_ws_publisher: "ws_hops", paced_publisher: "http_hops"}.get(publisher)
            if traced and TRACED:  # its messages are traced: the hop table
                listener = TraceListener(redis_server.url, service.env["XUMP_STORE"])
                listener.start()
            meter.start()
            try:
                rate, serials, latencies, client_cpu = run.measure(
                    total, lambda: wait_for_counter(service, private, "confirmed", total)
                )
            finally:
                spent = meter.stop()
                if listener is not None:
                    listener.stop()
            if listener is not None:
                counted = [record for record in run.traced if record[0] >= total // 10]
                table = WS_HOPS if publisher is paced_ws_publisher else HTTP_HOPS
                hops, whole = hop_table(counted, listener.stamps, table)
                results[traced] = (hops, whole, len(counted))
            check_once(serials, total, "Xump wolfpack")
            if publisher in (paced_publisher, paced_ws_publisher):
                (p50, p99), (d50, d99) = (
                    percentiles(run.routed),
                    percentiles(
                        [seen - taken for seen, taken in zip(latencies, run.routed, strict=True)]
                    ),
                )
                print(f"  (latency run: send -> routed p50 {p50:.1f} ms, p99 {p99:.1f} ms; "
                      f"routed -> frame received p50 {d50:.1f} ms, p99 {d99:.1f} ms)")  # fmt: skip
            return rate, latencies, (spent, total, client_cpu)

        if args.e2e_only:
            results["e2e"], _, results["cpu"]["e2e"] = wolfpack_run(
                args.messages, ws_publisher, (args.messages, 1000)
            )
            return results
        if args.ws_only or not args.latency_only:
            held = f"bench-ws-{uuid.uuid4().hex[:6]}"
            api(service, "POST", "/api/queues", json={"name": held})
            token, ws_url = service.admin_token, service.ws_url
            asyncio.run(ws_publishes(ws_url, token, held, 1.0, WS_WINDOW))  # warm up
            meter.start()
            results["ws_window"], _ = asyncio.run(
                ws_publishes(ws_url, token, held, args.single_seconds, WS_WINDOW)
            )
            results["cpu"]["ws window"] = (
                meter.stop(), max(1, round(results["ws_window"] * args.single_seconds)), 0.0,
            )  # fmt: skip
            results["ws_one"], confirms = asyncio.run(
                ws_publishes(ws_url, token, held, args.single_seconds, 1)
            )
            results["ws_one_p50"], results["ws_one_p99"] = percentiles(confirms)
            total = round(RATE * args.latency_seconds)
            _, seen, results["cpu"]["ws latency"] = wolfpack_run(
                total, paced_ws_publisher, (total,)
            )
            results["ws_p50"], results["ws_p99"] = percentiles(seen)
            if args.ws_only:
                return results
        if args.latency_only:
            total = round(RATE * args.latency_seconds)
            _, seen, results["cpu"]["latency"] = wolfpack_run(total, paced_publisher, (total,))
            results["p50"], results["p99"] = percentiles(seen)
            return results
        held = f"bench-held-{uuid.uuid4().hex[:6]}"
        api(service, "POST", "/api/queues", json={"name": held})
        http_publish(service, held, BATCH * 2, 1)  # warm up the server and the router
        wait_for_counter(service, [held], "published", BATCH * 2)
        meter.start()
        results["http1"] = http_publish(service, held, args.http, 1)
        started = time.perf_counter()
        results["http2"] = http_publish(service, held, args.http, 2)
        wait_for_counter(service, [held], "published", BATCH * 2 + args.http * 2)
        results["http_routed_after"] = time.perf_counter() - started
        results["cpu"]["http"] = (meter.stop(), args.http * 2, 0.0)
        single_publishes(service.url, service.admin_token, held, 1.0)  # warm up
        meter.start()
        results["single"] = single_publishes(
            service.url, service.admin_token, held, args.single_seconds
        )
        results["cpu"]["single"] = (
            meter.stop(),
            max(1, round(results["single"] * args.single_seconds)),
            0.0,
        )

        results["e2e"], _, results["cpu"]["e2e"] = wolfpack_run(
            args.messages, ws_publisher, (args.messages, 1000)
        )
        total = round(RATE * args.latency_seconds)
        _, seen, results["cpu"]["latency"] = wolfpack_run(total, paced_publisher, (total,))
        results["p50"], results["p99"] = percentiles(seen)
        return results


# -- RabbitMQ ---------------------------------------------------------------------------------
def listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port (a broker to compare with)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def rabbit_connection():
    import pika

    return pika.BlockingConnection(pika.ConnectionParameters(
        host=RABBIT[0], port=RABBIT[1], credentials=pika.PlainCredentials("guest", "guest"),
    ))  # fmt: skip


def rabbit_consumer(queue: str, counter, results, ready, go, done) -> None:
    """A consumer process: prefetch 1,000, one ack (multiple) per 100 messages."""
    connection = rabbit_connection()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=SUBSCRIBER_CREDIT)
    serials: list[int] = []
    latencies: list[float] = []
    state = {"pending": 0, "last": 0}

    def settle() -> None:
        if state["pending"]:
            channel.basic_ack(state["last"], multiple=True)
            with counter.get_lock():
                counter.value += state["pending"]
            state["pending"] = 0

    def take(channel, method, properties, raw: bytes) -> None:
        latencies.append(time.time() - float(raw[:17]))
        serials.append(int(raw[17:27]))
        state["pending"] += 1
        state["last"] = method.delivery_tag
        if state["pending"] >= SUBSCRIBER_BATCH:
            settle()

    channel.basic_consume(queue, take)
    ready.set()
    while not done.is_set():
        connection.process_data_events(time_limit=0.01)
        settle()
    connection.close()
    results.put((serials, latencies, time.process_time()))


def rabbit_publisher(queue: str, total: int, paced: bool, ready, go) -> None:
    import pika

    connection = rabbit_connection()
    channel = connection.channel()
    persistent = pika.BasicProperties(delivery_mode=2)
    ready.set()
    go.wait()
    for n in turns(total, paced):
        channel.basic_publish("", queue, body(n).encode(), persistent)
    connection.close()


def bench_rabbit(args: argparse.Namespace) -> dict | None:
    if not listening(*RABBIT):
        return None
    results: dict = {}

    def run(total: int, paced: bool) -> tuple[float, list]:
        queue = f"xump-bench-{uuid.uuid4().hex[:6]}"
        connection = rabbit_connection()
        connection.channel().queue_declare(queue, durable=True)
        try:
            clients = Run(rabbit_consumer, [(queue,), (queue,)], rabbit_publisher,
                          (queue, total, paced))  # fmt: skip
            rate, serials, latencies, _ = clients.measure(total)
            check_once(serials, total, "RabbitMQ wolfpack")
            return rate, latencies
        finally:
            connection.channel().queue_delete(queue)
            connection.close()

    results["e2e"], _ = run(args.messages, paced=False)
    if args.e2e_only:
        return results
    _, seen = run(round(RATE * args.latency_seconds), paced=True)
    results["p50"], results["p99"] = percentiles(seen)
    return results


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def single_publishes(base: str, token: str, queue: str, seconds: float) -> float:
    """publishes/s of single publishes from SINGLE_CONNECTIONS connections, each sending
    the next as soon as its 202 comes."""
    path = f"/api/queues/{quote(queue, safe='')}/publish"
    payload = orjson.dumps({"body": body(0)})
    sent = 0

    async def connection(until: float) -> None:
        nonlocal sent
        async with LeanHttp(base, token) as http:
            while time.perf_counter() < until:
                status, text = await http.post(path, payload)
                if status != 202:
                    raise SystemExit(f"publish: {status} {text!r}")
                sent += 1

    async def run() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(connection(started + seconds) for _ in range(SINGLE_CONNECTIONS)))
        return sent / (time.perf_counter() - started)

    return asyncio.run(run())


def set_rate(rate: float, traced: bool = True) -> None:
    """The paced runs' rate and whether their messages are traced, here and in the client
    processes started from now on."""
    global RATE, TRACED
    RATE, TRACED = rate, traced
    os.environ["SERVICE_BENCH_RATE"] = repr(rate)
    os.environ["SERVICE_BENCH_TRACED"] = "1" if traced else "0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, default=100_000, help="messages per HTTP run")
    parser.add_argument("--messages", type=int, default=50_000, help="messages end to end")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--single-seconds", type=float, default=5.0)
    parser.add_argument(
        "--latency-only", action="store_true", help="only the latency run (no throughput runs)"
    )
    parser.add_argument(
        "--ws-only", action="store_true", help="only the JSON WebSocket publish runs (Xump)"
    )
    parser.add_argument(
        "--e2e-only", action="store_true",
        help="only the wolfpack end to end run (2.), beside RabbitMQ's unless --only xump",
    )  # fmt: skip
    parser.add_argument("--only", choices=("xump", "rabbitmq"), help="run one side only")
    parser.add_argument(
        "--web-routes", action="store_true",
        help="XUMP_WEB_ROUTES=true: the web process routes the store itself (SPEC 11's "
        "co-located path) instead of the Celery worker",
    )  # fmt: skip
    parser.add_argument(
        "--rate", type=float, default=RATE, help="msg/s of the paced latency runs (1000)"
    )
    parser.add_argument(
        "--untraced", action="store_true",
        help="the paced runs' messages carry no trace header (the path as clients see it, "
        "without the stamps' own cost); no hop tables",
    )  # fmt: skip
    args = parser.parse_args()
    set_rate(args.rate, not args.untraced)
    args.http = max(args.http - args.http % (2 * BATCH), 2 * BATCH)
    args.messages = max(args.messages - args.messages % 1000, 1000)
    load_before = load()
    xump = {key: float("nan") for key in ("http1", "http2", "single", "e2e", "p50", "p99",
                                          "ws_window", "ws_one", "ws_one_p50", "ws_one_p99",
                                          "ws_p50", "ws_p99")}  # fmt: skip
    if args.ws_only:
        args.only = "xump"
    if args.only != "rabbitmq":
        with tempfile.TemporaryDirectory(prefix="xump-service-bench-") as directory:
            xump.update(bench_xump(args, Path(directory)))
    rabbit = bench_rabbit(args) if args.only != "xump" else None

    print(f"service bench ({os.cpu_count()} cores; load average {load_before} before, "
          f"{load()} after; Redis with appendfsync always; 1 uvicorn, 1 Celery worker "
          f"routing)")  # fmt: skip
    lines = [  # a run this invocation left out (--e2e-only, --ws-only, ...) prints nothing
        ("http1", f"  HTTP batch publish, {BATCH} a request, 1 client   "
                  f"{xump['http1']:>10,.0f} msg/s"),
        ("http2", f"  HTTP batch publish, {BATCH} a request, 2 clients  "
                  f"{xump['http2']:>10,.0f} msg/s"),
        ("http2", f"    (the router had taken in all {args.http:,} of the 2-client run "
                  f"{xump.get('http_routed_after', NAN):.2f} s after its first request)"),
        ("single", f"  single publishes, {SINGLE_CONNECTIONS} connections      "
                   f"{xump['single']:>10,.0f} msg/s"),
        ("ws_window", f"  WebSocket publish, one a frame, {WS_WINDOW} in flight  "
                      f"{xump['ws_window']:>10,.0f} msg/s"),
        ("ws_one", f"  WebSocket publish, one at a time (confirmed)  "
                   f"{xump['ws_one']:>10,.0f} msg/s"),
        ("ws_one", f"    (send -> confirm p50 {xump['ws_one_p50']:.2f} ms, "
                   f"p99 {xump['ws_one_p99']:.2f} ms)"),
        ("ws_p50", f"  WebSocket publish latency at {RATE:g} msg/s, send -> delivery: p50 "
                   f"{xump['ws_p50']:.1f} ms, p99 {xump['ws_p99']:.1f} ms"),
    ]  # fmt: skip
    for key, line in lines:
        if made(xump[key]) and "nan" not in line:
            print(line)
    print_hops(xump.get("ws_hops"))
    header = f"  {'':44} {'Xump':>12} {'RabbitMQ':>12} {'ratio':>7}"
    print(header)
    rows = [
        ("wolfpack end to end, 2 subscribers (msg/s)", "e2e", "{:>12,.0f}"),
        (f"latency p50 at {RATE:g} msg/s (ms)", "p50", "{:>12.1f}"),
        (f"latency p99 at {RATE:g} msg/s (ms)", "p99", "{:>12.1f}"),
    ]
    for label, key, shape in rows:
        if not made(xump[key]) and not (rabbit and made(rabbit.get(key, NAN))):
            continue
        their = rabbit.get(key, float("nan")) if rabbit else None
        theirs = shape.format(their) if rabbit else f"{'-':>12}"
        ratio = f"{xump[key] / their:>7.2f}" if rabbit and their else f"{'-':>7}"
        print(f"  {label:44} {shape.format(xump[key])} {theirs} {ratio}")
    if "http_hops" in xump:
        print(f"  the HTTP latency run's hops (single POSTs paced at {RATE:g} msg/s):")
        print_hops(xump["http_hops"])
    if rabbit is None and args.only != "xump":
        print(f"  (no RabbitMQ answers on {RABBIT[0]}:{RABBIT[1]}: its column is empty)")
    if made(xump["p50"]):
        print(f"  (latency rows: paced at {RATE:g} msg/s, but 4 publishers that wait for each 202 "
              "fall")  # fmt: skip
        print("  behind when a publish takes more than 4 ms: the rate sent is printed above)")
    print("  every message delivered exactly once in every run (checked by serial number);")
    print("  Xump's end to end stops when the router has applied the last ack, RabbitMQ's")
    print("  when the last ack was sent (RabbitMQ: persistent messages, no publisher confirms)")
    for run, (spent, count, clients) in xump.get("cpu", {}).items():
        parts = ", ".join(f"{name} {seconds * 1000 / count * 1000:.0f}"
                          for name, seconds in spent.items())  # fmt: skip
        extra = f", subscribers {clients * 1e6 / count:.0f}" if clients else ""
        print(f"  CPU us per message, {run}: {parts}{extra}")
    print("  targets: >= 20,000 msg/s HTTP batch, >= 20,000 msg/s end to end, p99 <= 20 ms")


NAN = float("nan")


def made(figure: float) -> bool:
    """Whether a run gave this figure (NaN: the run was left out)."""
    return figure == figure


if __name__ == "__main__":
    main()
