"""/metrics (xumpweb/metrics.py) scraped as Prometheus scrapes it and read with
prometheus_client's own text parser: after known traffic (HTTP publishes, a WebSocket
subscriber acking part of its deliveries) routed by two Celery worker processes one after
the other, the figures equal the API's stats, the requests counted equal the requests sent,
and the router's batches of both workers add up. Who may read it: a token with the metrics
right or an admin (401 / 403 otherwise); with XUMP_METRICS_ADDRESS, open on that bind."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port
from tests.web.conftest import ROOT, start_service, unique
from tests.web.test_subscribe import Xump, send, session_cookie, subscribe, take, wait_for


@pytest.fixture(scope="module")
def metered(redis_server, tmp_path_factory):
    """Worker routing, every process writing its metrics to one directory (as `make run`
    sets it up), and the metrics open on a bind of their own as well."""
    directory = tmp_path_factory.mktemp("metrics")
    address = f"127.0.0.1:{free_port()}"
    running = start_service(
        redis_server.url, directory, "worker",
        PROMETHEUS_MULTIPROC_DIR=str(directory / "prometheus"), XUMP_METRICS_ADDRESS=address,
    )  # fmt: skip
    running.metrics_address = address  # type: ignore[attr-defined]
    running.start_worker("first")
    yield running
    running.close()


@pytest.fixture(scope="module")
def xump(metered):
    found = Xump(metered)
    yield found
    found.close()


def token(service, rights: dict) -> str:
    with service.client() as admin:
        answer = admin.post("/api/tokens", json={"name": "metrics-test", "rights": rights})
    assert answer.status_code == 201, answer.text
    return answer.json()["secret"]


def scrape(service, secret: str) -> dict[str, dict[tuple, float]]:
    """/metrics, parsed: sample name -> {sorted label items: value}."""
    answer = httpx.get(
        service.url + "/metrics", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return parse(answer.text)


def parse(text: str) -> dict[str, dict[tuple, float]]:
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def one(figures: dict, name: str, **labels: str) -> float | None:
    return figures.get(name, {}).get(tuple(sorted(labels.items())))


def publish(service, queue: str, count: int) -> None:
    with service.client() as program:
        for n in range(count):
            answer = program.post(f"/api/queues/{quote(queue, safe='')}/publish",
                                  json={"body": f"m{n}"})  # fmt: skip
            assert answer.status_code == 202, answer.text


QUEUE_FIGURES = {
    "xump_queue_depth": "depth", "xump_queue_history_size": "history_size",
    "xump_queue_outstanding": "outstanding", "xump_queue_published_total": "published",
    "xump_queue_routed_total": "routed", "xump_queue_delivered_total": "delivered",
    "xump_queue_confirmed_total": "confirmed", "xump_queue_dropped_total": "dropped",
    "xump_queue_dead_lettered_total": "dead_lettered", "xump_queue_expired_total": "expired",
    "xump_queue_timed_out_total": "timed_out", "xump_queue_recalled_total": "recalled",
}  # fmt: skip


def api_stats(service, queue: str) -> dict:
    """GET /api/queues/<queue>/stats."""
    with service.client() as program:
        answer = program.get(f"/api/queues/{quote(queue, safe='')}/stats")
    assert answer.status_code == 200, answer.text
    return answer.json()


def matches_stats(figures: dict, queue: str, stats: dict) -> bool:
    return all(one(figures, name, queue=queue) == stats.get(key, 0)
               for name, key in QUEUE_FIGURES.items())  # fmt: skip


def test_metrics_match_the_api_after_traffic_routed_by_two_workers(metered, xump) -> None:
    secret = token(metered, {"*": ["metrics"]})
    queue, destination, waiting = unique(), unique("d"), unique("w")
    xump.deliver(queue, destination, history=100)
    xump.call("queue_create", name=waiting)  # no selector: its messages wait
    before = scrape(metered, secret)
    applied_before = one(before, "xump_router_batch_size_sum") or 0

    with subscribe(metered, destination) as socket:
        send(socket, {"type": "credit", "n": 10})
        publish(metered, queue, 10)  # routed by the first worker
        delivered = take(socket, 10)
        send(socket, {"type": "ack", "tags": [d["tag"] for d in delivered[:6]]})
        stats = wait_for(
            lambda: (s := api_stats(metered, queue))["confirmed"] == 6 and s, within=30
        )
        assert stats, "the acks did not reach the router"
        first = scrape(metered, secret)
        routed_by_first = one(first, "xump_router_batch_size_sum") - applied_before
        assert routed_by_first >= 10 + 1  # the publishes and the ack

        metered.start_worker("second")
        metered.stop("first")  # its figures stay in /metrics; its live gauges go
        started = time.time()
        publish(metered, queue, 5)  # routed by the second worker
        publish(metered, waiting, 3)
        stats = wait_for(
            lambda: (s := api_stats(metered, queue))["outstanding"] == 9 and s, within=30
        )
        assert stats, "the second worker did not route"

        # the snapshot is written every 0.5 s and the subscribers sampled every second
        def settled() -> tuple[dict, dict] | None:
            figures, stats = scrape(metered, secret), api_stats(metered, queue)
            good = (
                matches_stats(figures, queue, stats)
                and one(figures, "xump_destination_in_flight", destination=destination) == 4
                and one(figures, "xump_queue_depth", queue=waiting) == 3
            )
            return (figures, stats) if good else None

        found = wait_for(settled, within=30, every=0.3)
        assert found, "/metrics never agreed with the API's stats"
        scraped = time.time()
    figures, stats = found
    assert stats["published"] == 15 and stats["confirmed"] == 6 and stats["outstanding"] == 9

    # the subscriber: one connection, no credit left, 4 delivered and not acked
    assert one(figures, "xump_destination_subscribers", destination=destination) == 1
    assert one(figures, "xump_destination_credit", destination=destination) == 0
    # the waiting queue: its oldest message's age is no more than since it was published
    age = one(figures, "xump_queue_oldest_unprocessed_age_seconds", queue=waiting)
    assert 0 < age <= scraped - started
    assert one(figures, "xump_queue_oldest_unprocessed_age_seconds", queue=queue) == 0

    # every publish counted once, on the direct path's route, as 202
    publishes = one(figures, "xump_http_requests_total", route="api-publish", method="POST",
                    status="202")  # fmt: skip
    assert publishes == 18
    assert one(figures, "xump_http_request_duration_seconds_count", route="api-publish") == 18
    assert one(figures, "xump_websocket_connections_total", kind="subscribe") == 1
    assert one(figures, "xump_websocket_frames_total", kind="subscribe", type="ack") == 1
    assert one(figures, "xump_websocket_frames_total", kind="subscribe", type="credit") == 1

    # the router's batches: both workers' (the first has ended; its counts stay)
    applied = one(figures, "xump_router_batch_size_sum") - applied_before
    assert applied >= routed_by_first + 5 + 3
    assert one(figures, "xump_router_batch_duration_seconds_count") == one(
        figures, "xump_router_batch_size_count")  # fmt: skip
    assert one(figures, "xump_router_lease_handovers_total") >= 2
    assert one(figures, "xump_router_lease_fence_total") >= 2

    # the service's health, the inbox
    assert one(figures, "xump_redis_up") == 1 and one(figures, "xump_redis_writable") == 1
    assert one(figures, "xump_database_up") == 1
    assert one(figures, "xump_inbox_length") is not None


def test_only_the_metrics_right_or_an_admin_reads_metrics(metered) -> None:
    url = metered.url + "/metrics"
    assert httpx.get(url).status_code == 401
    unknown = httpx.get(url, headers={"Authorization": "Bearer xump_nope_nope"})
    assert unknown.status_code == 401 and unknown.json()["error"] == "unauthorized"
    reader = token(metered, {"*": ["read", "publish", "consume"]})
    refused = httpx.get(url, headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    with metered.client(reader) as program:  # nobody gives a right they do not hold
        minted = program.post("/api/tokens", json={"name": "x", "rights": {"*": ["metrics"]}})
    assert minted.status_code == 403, minted.text
    narrow = token(metered, {"orders*": ["metrics"]})  # every queue's figures: '*' only
    assert httpx.get(url, headers={"Authorization": f"Bearer {narrow}"}).status_code == 403
    # the admin token (manage on '*') and an admin's session may
    assert "xump_redis_up" in scrape(metered, metered.admin_token)
    admin = httpx.get(url, headers={"Cookie": session_cookie(metered)})
    assert admin.status_code == 200 and "xump_database_up" in parse(admin.text)


def test_the_separate_bind_serves_metrics_to_anyone(metered) -> None:
    answer = httpx.get(f"http://{metered.metrics_address}/metrics", timeout=30)
    assert answer.status_code == 200
    figures = parse(answer.text)
    assert one(figures, "xump_redis_up") == 1
    assert "xump_http_requests_total" in figures


def test_the_grafana_dashboard_uses_metrics_the_service_exposes(metered, xump) -> None:
    board = json.loads((ROOT / "docs" / "grafana-xump.json").read_text())
    used = {
        re.sub(r"_(bucket|sum|count|total)$", "", name)
        for panel in board["panels"]
        for target in panel["targets"]
        for name in re.findall(r"xump_\w+", target["expr"])
    }
    assert len(used) >= 25

    def missing() -> set[str]:
        answer = httpx.get(f"http://{metered.metrics_address}/metrics", timeout=30)
        return used - {family.name for family in text_string_to_metric_families(answer.text)}

    # traffic of its own (the families of a subscriber's gauges and of frames show once
    # there is one), so the test does not depend on the tests run before it
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(metered, destination) as socket:
        send(socket, {"type": "credit", "n": 1})
        publish(metered, queue, 1)
        (delivered,) = take(socket, 1)
        send(socket, {"type": "ack", "tags": [delivered["tag"]]})
        assert wait_for(lambda: not missing(), within=30, every=0.3), missing()


def test_without_a_metrics_directory_the_serving_process_counts(service) -> None:
    """Inline routing, one process, no PROMETHEUS_MULTIPROC_DIR: that process's figures."""
    queue = unique()
    with service.client() as admin:
        assert admin.post("/api/queues", json={"name": queue}).status_code == 201
    publish(service, queue, 3)

    def published() -> dict | None:
        figures = scrape(service, service.admin_token)
        return figures if one(figures, "xump_queue_depth", queue=queue) == 3 else None

    figures = wait_for(published, within=30, every=0.3)
    assert figures, "the queue's figures never showed"
    assert one(figures, "xump_queue_published_total", queue=queue) == 3
    assert one(figures, "xump_router_batch_size_count") >= 1
    assert one(figures, "process_cpu_seconds_total") is not None


def test_a_second_web_process_counts_until_it_is_killed(metered) -> None:
    """Subscribers of another web process show in this one's /metrics (one metrics
    directory); once it is killed (kill -9, no chance to say so) its live gauges go."""
    secret = token(metered, {"*": ["metrics"]})
    elsewhere = metered.start_web("second-web")
    second = elsewhere.processes["server"]
    try:
        destination = unique("d")
        with subscribe(elsewhere, destination) as socket:
            send(socket, {"type": "credit", "n": 7})

            def counted() -> bool:
                figures = scrape(metered, secret)  # the first web process answers
                return (
                    one(figures, "xump_destination_subscribers", destination=destination) == 1
                    and one(figures, "xump_destination_credit", destination=destination) == 7
                )

            assert wait_for(counted, within=30, every=0.3)
            second.kill()
            second.wait()
        figures = scrape(metered, secret)
        assert one(figures, "xump_destination_subscribers", destination=destination) is None
        assert one(figures, "xump_destination_credit", destination=destination) is None
    finally:
        elsewhere.stop("server", kill=True)
