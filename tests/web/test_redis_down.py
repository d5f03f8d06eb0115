"""When Redis goes away the API answers 503 store_unavailable (JSON, no traceback) and the
console a 503 page that says so, and both work again once Redis is back."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import service_with_own_redis, unique


@pytest.fixture
def lonely(tmp_path):
    """A service with a redis-server of its own, which the test may kill."""
    yield from service_with_own_redis(tmp_path)


def test_the_api_answers_503_while_redis_is_down_and_recovers(lonely) -> None:
    service, redis_server = lonely
    queue = unique()
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        assert client.post(f"/api/queues/{queue}/publish", json={"body": "1"}).status_code == 202
        redis_server.kill()
        for method, path, body in [
            ("POST", f"/api/queues/{queue}/publish", {"body": "2"}),
            ("POST", f"/api/queues/{queue}/publish-batch", {"messages": [{"body": "3"}]}),
            ("GET", f"/api/queues/{queue}/waiting", None),
            ("GET", "/api/queues", None),
            ("GET", "/api/refused", None),
            ("POST", "/api/confirm", {"tags": [f"{queue}:1:1"]}),
        ]:
            answer = client.request(method, path, json=body)
            assert answer.status_code == 503, (method, path, answer.status_code, answer.text)
            assert answer.json()["error"] == "store_unavailable", answer.text
        health = client.get("/api/health")
        assert health.status_code == 503 and health.json()["redis"]["ok"] is False
        scraped = client.get("/metrics")  # says so, rather than failing the scrape
        assert scraped.status_code == 200, scraped.text
        samples = {s.name: s.value for f in text_string_to_metric_families(scraped.text)
                   for s in f.samples}  # fmt: skip
        assert samples["xump_redis_up"] == 0 and samples["xump_database_up"] == 1
        redis_server.start()  # the same port and AOF file
        deadline = time.monotonic() + 20
        while True:
            answer = client.post(f"/api/queues/{queue}/publish", json={"body": "4"})
            if answer.status_code == 202 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.status_code == 202, answer.text
        deadline = time.monotonic() + 20
        while True:
            waiting = client.get(f"/api/queues/{queue}/waiting")
            bodies = [m["body"] for m in waiting.json().get("messages", [])]
            if bodies == ["1", "4"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert bodies == ["1", "4"]


def test_console_pages_say_the_store_is_unavailable(lonely) -> None:
    service, redis_server = lonely
    queue = unique()
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
    with httpx.Client(base_url=service.url, timeout=30) as browser:
        form = browser.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        done = browser.post("/login/", data={"username": "admin", "password": "admin-password",
                                             "csrfmiddlewaretoken": token})  # fmt: skip
        assert done.status_code == 302, done.text
        assert browser.get("/").status_code == 200
        redis_server.kill()
        for path in ("/", f"/queues/{queue}/", "/topology/"):
            page = browser.get(path)
            assert page.status_code == 503, (path, page.status_code)
            assert "The message store is not available" in page.text, path
            assert "Traceback" not in page.text
        inspector = browser.get("/dead-letters/")  # shows what it can, and says what it cannot
        assert inspector.status_code == 200
        assert "cannot read the refused commands" in inspector.text
        redis_server.start()
        deadline = time.monotonic() + 20
        while browser.get(f"/queues/{queue}/").status_code != 200:
            assert time.monotonic() < deadline, "the console did not come back"
            time.sleep(0.2)
