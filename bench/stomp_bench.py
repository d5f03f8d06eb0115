"""STOMP 1.2 over TCP: Xump's STOMP server beside RabbitMQ's STOMP plugin. Prints figures.

    python bench/stomp_bench.py [--messages N] [--seconds S] [--only xump|rabbitmq]
                                [--xump-port PORT] [--appendfsync always|everysec]
    python bench/stomp_bench.py --paced RATE [--seconds S] ...   (the hop table only)
    ... --stomp-routes   the STOMP server routes the store itself (XUMP_STOMP_ROUTES=true)
    ... --redis-unix     Xump's processes reach Redis by a unix socket, not TCP

The same client code (stomp.py, `stomp.Connection12`, TCP_NODELAY, no heart-beats) runs
against both brokers; only the connection settings differ. Xump: the bench starts its own
private redis-server (AOF, appendfsync always: a RECEIPT means on disk), the ASGI server,
one Celery worker that routes (tests/web/conftest.py's start_service, as
bench/service_bench.py does) and `python manage.py stomp_server` on --xump-port with the
web process's environment; login anything, passcode an API token. RabbitMQ: the local
broker's STOMP plugin on 127.0.0.1:61613 (guest/guest, virtual host /; enable it once with
`rabbitmq-plugins enable rabbitmq_stomp`), durable queues, persistent messages
(`persistent:true`), where a SEND's RECEIPT is RabbitMQ's publisher confirm.

1. publish: one connection SENDs 100-byte messages, each with a `receipt`, to a queue
   nobody consumes, for --seconds: one at a time (the next SEND once the last RECEIPT
   came; msg/s and SEND -> RECEIPT p50/p99), and pipelined (up to 1,000 RECEIPTs awaited
   at once; msg/s until the last RECEIPT);
2. end to end, competing consumers: 2 consumer processes SUBSCRIBE to one destination
   (`ack:client-individual`, `prefetch-count:1000`) and ACK every MESSAGE, while a
   publisher process SENDs --messages messages with no receipts (a DISCONNECT with a
   receipt at the end); msg/s from the first SEND until the consumers have ACKed the last
   MESSAGE. On RabbitMQ the consumers share a durable queue; on Xump the SENDs go to a
   queue whose one DELIVER selector (credit unlimited) feeds a destination the consumers
   share (competing subscribers of a destination), the same shape. A wolfpack pattern
   (a private queue per worker) would not be, so it is not used here. Xump must then also
   have applied every ACK (the queue's stats: confirmed = N, nothing outstanding);
3. latency at 1,000 msg/s: one publisher process paced at 1,000 SENDs a second (each with
   a receipt, not awaited: SEND -> RECEIPT p50/p99 printed), one consumer as in 2; each
   body carries its send time (time.time(): both processes read the same clock), p50/p99
   of send -> MESSAGE received.

--paced RATE: where a lone message's time goes (docs/live-path.md). One publisher process
SENDs RATE persistent messages a second for --seconds (each with a receipt, not awaited,
and the bench-only header `xump-trace`, engine/relay/trace.py) into a wolfpack of one worker
whose one consumer process SUBSCRIBEs with `ack:auto`. The STOMP server stamps when it
read the SEND and when the subscriber's process took the delivery into the MESSAGE's
`xump-trace` header; it and the router publish on the store's trace channel when the inbox
append and the routing step came back durable and when the frame was written; the bench
listens there. Printed: p50/p99 of each hop, of the whole SEND -> MESSAGE and of SEND ->
RECEIPT; beside them RabbitMQ's SEND -> MESSAGE and SEND -> RECEIPT at the same pace, same
client, ack:auto (when its STOMP answers). The first half second of messages is a warm-up,
not counted.

Every body carries a serial number; runs 2 and 3 check that every message arrived exactly
once (none missing, none twice) and fail loudly otherwise. When RabbitMQ's STOMP does not
answer (the plugin off) its column is empty; a broker that fails during a run stops the
bench.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import redis
import stomp

from bench.service_bench import (
    PATTERN_CREDIT,
    RATE,
    CpuMeter,
    Run,
    TraceListener,
    api,
    body,
    check_once,
    hop_table,
    hops,
    listening,
    load,
    percentiles,
    rabbit_connection,
    turns,
    wait_for_counter,
    worker_service,
)
from engine.relay.trace import TRACE
from tests.web.conftest import PYTHON, ROOT

HOST = "127.0.0.1"
RABBIT_STOMP = 61613
WINDOW = 1000  # RECEIPTs awaited at once in the pipelined publish run
PREFETCH = 1000  # the consumers' prefetch-count
WAIT = 30  # seconds a RECEIPT may take before the bench gives up


@dataclass(frozen=True, slots=True)
class Broker:
    """Where and how the stomp.py client connects; `vhost` is CONNECT's `host` header
    (RabbitMQ: its virtual host), `send_headers` go on every SEND."""

    name: str
    port: int
    login: str
    passcode: str
    vhost: str | None = None
    send_headers: tuple[tuple[str, str], ...] = ()


class Listener(stomp.ConnectionListener):
    """Frames from the broker, in stomp.py's receiver thread. In a client process
    (`fatal`) an ERROR frame or a lost connection ends the process with status 1, which
    Run.measure reports."""

    def __init__(self, broker: Broker, fatal: bool) -> None:
        self.broker, self.fatal = broker, fatal
        self.error: str | None = None
        self.server = ""
        self.on_taken = None  # called with each MESSAGE frame
        self.on_receipted = None  # called with each RECEIPT's receipt-id
        self.closing = False

    def fail(self, reason: str) -> None:
        self.error = f"{self.broker.name}: {reason}"
        if self.fatal:
            print(self.error, file=sys.stderr, flush=True)
            os._exit(1)

    def on_connected(self, frame) -> None:
        self.server = frame.headers.get("server", "")

    def on_error(self, frame) -> None:
        self.fail(f"ERROR {frame.headers.get('message', '')}: {frame.body}")

    def on_disconnected(self) -> None:
        if not self.closing:
            self.fail("the connection was lost")

    def on_message(self, frame) -> None:
        self.on_taken(frame)

    def on_receipt(self, frame) -> None:
        if self.on_receipted is not None:
            self.on_receipted(frame.headers["receipt-id"])


def connect(broker: Broker, fatal: bool = True) -> tuple[stomp.Connection12, Listener]:
    connection = stomp.Connection12([(HOST, broker.port)], vhost=broker.vhost,
                                    reconnect_attempts_max=1)  # fmt: skip
    listener = Listener(broker, fatal)
    connection.set_listener("bench", listener)
    try:
        connection.connect(broker.login, broker.passcode, wait=True)
    except stomp.exception.ConnectFailedException as error:
        raise SystemExit(f"{broker.name}: CONNECT failed ({listener.error or error})") from None
    connection.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection, listener


def close(connection: stomp.Connection12, listener: Listener) -> None:
    """DISCONNECT with a receipt: returns once the broker has handled every earlier frame."""
    listener.closing = True
    connection.disconnect(receipt="bye")


# -- the client processes ---------------------------------------------------------------------
def stomp_consumer(broker: Broker, destination: str, counter, results, ready, go, done) -> None:
    """SUBSCRIBE (client-individual, prefetch PREFETCH) and ACK every MESSAGE."""
    serials: list[int] = []
    latencies: list[float] = []
    acked = 0
    connection, listener = connect(broker)

    def take(frame) -> None:
        nonlocal acked
        text = frame.body
        latencies.append(time.time() - float(text[:17]))
        serials.append(int(text[17:27]))
        connection.ack(frame.headers["ack"])
        acked += 1

    subscribed = threading.Event()
    listener.on_taken = take
    listener.on_receipted = lambda _: subscribed.set()
    headers = {"prefetch-count": str(PREFETCH), "receipt": "subscribed"}
    connection.subscribe(destination, id="1", ack="client-individual", headers=headers)
    if not subscribed.wait(WAIT):
        listener.fail("no RECEIPT for SUBSCRIBE")
    cpu = time.process_time()  # the start-up (imports, CONNECT) not counted
    ready.set()
    counted = 0
    while not done.wait(0.002):
        if acked != counted:
            now = acked
            with counter.get_lock():
                counter.value += now - counted
            counted = now
    close(connection, listener)
    results.put((serials, latencies, time.process_time() - cpu))


def stomp_publisher(broker: Broker, destination: str, total: int, paced: bool, stats,
                    ready, go) -> None:  # fmt: skip
    """SEND `total` messages once `go` is set; paced: RATE a second, each with a receipt
    (not awaited). Puts (SENDs/s, SEND -> RECEIPT p50 and p99, CPU seconds) on `stats`."""
    connection, listener = connect(broker)
    headers = dict(broker.send_headers)
    sent: dict[str, float] = {}
    receipted: list[float] = []
    listener.on_receipted = lambda rid: (
        rid in sent and receipted.append(time.perf_counter() - sent.pop(rid))
    )
    cpu = time.process_time()
    ready.set()
    go.wait()
    started = time.perf_counter()
    for n in turns(total, paced):
        if paced:
            sent[str(n)] = time.perf_counter()
            connection.send(destination, body(n), headers={**headers, "receipt": str(n)})
        else:
            connection.send(destination, body(n), headers=headers)
    rate = total / (time.perf_counter() - started)
    close(connection, listener)
    stats.put((rate, *percentiles(receipted), time.process_time() - cpu))


# -- the runs, the same on both brokers -------------------------------------------------------
def publishes(broker: Broker, destination: str, seconds: float, window: int) -> dict:
    """SENDs with a receipt each for `seconds`, up to `window` RECEIPTs awaited at once:
    msg/s until the last RECEIPT, and each SEND -> RECEIPT time."""
    connection, listener = connect(broker, fatal=False)
    headers = dict(broker.send_headers)
    room = threading.Semaphore(window)
    sent: dict[str, float] = {}
    receipted: list[float] = []

    def receipt(rid: str) -> None:
        if rid not in sent:  # DISCONNECT's
            return
        receipted.append(time.perf_counter() - sent.pop(rid))
        room.release()

    listener.on_receipted = receipt
    count = 0
    started = time.perf_counter()
    until = started + seconds
    while time.perf_counter() < until:
        if not room.acquire(timeout=WAIT) or listener.error:
            raise SystemExit(listener.error or f"{broker.name}: no RECEIPT in {WAIT} s")
        rid = str(count)
        sent[rid] = time.perf_counter()
        connection.send(destination, body(count), headers={**headers, "receipt": rid})
        count += 1
    for _ in range(window):
        if not room.acquire(timeout=WAIT) or listener.error:
            raise SystemExit(listener.error or f"{broker.name}: no RECEIPT in {WAIT} s")
    elapsed = time.perf_counter() - started
    close(connection, listener)
    p50, p99 = percentiles(receipted)
    return {"rate": count / elapsed, "p50": p50, "p99": p99, "server": listener.server}


def clients(broker: Broker, send_to: str, subscribe_to: str, consumers: int, total: int,
            paced: bool, settled=None) -> tuple[float, list[float], tuple]:  # fmt: skip
    """One publisher and `consumers` consumer processes around one measured interval:
    msg/s, every latency (checked: every serial once), the publisher's (SENDs/s, RECEIPT
    p50, p99, CPU seconds) and the consumers' CPU seconds."""
    stats = multiprocessing.get_context("spawn").Queue()
    run = Run(stomp_consumer, [(broker, subscribe_to)] * consumers, stomp_publisher,
              (broker, send_to, total, paced, stats))  # fmt: skip
    try:
        rate, serials, latencies, client_cpu = run.measure(total)
    except BaseException:
        for process in [*run.subscribers, run.publisher]:
            process.kill()
        raise
    check_once(serials, total, f"{broker.name} {'latency' if paced else 'end to end'}")
    if settled is not None:
        settled(total)
    return rate, latencies, (*stats.get(timeout=60), client_cpu)


