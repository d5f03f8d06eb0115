"""Prometheus metrics: `/metrics` on the web server, or open on a bind of its own.

Theory of operation (docs/metrics.md says more). Two kinds of figures, gathered two ways:

* **The queues' own figures** (depth, history size, outstanding, the counters, the oldest
  unprocessed message's age), the inbox, the lease, Redis's and the database's health are
  read at scrape time by `XumpCollector`: the router already writes every queue's stats to
  Redis twice a second (runtime.Router._snapshot, the console's live feed reads the same),
  so a scrape costs one pipelined Redis read whichever process routes, and the figures are
  the engine's own, not a second count that could drift from them.
* **What a process sees of its own work** (HTTP and WebSocket requests and their latency,
  the router's batches while this process routes, lease acquisitions, the subscribers it
  serves) goes into prometheus_client metrics. With several processes (uvicorn, Celery
  workers) these use prometheus_client's multiprocess mode: PROMETHEUS_MULTIPROC_DIR names a
  directory shared by every process of the host (scripts/run.sh sets var/metrics and empties
  it at start), each process writes its values to memory-mapped files there, and the scrape
  sums them. Gauges count live processes only: a process that ends marks itself dead (atexit,
  Celery's worker_process_shutdown), and a scrape marks dead any whose pid is gone (kill -9).
  Without that directory the figures are the serving process's own.

The router counts per batch (one histogram observation per step), never per message, and a
subscriber's gauges are sampled once a second from its connections, not updated per delivery.
"""

from __future__ import annotations

import atexit
import glob
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from django.conf import settings
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

logger = logging.getLogger("xump.metrics")

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
if MULTIPROCESS:  # the metrics below open their files there as they are made
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
SAMPLE_EVERY = 1.0  # seconds between samples of the subscribers' gauges
QUEUE_COUNTERS = ("published", "routed", "delivered", "confirmed", "rejected",
                  "dead_lettered", "dropped", "expired", "timed_out", "recalled")  # fmt: skip
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
FRAME_TYPES = frozenset({"auth", "heartbeat", "credit", "ack", "reject", "publish"})
_live = {"multiprocess_mode": "livesum"}

