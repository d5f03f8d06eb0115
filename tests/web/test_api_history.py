"""GET /api/queues/{queue}/history and /waiting."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from tests.web.conftest import unique


def filled_queue(client, count: int) -> str:
    """A queue whose history holds messages "0" .. str(count - 1)."""
    queue = unique()
    client.post("/api/queues", json={"name": queue, "history": 100})
    client.post(f"/api/queues/{queue}/selectors",
                json={"when": "always", "action": "delete", "enabled": True})  # fmt: skip
    client.post(f"/api/queues/{queue}/publish-batch",
                json={"messages": [{"body": str(n)} for n in range(count)]})  # fmt: skip
    return queue


def bodies(answer) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


def test_it_pages_through_history(service) -> None:
    with service.client() as client:
        queue = filled_queue(client, 10)
        url = f"/api/queues/{queue}/history"
        assert bodies(client.get(url, params={"count": 3})) == ["9", "8", "7"]  # latest
        oldest = client.get(url, params={"start": "oldest", "count": 3}).json()["messages"]
        assert [m["body"] for m in oldest] == ["0", "1", "2"]
        after = bodies(client.get(url, params={"after": oldest[-1]["seq"], "count": 3}))
        assert after == ["3", "4", "5"]
        before = bodies(client.get(url, params={"before": oldest[-1]["seq"], "count": 3}))
        assert before == ["1", "0"]


def test_since_takes_an_iso_time_or_epoch_seconds(service) -> None:
    with service.client() as client:
        queue = filled_queue(client, 2)
        assert len(bodies(client.get(f"/api/queues/{queue}/history"))) == 2
        middle = time.time()
        time.sleep(0.05)
        client.post(f"/api/queues/{queue}/publish", json={"body": "late"})
        url = f"/api/queues/{queue}/history"
        assert bodies(client.get(url, params={"since": str(middle)})) == ["late"]
        iso = datetime.fromtimestamp(middle, UTC).isoformat()
        assert bodies(client.get(url, params={"since": iso})) == ["late"]
        assert bodies(client.get(url, params={"since": "2000-01-01T00:00:00"})) == [
            "0", "1", "late"]  # fmt: skip
        bad = client.get(url, params={"since": "yesterday-ish"})
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_argument"


def test_it_refuses_two_starting_points_and_bad_counts(service) -> None:
    with service.client() as client:
        queue = filled_queue(client, 1)
        url = f"/api/queues/{queue}/history"
        for params in ({"start": "oldest", "after": 1}, {"count": 0}, {"count": 5000},
                       {"start": "middle"}, {"before": "x"}):  # fmt: skip
            answer = client.get(url, params=params)
            assert answer.status_code == 400, (params, answer.text)


def test_waiting_shows_a_dead_letter_queue(service) -> None:
    with service.client() as client:
        dead, queue = unique("dead"), unique()
        client.post("/api/queues", json={"name": dead})
        client.post("/api/queues", json={"name": queue, "dead_letter": dead})
        client.post(f"/api/queues/{queue}/selectors", json={
            "when": "match", "match": {"operator": "eq", "pattern": "known"},
            "action": "delete", "enabled": True})  # fmt: skip
        mid = client.post(f"/api/queues/{queue}/publish",
                          json={"address": "stray", "body": "lost"}).json()["mid"]  # fmt: skip
        [letter] = client.get(f"/api/queues/{dead}/waiting").json()["messages"]
    assert letter["mid"] == mid and letter["headers"]["x-reason"] == "unroutable"
    assert letter["headers"]["x-original-queue"] == queue