def bench(broker: Broker, held: str, route, settled, args: argparse.Namespace,
          meter: CpuMeter | None = None) -> dict:  # fmt: skip
    """The three runs; `held` a destination nobody consumes, `route()` a fresh (send to,
    subscribe to, queue) each call, `settled(queue, total)` a check once a run is over."""
    results: dict = {"cpu": {}}
    publishes(broker, held, 1.0, WINDOW)  # warm up
    if meter:
        meter.start()
    one = publishes(broker, held, args.seconds, 1)
    if meter:
        results["cpu"]["publish, one at a time"] = (
            meter.stop(), max(1, round(one["rate"] * args.seconds)), 0.0,
        )  # fmt: skip
    results.update(one=one["rate"], one_p50=one["p50"], one_p99=one["p99"],
                   server=one["server"])  # fmt: skip
    if meter:
        meter.start()
    window = publishes(broker, held, args.seconds, WINDOW)
    results["window"] = window["rate"]
    if meter:
        results["cpu"]["publish, pipelined"] = (
            meter.stop(), max(1, round(window["rate"] * args.seconds)), 0.0,
        )  # fmt: skip

    send_to, subscribe_to, queue = route()
    if meter:
        meter.start()
    results["e2e"], _, (results["e2e_sent"], _, _, publisher_cpu, client_cpu) = clients(
        broker, send_to, subscribe_to, 2, args.messages, False,
        lambda total: settled(queue, total),
    )  # fmt: skip
    results["e2e_publisher_cpu"] = publisher_cpu * 1e6 / args.messages
    results["e2e_consumer_cpu"] = client_cpu * 1e6 / args.messages
    if meter:
        results["cpu"]["end to end"] = (meter.stop(), args.messages, client_cpu)

    send_to, subscribe_to, queue = route()
    total = int(RATE * args.seconds)
    _, seen, (results["sent_rate"], results["receipt_p50"], results["receipt_p99"], *_) = clients(
        broker, send_to, subscribe_to, 1, total, True, lambda total: settled(queue, total)
    )
    results["p50"], results["p99"] = percentiles(seen)
    return results