# -- what each process counts --------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "xump_http_requests", "HTTP requests answered", ["route", "method", "status"]
)
HTTP_DURATION = Histogram(
    "xump_http_request_duration_seconds",
    "HTTP request time, from the request to the last byte of the answer",
    ["route"],
)
WS_CONNECTIONS = Counter("xump_websocket_connections", "WebSocket connections opened", ["kind"])
WS_FRAMES = Counter(
    "xump_websocket_frames", "WebSocket frames received from clients", ["kind", "type"]
)
WS_DURATION = Histogram(
    "xump_websocket_frame_duration_seconds",
    "time to handle a client's WebSocket frame",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
STOMP_CONNECTIONS = Counter("xump_stomp_connections", "STOMP connections opened", ["transport"])
STOMP_ACTIONS = Counter(
    "xump_stomp_actions",
    "what STOMP clients' frames asked for (Publish, Subscribe, Settle, ...)",
    ["transport", "action"],
)
STOMP_DURATION = Histogram(
    "xump_stomp_input_duration_seconds",
    "time to carry out what one read of a STOMP client's input asked for (a publish: until "
    "handed to the group commit)",
    ["transport"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
SUBSCRIBERS = Gauge(
    "xump_destination_subscribers",
    "subscribers connected (WebSocket and STOMP subscriptions)",
    ["destination"],
    **_live,
)
CREDIT = Gauge(
    "xump_destination_credit",
    "credit the destination's subscribers have open (deliveries they will take now)",
    ["destination"],
    **_live,
)
IN_FLIGHT = Gauge(
    "xump_destination_in_flight",
    "deliveries sent to the destination's subscribers and not settled yet",
    ["destination"],
    **_live,
)
ROUTER_BATCH = Histogram(
    "xump_router_batch_size",
    "commands the router applied in one step",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500),
)
ROUTER_LATENCY = Histogram(
    "xump_router_batch_duration_seconds",
    "time the router took for one step (engine calls and the atomic Redis commit)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
LEASE_ACQUIRED = Counter("xump_router_lease_acquisitions", "times a router took the store's lease")
LEASE_HANDOVERS = Counter(
    "xump_router_lease_handovers",
    "times a router took the lease after another process held it (it rebuilt its engine)",
)


# -- the router (runtime.py, given these by router/apps.py: runtime.py does not import us) --
def router_step(commands: int, seconds: float) -> None:
    ROUTER_BATCH.observe(commands)
    ROUTER_LATENCY.observe(seconds)


def lease_taken(handover: bool) -> None:
    LEASE_ACQUIRED.inc()
    if handover:
        LEASE_HANDOVERS.inc()


# -- HTTP (asgi.py) --------------------------------------------------------------------------
_PUBLISH = re.compile(r"/api/queues/.+/(publish|publish-batch)")
_SECTIONS = ("api", "static", "admin", "analytics", "ws")


def route_of(path: str) -> str:
    """The HTTP metrics' `route` label: a handful of values, never a queue name."""
    if path == "/metrics":
        return "metrics"
    found = _PUBLISH.fullmatch(path)
    if found is not None:
        return "api-" + found[1]
    section = path.split("/", 2)[1] if path.count("/") >= 1 else ""
    return section if section in _SECTIONS else "console"


class HttpMetrics:
    """ASGI: counts every HTTP request and times it, the direct publish path's too."""

    def __init__(self, app: ASGI3Application) -> None:
        self.app = app

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        started = time.perf_counter()
        status = 0

        async def sending(event: dict[str, Any]) -> None:
            nonlocal status
            if event["type"] == "http.response.start":
                status = event["status"]
            await send(event)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = route_of(scope.get("path", ""))
            method = scope.get("method", "")
            HTTP_REQUESTS.labels(
                route, method if method in METHODS else "other", str(status or "none")
            ).inc()
            HTTP_DURATION.labels(route).observe(time.perf_counter() - started)


# -- WebSockets (live/consumers.py) ----------------------------------------------------------
def websocket_opened(kind: str) -> None:
    WS_CONNECTIONS.labels(kind).inc()


_frame_children: dict[tuple[str, str], tuple[Any, Any]] = {}


def websocket_frame(kind: str, frame_type: str, seconds: float) -> None:
    # the labelled children looked up once: `labels()` per frame was 8% of a publishing
    # connection's CPU (a publish frame is about 50 us of work)
    if frame_type not in FRAME_TYPES:
        frame_type = "other"
    found = _frame_children.get((kind, frame_type))
    if found is None:
        found = _frame_children[kind, frame_type] = (
            WS_FRAMES.labels(kind, frame_type), WS_DURATION.labels(kind)
        )  # fmt: skip
    found[0].inc()
    found[1].observe(seconds)


def stomp_connected(transport: str) -> None:
    STOMP_CONNECTIONS.labels(transport).inc()


_stomp_children: dict[tuple[str, str], Any] = {}


def stomp_actions(transport: str, counts: dict[str, int], seconds: float) -> None:
    """The actions one batch of a STOMP client's input asked for (by kind), and the time
    carrying them out took."""
    for action, count in counts.items():
        found = _stomp_children.get((transport, action))
        if found is None:
            found = _stomp_children[transport, action] = STOMP_ACTIONS.labels(transport, action)
        found.inc(count)
    STOMP_DURATION.labels(transport).observe(seconds)


_subscribers: weakref.WeakSet = weakref.WeakSet()
_sampler: threading.Thread | None = None
_sampler_lock = threading.Lock()


def subscriber_joined(connection: Any) -> None:
    """A subscriber connection (`destination`, `credit`, `unsettled`, `stopping`) to
    sample until it stops; starts this process's sampler."""
    global _sampler
    with _sampler_lock:
        _subscribers.add(connection)
        if _sampler is None:
            _sampler = threading.Thread(target=_sample, name="xump-metrics", daemon=True)
            _sampler.start()


def sample_subscribers(seen: set[str]) -> set[str]:
    """Set the destination gauges from the live connections (0 for destinations `seen`
    last time and gone now); the destinations seen now."""
    found: dict[str, list[int]] = {}
    with _sampler_lock:  # the event loop's thread adds connections meanwhile
        connections = list(_subscribers)
    for connection in connections:
        if getattr(connection, "stopping", True):
            continue
        figures = found.setdefault(connection.destination, [0, 0, 0])
        figures[0] += 1
        figures[1] += max(0, connection.credit)
        figures[2] += len(connection.unsettled)
    for destination in seen - set(found):
        found[destination] = [0, 0, 0]
    for destination, (count, credit, in_flight) in found.items():
        SUBSCRIBERS.labels(destination).set(count)
        CREDIT.labels(destination).set(credit)
        IN_FLIGHT.labels(destination).set(in_flight)
    return {destination for destination, figures in found.items() if figures[0]}


def _sample() -> None:
    seen: set[str] = set()
    while True:
        try:
            seen = sample_subscribers(seen)
        except Exception:  # never let the sampler die: the gauges would freeze
            logger.exception("cannot sample the subscribers' gauges")
        time.sleep(SAMPLE_EVERY)


# -- processes --------------------------------------------------------------------------------
def mark_dead(pid: int | None = None) -> None:
    """This process (or `pid`) is gone: its gauges stop counting (multiprocess mode)."""
    if MULTIPROCESS:
        multiprocess.mark_process_dead(os.getpid() if pid is None else pid)


def _mark_the_gone() -> None:
    """Processes killed without marking themselves dead: their live gauges go."""
    directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    pids = set()
    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        try:
            pids.add(int(path.rsplit("_", 1)[1].removesuffix(".db")))
        except ValueError:
            continue
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid)
        except PermissionError:
            pass  # alive, someone else's


if MULTIPROCESS:
    atexit.register(mark_dead)


# -- what the scrape reads from Redis and the database -----------------------------------------
class XumpCollector(Collector):
    """The queues' figures from the router's snapshot, and the health of what Xump needs."""

    def collect(self) -> Iterator[Metric]:
        from xumpweb.runtime import service

        found = service()
        now = time.time()
        up = GaugeMetricFamily("xump_redis_up", "1 when Redis answers")
        try:
            snapshot = found.snapshot()
            pipe = found.redis.pipeline(transaction=False)
            fence_key = found.keys["lease"].removesuffix("lease") + "fence"
            pipe.get(found.keys["lease"]).get(fence_key).llen(found.keys["errors"])
            lease, fence, refused = pipe.execute()
            health = found.health()
        except Exception as problem:  # Redis away: say so, and what else we know
            logger.warning("metrics: cannot read Redis: %s", problem)
            up.add_metric([], 0)
            yield up
            yield from _shards()
            yield from _database()
            return
        up.add_metric([], 1)
        yield up
        yield from _queues(snapshot, now)
        yield _gauge("xump_inbox_length", "commands waiting in the store's inbox for the router",
                     snapshot.get("inbox", 0))  # fmt: skip
        yield _gauge("xump_refused_commands", "commands the router refused, kept for the console",
                     refused)  # fmt: skip
        taken = snapshot.get("time")
        if taken is not None:
            yield _gauge("xump_snapshot_age_seconds",
                         "age of the router's latest stats snapshot (written every 0.5 s "
                         "while it routes)", max(0.0, now - taken))  # fmt: skip
        holder = GaugeMetricFamily(
            "xump_router_lease_holder", "1 for the router holding the lease", labels=["holder"]
        )
        if lease:
            holder.add_metric([lease.decode().split("#")[0]], 1)
        yield holder
        yield CounterMetricFamily(
            "xump_router_lease_fence",
            "the lease's fencing number: goes up by one each time a router takes the lease",
            value=int(fence or 0),
        )
        redis_report = health.get("redis", {})
        yield _gauge("xump_redis_writable", "1 when Redis takes writes (not full, not "
                     "read-only)", 1 if redis_report.get("ok") else 0)  # fmt: skip
        durable = health.get("durability", {}).get("durable")
        if durable is not None:
            yield _gauge("xump_redis_durable", "1 with appendonly yes and appendfsync always",
                         1 if durable else 0)  # fmt: skip
        workers = health.get("workers", {})
        yield _gauge("xump_workers", "Celery workers whose heartbeat is current",
                     len(workers.get("workers", [])))  # fmt: skip
        yield from _shards()
        yield from _database()


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _queues(snapshot: dict[str, Any], now: float) -> Iterator[Metric]:
    gauges = {
        "depth": GaugeMetricFamily("xump_queue_depth", "messages waiting to be routed",
                                   labels=["queue"]),
        "history_size": GaugeMetricFamily("xump_queue_history_size",
                                          "messages kept in the queue's history",
                                          labels=["queue"]),
        "outstanding": GaugeMetricFamily("xump_queue_outstanding",
                                         "deliveries out and not settled", labels=["queue"]),
        "limit": GaugeMetricFamily("xump_queue_limit", "the queue's limit (queues that have "
                                   "one)", labels=["queue"]),
        "oldest": GaugeMetricFamily("xump_queue_oldest_unprocessed_age_seconds",
                                    "age of the oldest message waiting to be routed (0 when "
                                    "none waits)", labels=["queue"]),
    }  # fmt: skip
    counters = {
        key: CounterMetricFamily(f"xump_queue_{key}", f"messages {key.replace('_', ' ')} "
                                 "(the engine's counter)", labels=["queue"])
        for key in QUEUE_COUNTERS
    }  # fmt: skip
    for queue in snapshot.get("queues", []):
        name = queue["name"]
        for key in ("depth", "history_size", "outstanding"):
            gauges[key].add_metric([name], queue.get(key, 0))
        if queue.get("limit") is not None:
            gauges["limit"].add_metric([name], queue["limit"])
        oldest = queue.get("oldest")
        age = max(0.0, now - oldest) if oldest is not None and queue.get("depth") else 0.0
        gauges["oldest"].add_metric([name], age)
        stats = queue.get("stats", {})
        for key, family in counters.items():
            family.add_metric([name], stats.get(key, 0))
    yield from gauges.values()
    yield from counters.values()


def _shards() -> Iterator[Metric]:
    """Each shard's figures (shard_status.py), labelled `shard`; with one shard, the one
    store's (the same figures as the unlabelled xump_inbox_length and
    xump_router_lease_holder, kept for the dashboards built on them)."""
    from xumpweb.shard_status import shard_statuses

    try:
        statuses = shard_statuses()
    except Exception as problem:  # the database away: xump_database_up says so
        logger.warning("metrics: cannot read the shards: %s", problem)
        return
    up = GaugeMetricFamily("xump_shard_up", "1 when the shard's Redis keys can be read",
                           labels=["shard"])  # fmt: skip
    queues = GaugeMetricFamily("xump_shard_queues", "queues the wiring places on the shard",
                               labels=["shard"])  # fmt: skip
    inbox = GaugeMetricFamily("xump_shard_inbox_length", "commands waiting in the shard's "
                              "inbox for its router", labels=["shard"])  # fmt: skip
    forward = GaugeMetricFamily("xump_shard_forward_backlog", "messages in the shard's "
                                "forward list, waiting to be carried to another shard",
                                labels=["shard"])  # fmt: skip
    holder = GaugeMetricFamily("xump_shard_router_lease_holder", "1 for the router holding "
                               "the shard's lease", labels=["shard", "holder"])  # fmt: skip
    steps = GaugeMetricFamily("xump_shard_router_steps_per_second", "routing steps per "
                              "second of the shard's router (its latest snapshot)",
                              labels=["shard"])  # fmt: skip
    for shard in statuses:
        name = shard["name"]
        up.add_metric([name], 1 if shard["ok"] else 0)
        queues.add_metric([name], shard["queues"])
        if not shard["ok"]:
            continue
        inbox.add_metric([name], shard["inbox"])
        forward.add_metric([name], shard["forward_backlog"])
        if shard["routed_by"] is not None:
            holder.add_metric([name, shard["routed_by"]], 1)
        if shard["steps_per_second"] is not None:
            steps.add_metric([name], shard["steps_per_second"])
    yield from (up, queues, inbox, forward, holder, steps)


def _database() -> Iterator[Metric]:
    from django.db import close_old_connections, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        ok = 1
    except Exception as problem:
        logger.warning("metrics: the database does not answer: %s", problem)
        ok = 0
    finally:
        close_old_connections()
    yield _gauge("xump_database_up", "1 when the database answers", ok)


def registry() -> CollectorRegistry:
    """What a scrape reads: every process's metrics (multiprocess mode) or this one's, and
    the queues' figures."""
    if MULTIPROCESS:
        _mark_the_gone()
        found = CollectorRegistry()
        multiprocess.MultiProcessCollector(found)
    else:
        found = CollectorRegistry()
        found.register(_ProcessMetrics())
    found.register(XumpCollector())
    return found


class _ProcessMetrics(Collector):
    """The default registry's metrics (this process's own, and its process_* figures)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def exposition() -> tuple[bytes, str]:
    """The text a scrape answers, and its content type."""
    return generate_latest(registry()), CONTENT_TYPE_LATEST


# -- serving -----------------------------------------------------------------------------------
def view(request: Any) -> Any:
    """GET /metrics: for a token with the `metrics` right, or an admin (access.py)."""
    from django.http import HttpResponse

    from xumpweb import access
    from xumpweb.api.auth import find_token, mark_used
    from xumpweb.api.errors import error_response

    header = request.headers.get("Authorization")
    if header:
        scheme, _, presented = header.partition(" ")
        token = find_token(presented.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            return error_response(401, "unauthorized", "unknown or revoked token")
        mark_used(token)
        principal = access.for_token(token)
    else:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return error_response(
                401, "unauthorized", "send a token with the metrics right (Bearer), or log in"
            )
        principal = access.for_user(user)
    if request.method not in ("GET", "HEAD"):
        return error_response(405, "method_not_allowed", "GET /metrics")
    if not access.may(principal, "metrics"):
        return error_response(
            403, "forbidden", "reading the metrics needs the metrics right on '*' or an admin"
        )
    content, content_type = exposition()
    return HttpResponse(content, content_type=content_type)


_served: Any = None


def serve_separately() -> None:
    """XUMP_METRICS_ADDRESS (host:port): the metrics, open to anyone who reaches that bind,
    from a thread of this process (once per process; a second process finding the port
    taken leaves it to the first)."""
    global _served
    address = settings.XUMP_METRICS_ADDRESS
    if not address or _served is not None:
        return
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    try:
        _served = start_http_server(int(port), host or "0.0.0.0", registry=_Scrape())
    except OSError as problem:
        logger.warning("metrics: cannot serve on %s (%s); another process may", address, problem)
        return
    logger.info("metrics served on http://%s/metrics", address)


class _Scrape(CollectorRegistry):
    """A registry that gathers `registry()` afresh at every scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from registry().collect()
