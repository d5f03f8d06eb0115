"""SPEC §11's co-located path in the web process: with XUMP_WEB_ROUTES=true (worker routing,
one shard) the ASGI server routes the store while it runs, as the STOMP server does with
XUMP_STOMP_ROUTES (tests/web/test_colocated_routing.py): its HTTP and WebSocket publishes
and acks are stepped on its event loop and committed there, with no inbox append. Workers
take routing over when it stops or dies; a 202 still means durable.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.web.conftest import Service, eventually, start_service, unique
from tests.web.test_colocated_routing import holder, inbox_pushes, worker_routes

pytestmark = pytest.mark.slow
ROUTES = {"XUMP_WEB_ROUTES": "true"}


@pytest.fixture(scope="module")
def service(redis_server, tmp_path_factory) -> Iterator[Service]:
    """The service with a Celery worker routing, on the session's redis-server."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("webrouting"), "worker")
    running.start_worker()
    yield running
    running.close()


def web_routes(service: Service) -> bool:
    return holder(service).startswith("web@")


def waiting_bodies(service: Service, queue: str) -> list[str]:
    with service.client() as http:
        answer = http.get(f"/api/queues/{queue}/waiting", params={"limit": 1000})
        return [message["body"] for message in answer.json()["messages"]]


def test_the_web_process_routes_its_publishes_and_a_worker_takes_over_when_it_stops(
    service,
) -> None:
    eventually(lambda: worker_routes(service), "the worker routing", within=120)
    web = service.start_web("web-routing", **ROUTES)
    try:
        eventually(lambda: web_routes(service), "the web process taking the lease", within=60)
        queue = unique("wr")
        with web.client() as http:
            assert http.post("/api/queues", json={"name": queue}).status_code == 201

            def publish() -> None:
                for n in range(5):
                    answer = http.post(f"/api/queues/{queue}/publish", json={"body": f"m{n}"})
                    assert answer.status_code == 202

            assert inbox_pushes(service, publish) == []  # stepped where they arrived
        # published means durable and routed: in the queue already, nothing in the inbox
        assert waiting_bodies(service, queue) == [f"m{n}" for n in range(5)]
    finally:
        web.stop("server")  # SIGTERM: it lets the lease go on its way out
    eventually(lambda: worker_routes(service), "a worker taking the lease over", within=60)
    with service.client() as http:
        assert http.post(f"/api/queues/{queue}/publish", json={"body": "after"}).status_code == 202
    eventually(lambda: waiting_bodies(service, queue)[-1:] == ["after"], "routed by the worker",
               within=60)  # fmt: skip


def test_a_killed_web_router_loses_nothing_it_answered(service) -> None:
    """kill -9 of the routing web process: every publish it answered 202 is in its queue,
    once, after a worker takes the lease over (no beat runs here)."""
    web = service.start_web("web-killed", **ROUTES)
    eventually(lambda: web_routes(service), "the web process taking the lease", within=60)
    queue = unique("wk")
    answered = []
    with web.client() as http:
        assert http.post("/api/queues", json={"name": queue}).status_code == 201
        for n in range(50):
            if http.post(f"/api/queues/{queue}/publish", json={"body": f"m{n}"}).status_code == 202:
                answered.append(f"m{n}")
    web.stop("server", kill=True)
    eventually(lambda: worker_routes(service), "a worker taking the lease over", within=60)
    bodies = waiting_bodies(service, queue)
    assert bodies == answered