# -- Xump -------------------------------------------------------------------------------------
def start_stomp_server(service, port: int, directory: Path, routes: bool = False) -> None:
    """`manage.py stomp_server` on `port` with the web process's environment; returns once
    it accepts connections. `routes`: XUMP_STOMP_ROUTES=true (it routes the store itself)."""
    try:
        with socket.create_connection((HOST, port), timeout=1):
            raise SystemExit(f"port {port} is taken already: choose another with --xump-port")
    except OSError:
        pass
    log_path = directory / "stomp.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [PYTHON, "manage.py", "stomp_server"], cwd=ROOT,
            env={**service.env, "XUMP_STOMP_PORT": str(port),
                 "XUMP_STOMP_ROUTES": "true" if routes else "false"},
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    service.processes["stomp"] = process
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            pass
        if process.poll() is not None:
            text = log_path.read_text(errors="replace")
            raise SystemExit(f"the STOMP server exited ({process.returncode}):\n{text[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the STOMP server did not listen on {port}; see {log_path}")
        time.sleep(0.1)


def bench_xump(args: argparse.Namespace, directory: Path) -> dict:
    with worker_service(directory, "--appendfsync", args.appendfsync, shards=args.shards,
                        unix=args.redis_unix) as (service, redis_server):  # fmt: skip
        start_stomp_server(service, args.xump_port, directory / "service", args.stomp_routes)
        broker = Broker("Xump", args.xump_port, "bench", service.admin_token)
        pids = {name: process.pid for name, process in service.processes.items()}
        meter = CpuMeter({**pids, "redis": redis_server.process.pid})

        def queue() -> str:
            name = f"bench-stomp-{uuid.uuid4().hex[:6]}"
            api(service, "POST", "/api/queues", json={"name": name})
            return name

        def route() -> tuple[str, str, str]:
            """A queue whose DELIVER selector feeds a destination the consumers share: named
            `<queue>:out`, read on the queue's own shard, or with --cross-shard
            `<queue>-out`, placed by its own name (on another shard 3 times in 4 with four
            shards: delivered through its delivery queue there)."""
            name = queue()
            out = f"{name}-out" if args.cross_shard else f"{name}:out"
            api(service, "POST", f"/api/queues/{quote(name, safe='')}/selectors", json={
                "when": "always", "action": "deliver", "target": out, "enabled": True,
            })  # fmt: skip
            return f"/queue/{name}", f"/queue/{out}", name

        def settled(name: str, total: int) -> None:
            wait_for_counter(service, [name], "confirmed", total)

        return bench(broker, f"/queue/{queue()}", route, settled, args, meter)


