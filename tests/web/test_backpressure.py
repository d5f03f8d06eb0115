"""Back-pressure: past XUMP_INBOX_LIMIT commands waiting for the router, publishes answer
503 inbox_full with Retry-After; a Redis at maxmemory answers 503 store_full. Nothing
answered 202 is lost, nothing refused is stored, and publishing works again once there is
room."""

from __future__ import annotations

import time

import pytest
import redis

from tests.web.conftest import service_with_own_redis, start_service, unique


def wait_for(condition, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def bodies(client, queue: str) -> list[str]:
    answer = client.get(f"/api/queues/{queue}/waiting", params={"count": 1000})
    return [m["body"] for m in answer.json()["messages"]] if answer.status_code == 200 else []


@pytest.fixture
def bounded(redis_server, tmp_path):
    """The service with worker routing and an inbox bound of 5 commands."""
    running = start_service(redis_server.url, tmp_path, "worker", XUMP_INBOX_LIMIT="5")
    yield running
    running.close()


def test_publish_past_the_inbox_limit_answers_503_inbox_full_with_retry_after(bounded):
    queue = unique()
    bounded.start_worker()
    with bounded.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        bounded.stop("worker")  # routing stops: the inbox fills up
        for n in range(5):
            assert (
                client.post(f"/api/queues/{queue}/publish", json={"body": str(n)}).status_code
                == 202
            )
        refused = client.post(f"/api/queues/{queue}/publish", json={"body": "refused"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "inbox_full"
        assert "holds 5 commands" in refused.json()["detail"]
        assert refused.headers["Retry-After"] == "1"
        batch = client.post(f"/api/queues/{queue}/publish-batch",
                            json={"messages": [{"body": "a"}, {"body": "b"}]})  # fmt: skip
        assert batch.status_code == 503 and batch.json()["error"] == "inbox_full"
        # the same answer from Django's handler (a chunked body is not the direct path's)
        chunked = client.post(
            f"/api/queues/{queue}/publish",
            content=iter([b'{"body": "chunked"}']),
            headers={"Content-Type": "application/json"},
        )
        assert chunked.status_code == 503 and chunked.json()["error"] == "inbox_full"
        assert chunked.headers["Retry-After"] == "1"

        bounded.start_worker()  # routing again: the inbox drains, publishes are taken again
        wait_for(lambda: client.post(f"/api/queues/{queue}/publish",
                                     json={"body": "5"}).status_code == 202)  # fmt: skip
        wait_for(lambda: len(bodies(client, queue)) >= 6)
        assert bodies(client, queue) == ["0", "1", "2", "3", "4", "5"]


@pytest.fixture
def cramped(tmp_path):
    """A service routing inline on a redis-server of its own, which the test may starve."""
    for running, redis_server in service_with_own_redis(tmp_path):
        yield running, redis.Redis(port=redis_server.port)


def test_publish_to_a_redis_at_maxmemory_answers_503_store_full_and_keeps_what_it_took(cramped):
    service, admin = cramped
    queue = unique()
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 3 * 1024 * 1024)
        accepted = []
        while len(accepted) < 1000:
            number = str(len(accepted))
            answer = client.post(f"/api/queues/{queue}/publish",
                                 json={"body": number + "." * 20_000})  # fmt: skip
            if answer.status_code != 202:
                break
            accepted.append(number)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "store_full", answer.text
        assert "out of memory (maxmemory reached)" in answer.json()["detail"]
        assert answer.headers["Retry-After"] == "5"
        assert 10 < len(accepted) < 1000

        admin.config_set("maxmemory", 0)  # room again: the router catches up
        wait_for(lambda: len(bodies(client, queue)) >= len(accepted))
        assert [body.rstrip(".") for body in bodies(client, queue)] == accepted
        assert client.post(f"/api/queues/{queue}/publish", json={"body": "x"}).status_code == 202