# -- RabbitMQ ---------------------------------------------------------------------------------
def bench_rabbit(args: argparse.Namespace) -> dict | None:
    if not listening(HOST, RABBIT_STOMP):
        return None
    broker = Broker("RabbitMQ", RABBIT_STOMP, "guest", "guest", vhost="/",
                    send_headers=(("persistent", "true"),))  # fmt: skip
    made: list[str] = []
    admin = rabbit_connection()  # AMQP, to declare and delete the bench's queues

    def queue() -> str:
        name = f"xump-stomp-bench-{uuid.uuid4().hex[:6]}"
        admin.channel().queue_declare(name, durable=True)  # as STOMP declares /queue/<name>
        made.append(name)
        return name

    def route() -> tuple[str, str, str]:
        name = queue()
        return f"/queue/{name}", f"/queue/{name}", name

    try:
        return bench(broker, f"/queue/{queue()}", route, lambda name, total: None, args)
    finally:
        for name in made:
            admin.channel().queue_delete(name)
        admin.close()


# -- paced and traced: where a lone message's time goes ----------------------------------------
WARM_UP = 0.5  # seconds of messages a paced run sends first and does not count
HOPS = hops("SEND", "STOMP server", "MESSAGE")


def traced_consumer(broker: Broker, destination: str, total: int, results, ready) -> None:
    """SUBSCRIBE with ack:auto until `total` MESSAGEs came; puts each one's (serial, send
    time, receive time, mid header, xump-trace header) on `results`."""
    seen: list[tuple] = []
    every = threading.Event()
    connection, listener = connect(broker)

    def take(frame) -> None:
        now = time.time()
        text = frame.body
        seen.append((int(text[17:27]), float(text[:17]), now, frame.headers.get("mid"),
                     frame.headers.get(TRACE, "")))  # fmt: skip
        if len(seen) >= total:
            every.set()

    subscribed = threading.Event()
    listener.on_taken = take
    listener.on_receipted = lambda _: subscribed.set()
    connection.subscribe(destination, id="1", ack="auto", headers={"receipt": "subscribed"})
    if not subscribed.wait(WAIT):
        listener.fail("no RECEIPT for SUBSCRIBE")
    ready.set()
    every.wait(600)
    close(connection, listener)
    results.put(("consumer", seen))


def traced_publisher(broker: Broker, destination: str, rate: float, total: int, results,
                     ready, go, traced: bool = True) -> None:  # fmt: skip
    """SEND `total` persistent messages at `rate` a second, each with a receipt (not
    awaited) and the trace header; puts (SENDs/s, [(serial, SEND -> RECEIPT)]) on
    `results`."""
    connection, listener = connect(broker)
    headers = {**dict(broker.send_headers), **({TRACE: "on"} if traced else {})}
    sent: dict[str, float] = {}
    receipted: list[tuple[int, float]] = []
    listener.on_receipted = lambda rid: (
        rid in sent and receipted.append((int(rid), time.perf_counter() - sent.pop(rid)))
    )
    ready.set()
    go.wait()
    started = time.perf_counter()
    for n in range(total):
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent[str(n)] = time.perf_counter()
        connection.send(destination, body(n), headers={**headers, "receipt": str(n)})
    sent_rate = total / (time.perf_counter() - started)
    close(connection, listener)  # its receipt comes after every other
    results.put(("publisher", sent_rate, receipted))


def paced_run(broker: Broker, send_to: str, subscribe_to: str, rate: float,
              seconds: float, traced: bool = True) -> dict:  # fmt: skip
    """The two client processes of a paced run: every MESSAGE seen (checked: each serial
    once), the publisher's rate and its receipts."""
    warm = int(rate * WARM_UP)
    total = warm + int(rate * seconds)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ready_c, ready_p, go = context.Event(), context.Event(), context.Event()
    consumer = context.Process(
        target=traced_consumer, args=(broker, subscribe_to, total, results, ready_c)
    )
    publisher = context.Process(
        target=traced_publisher,
        args=(broker, send_to, rate, total, results, ready_p, go, traced),
    )
    consumer.start()
    publisher.start()
    try:
        if not (ready_c.wait(60) and ready_p.wait(60)):
            raise SystemExit(f"{broker.name}: a client process did not start")
        go.set()
        found = {}
        for _ in range(2):
            kind, *rest = results.get(timeout=seconds + 600)
            found[kind] = rest
    finally:
        for process in (consumer, publisher):
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    seen = found["consumer"][0]
    check_once([serial for serial, *_ in seen], total, f"{broker.name} paced")
    sent_rate, receipted = found["publisher"]
    return {
        "messages": [record for record in seen if record[0] >= warm],
        "receipts": [seconds for serial, seconds in receipted if serial >= warm],
        "sent_rate": sent_rate,
        "counted": total - warm,
        "total": total,
    }


def paced_xump(args: argparse.Namespace, directory: Path) -> dict:
    with worker_service(directory, "--appendfsync", args.appendfsync, shards=args.shards,
                        unix=args.redis_unix) as (service, redis_server):  # fmt: skip
        start_stomp_server(service, args.xump_port, directory / "service", args.stomp_routes)
        broker = Broker("Xump", args.xump_port, "bench", service.admin_token)
        router = f"bench-paced-{uuid.uuid4().hex[:6]}"
        worker = f"{router}-w1"
        api(service, "POST", "/api/patterns", json={
            "kind": "wolfpack", "router": router, "name": worker, "credit": PATTERN_CREDIT,
        })  # fmt: skip
        disk = redis_round_trips(redis_server.url)
        listener = TraceListener(redis_server.url, service.env["XUMP_STORE"])
        listener.start()
        pids = {name: process.pid for name, process in service.processes.items()}
        meter = CpuMeter({**pids, "redis": redis_server.process.pid})
        meter.start()
        stats = redis.Redis.from_url(redis_server.url)
        stats.config_resetstat()
        try:
            run = paced_run(broker, f"/queue/{router}", f"/queue/{worker}", args.paced,
                            args.seconds, not args.untraced)  # fmt: skip
        finally:
            listener.stop()
        # the whole run's CPU (warm-up, start and end of the clients included) over every
        # message sent: how busy each process is at this pace
        run["cpu"] = {name: spent * 1e6 / run["total"] for name, spent in meter.stop().items()}
        run["commands"] = redis_commands(stats, run["total"])
        stats.close()
        if args.untraced:  # the whole path only, as the clients see it
            whole = [client - send for _, send, client, _, _ in run["messages"]]
            run["hops"], run["traced"] = [(HOPS[-1][0], *percentiles(whole))], 0
        else:
            run["hops"], run["traced"] = hop_table(run["messages"], listener.stamps, HOPS)
        run["disk"] = disk
        return run


def arrangement(args: argparse.Namespace) -> str:
    """Who routes and how Redis is reached, as the figures' heading says it."""
    routes = "the STOMP server routing" if args.stomp_routes else "the worker routing"
    return f"{routes}, Redis by {'a unix socket' if args.redis_unix else 'TCP'}"


def redis_commands(client: redis.Redis, total: int) -> list[tuple[str, float, float]]:
    """What Redis ran for the run's messages, from INFO commandstats (reset just before):
    (command, calls a message, microseconds a message), the costliest first. Commands a
    script runs are counted apart from its EVALSHA, whose time includes theirs."""
    found = [
        (name.removeprefix("cmdstat_"), stat["calls"] / total, stat["usec"] / total)
        for name, stat in client.info("commandstats").items()
    ]
    return sorted(found, key=lambda row: -row[2])


def redis_round_trips(url: str, count: int = 500) -> dict[str, tuple[float, float]]:
    """p50/p99 of one client's INCR (a write: with appendfsync always it waits for its
    fsync) and GET on the bench's Redis, just before the paced run: what the disk and the
    machine give a lone write at that moment."""
    client = redis.Redis.from_url(url)
    found: dict[str, tuple[float, float]] = {}
    try:
        for name, command in (("INCR", lambda: client.incr("bench:probe")),
                              ("GET", lambda: client.get("bench:probe"))):  # fmt: skip
            times = []
            for _ in range(count):
                started = time.perf_counter()
                command()
                times.append(time.perf_counter() - started)
            found[name] = percentiles(times)
        client.delete("bench:probe")
    finally:
        client.close()
    return found


def paced_rabbit(args: argparse.Namespace) -> dict | None:
    if not listening(HOST, RABBIT_STOMP):
        return None
    broker = Broker("RabbitMQ", RABBIT_STOMP, "guest", "guest", vhost="/",
                    send_headers=(("persistent", "true"),))  # fmt: skip
    admin = rabbit_connection()
    name = f"xump-stomp-paced-{uuid.uuid4().hex[:6]}"
    admin.channel().queue_declare(name, durable=True)
    try:
        return paced_run(broker, f"/queue/{name}", f"/queue/{name}", args.paced, args.seconds)
    finally:
        admin.channel().queue_delete(name)
        admin.close()


def print_paced(args: argparse.Namespace, xump: dict | None, rabbit: dict | None,
                load_before: str) -> None:  # fmt: skip
    print(f"STOMP paced run ({os.cpu_count()} cores; load average {load_before} before, "
          f"{load()} after): {args.paced:,.0f} persistent SENDs a second for "
          f"{args.seconds:g} s, each with a receipt (not awaited), stomp.py over TCP; "
          f"a consumer with ack:auto")  # fmt: skip
    if xump:
        print(f"  Xump: Redis with appendfsync {args.appendfsync}, 1 uvicorn, 1 Celery worker, "
              f"1 stomp_server, {arrangement(args)}; a wolfpack of one worker ({xump['counted']:,} "
              f"messages counted, {xump['traced']:,} with every stamp; sent at "
              f"{xump['sent_rate']:,.0f}/s)")  # fmt: skip
        (w50, w99), (r50, r99) = xump["disk"]["INCR"], xump["disk"]["GET"]
        print(f"  its Redis just before, one client: INCR (fsync'd) p50 {w50:.3f} / p99 "
              f"{w99:.3f} ms, GET p50 {r50:.3f} / p99 {r99:.3f} ms")  # fmt: skip
        print(f"  {'hop':52} {'p50 ms':>8} {'p99 ms':>8}")
        for label, p50, p99 in xump["hops"]:
            if not args.untraced or label.startswith("SEND -> MESSAGE"):
                print(f"  {label:52} {p50:>8.3f} {p99:>8.3f}")
        p50, p99 = percentiles(xump["receipts"])
        print(f"  {'SEND -> RECEIPT':52} {p50:>8.3f} {p99:>8.3f}")
        print("  (each hop's percentiles are its own: they do not add up to the whole path's)")
        parts = ", ".join(f"{name} {spent:,.0f}" for name, spent in xump["cpu"].items())
        print(f"  Xump CPU us per message at this pace (the run over its messages): {parts}")
        top = ", ".join(f"{name} {calls:.1f} ({usec:.0f} us)"
                        for name, calls, usec in xump["commands"][:8])  # fmt: skip
        print(f"  its Redis, calls a message (their us), costliest first: {top}")
    if rabbit:
        whole = [client - send for _, send, client, _, _ in rabbit["messages"]]
        m50, m99 = percentiles(whole)
        r50, r99 = percentiles(rabbit["receipts"])
        print(f"  RabbitMQ on {HOST}:{RABBIT_STOMP}, durable queue, persistent, same pace and "
              f"client (sent at {rabbit['sent_rate']:,.0f}/s):")  # fmt: skip
        print(f"  {'SEND -> MESSAGE':52} {m50:>8.3f} {m99:>8.3f}")
        print(f"  {'SEND -> RECEIPT':52} {r50:>8.3f} {r99:>8.3f}")
    elif args.only != "xump":
        print(f"  (no STOMP on {HOST}:{RABBIT_STOMP}: RabbitMQ not measured)")


# -- figures ----------------------------------------------------------------------------------
def run_both(
    args: argparse.Namespace,
    on_xump: Callable[[argparse.Namespace, Path], dict],
    on_rabbit: Callable[[argparse.Namespace], dict | None],
    prefix: str,
) -> tuple[dict | None, dict | None]:
    """The figures of the sides `--only` leaves in: Xump's (its servers in a temporary
    directory named from `prefix`), then RabbitMQ's (None when it does not answer)."""
    xump = rabbit = None
    if args.only != "rabbitmq":
        with tempfile.TemporaryDirectory(prefix=prefix) as directory:
            xump = on_xump(args, Path(directory))
    if args.only != "xump":
        rabbit = on_rabbit(args)
    return xump, rabbit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages end to end")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="length of each publish run and of the latency run")  # fmt: skip
    parser.add_argument("--only", choices=("xump", "rabbitmq"), help="run one side only")
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="Xump's XUMP_SHARDS (the cost of sharding a one-queue load)",
    )
    parser.add_argument(
        "--cross-shard",
        action="store_true",
        help="deliver to a destination placed by its own name (with shards, mostly on "
        "another shard than its queue) rather than <queue>:out on the queue's own",
    )
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always",
                        help="Xump's Redis: always (a RECEIPT means on disk, the default) or "
                        "everysec (what the path costs without waiting for the disk)")  # fmt: skip
    parser.add_argument("--xump-port", type=int, default=61713,
                        help="port of the STOMP server the bench starts")  # fmt: skip
    parser.add_argument("--paced", type=float, metavar="RATE",
                        help="only the paced, traced run at RATE SENDs a second: the latency "
                        "of each hop (docs/live-path.md)")  # fmt: skip
    parser.add_argument("--untraced", action="store_true",
                        help="with --paced: SENDs without the trace header, so the path "
                        "is seen without the trace lines' cost (the whole path only)")  # fmt: skip
    parser.add_argument("--redis-unix", action="store_true",
                        help="Xump's processes reach its Redis by a unix socket "
                        "(XUMP_REDIS_URL=unix://...) instead of TCP on 127.0.0.1")  # fmt: skip
    parser.add_argument("--stomp-routes", action="store_true",
                        help="XUMP_STOMP_ROUTES=true: the STOMP server routes the store itself "
                        "(SPEC 11's co-located path) instead of the Celery worker")  # fmt: skip
    args = parser.parse_args()
    load_before = load()
    if args.paced:
        xump, rabbit = run_both(args, paced_xump, paced_rabbit, "xump-stomp-paced-")
        print_paced(args, xump, rabbit, load_before)
        return
    xump, rabbit = run_both(args, bench_xump, bench_rabbit, "xump-stomp-bench-")
    print(f"STOMP bench ({os.cpu_count()} cores; load average {load_before} before, "
          f"{load()} after; client stomp.py {stomp.__version__} over TCP, the same code for "
          f"both)")  # fmt: skip
    if xump:
        print(f"  Xump ({xump['server']}): Redis with appendfsync {args.appendfsync}, "
              f"1 uvicorn, 1 Celery worker, 1 stomp_server on {args.xump_port}, "
              f"{args.shards} shard(s), {arrangement(args)}")  # fmt: skip
    if rabbit:
        print(f"  RabbitMQ ({rabbit['server']}) on {HOST}:{RABBIT_STOMP}: durable queues, "
              f"persistent messages")  # fmt: skip
    print(f"  {'(ratio: Xump / RabbitMQ)':52} {'Xump':>10} {'RabbitMQ':>10} {'ratio':>7}")
    rows = [
        ("SEND with receipt, one at a time (msg/s)", "one", "{:>10,.0f}"),
        ("  SEND -> RECEIPT p50 (ms)", "one_p50", "{:>10.2f}"),
        ("  SEND -> RECEIPT p99 (ms)", "one_p99", "{:>10.2f}"),
        (f"SEND with receipt, {WINDOW:,} awaited at once (msg/s)", "window", "{:>10,.0f}"),
        ("competing consumers end to end, 2 consumers (msg/s)", "e2e", "{:>10,.0f}"),
        ("  its publisher's SENDs (msg/s)", "e2e_sent", "{:>10,.0f}"),
        ("  stomp.py CPU per message: publisher (us)", "e2e_publisher_cpu", "{:>10,.0f}"),
        ("  stomp.py CPU per message: consumers (us)", "e2e_consumer_cpu", "{:>10,.0f}"),
        (f"latency p50 at {RATE:,} msg/s, send -> MESSAGE (ms)", "p50", "{:>10.1f}"),
        (f"latency p99 at {RATE:,} msg/s, send -> MESSAGE (ms)", "p99", "{:>10.1f}"),
        ("  its SEND -> RECEIPT p50 (ms)", "receipt_p50", "{:>10.2f}"),
        ("  its SEND -> RECEIPT p99 (ms)", "receipt_p99", "{:>10.2f}"),
        ("  its rate actually sent (msg/s)", "sent_rate", "{:>10,.0f}"),
    ]
    for label, key, shape in rows:
        ours = shape.format(xump[key]) if xump else f"{'-':>10}"
        theirs = shape.format(rabbit[key]) if rabbit else f"{'-':>10}"
        ratio = f"{xump[key] / rabbit[key]:>7.2f}" if xump and rabbit and rabbit[key] else ""
        print(f"  {label:52} {ours} {theirs} {ratio:>7}")
    if rabbit is None and args.only != "xump":
        print(f"  (no STOMP on {HOST}:{RABBIT_STOMP}: `rabbitmq-plugins enable rabbitmq_stomp`; "
              f"RabbitMQ's column is empty)")  # fmt: skip
    print(f"  end to end: {args.messages:,} messages of 100 bytes, SENDs without receipts, "
          f"2 consumers")  # fmt: skip
    print(f"  ACKing each MESSAGE (prefetch {PREFETCH:,}); every message of the end to end and "
          f"latency runs")  # fmt: skip
    print("  arrived exactly once (checked by serial number)")
    if xump:
        print("  Xump had also applied every ACK when each run ended (confirmed = N, nothing "
              "outstanding)")  # fmt: skip
    for run, (spent, count, clients_cpu) in (xump or {}).get("cpu", {}).items():
        parts = ", ".join(f"{name} {seconds * 1e6 / count:.0f}" for name, seconds in spent.items())
        extra = f", consumers {clients_cpu * 1e6 / count:.0f}" if clients_cpu else ""
        print(f"  Xump CPU us per message, {run}: {parts}{extra}")


if __name__ == "__main__":
    main()
