"""POST /api/queues/{queue}/publish and /publish-batch."""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.web.conftest import unique


def make_queue(client, history: int = 100, **settings) -> str:
    name = unique()
    created = client.post("/api/queues", json={"name": name, "history": history, **settings})
    assert created.status_code == 201, created.text
    return name


def history_of(client, queue: str, count: int, wait: float = 10.0) -> list[dict]:
    """The queue's history, oldest first, once it holds `count` messages."""
    deadline = time.monotonic() + wait
    while True:
        page = client.get(f"/api/queues/{queue}/history", params={"start": "oldest", "count": 1000})
        assert page.status_code == 200, page.text
        messages = page.json()["messages"]
        if len(messages) >= count or time.monotonic() > deadline:
            return messages
        time.sleep(0.05)


def sink(client, queue: str) -> None:
    """A selector that takes everything, so published messages reach history."""
    made = client.post(
        f"/api/queues/{queue}/selectors",
        json={"when": "always", "action": "delete", "enabled": True},
    )
    assert made.status_code == 201, made.text


def test_it_works(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        sink(client, queue)
        answer = client.post(
            f"/api/queues/{queue}/publish",
            json={"address": "a.b", "headers": {"n": 1, "ok": True, "px": 1.5, "s": "x"},
                  "body": "héllo", "return_address": "back"},
        )  # fmt: skip
        assert answer.status_code == 202, answer.text
        mid = answer.json()["mid"]
        [message] = history_of(client, queue, 1)
    assert message["mid"] == mid
    assert message["address"] == "a.b" and message["return_address"] == "back"
    assert message["headers"] == {"n": 1, "ok": True, "px": 1.5, "s": "x"}
    assert message["body"] == "héllo" and message["encoding"] == "text"


def test_it_round_trips_text_base64_and_json_bodies(service) -> None:
    binary = bytes(range(256))
    with service.client() as client:
        queue = make_queue(client)
        sink(client, queue)
        sent = [
            {"body": "plain text"},
            {"body_base64": base64.b64encode(binary).decode()},
            {"json": {"order": 7, "items": ["a", "b"], "note": "é"}},
            {},
        ]
        mids = [client.post(f"/api/queues/{queue}/publish", json=m).json()["mid"] for m in sent]
        found = history_of(client, queue, 4)
    assert [m["mid"] for m in found] == mids
    text, raw, data, empty = found
    assert (text["body"], text["encoding"]) == ("plain text", "text")
    assert raw["encoding"] == "base64" and base64.b64decode(raw["body"]) == binary
    assert data["body"] == '{"order":7,"items":["a","b"],"note":"é"}'
    assert (empty["body"], empty["size"]) == ("", 0)


def test_a_batch_is_published_in_order(service) -> None:
    with service.client() as client:
        queue = make_queue(client, history=1000)
        sink(client, queue)
        batch = [{"address": f"k{n}", "body": f"m{n}"} for n in range(500)]
        batch.append({"headers": {"h": 1}, "json": [1, 2]})
        answer = client.post(f"/api/queues/{queue}/publish-batch", json={"messages": batch})
        assert answer.status_code == 202, answer.text
        mids = answer.json()["mids"]
        found = history_of(client, queue, 501)
    assert len(mids) == len(set(mids)) == 501
    assert [m["mid"] for m in found] == mids
    assert [m["body"] for m in found[:3]] == ["m0", "m1", "m2"]
    assert found[-1]["headers"] == {"h": 1} and found[-1]["body"] == "[1,2]"


def test_stats_show_the_published_messages_routed(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        target = make_queue(client)
        made = client.post(f"/api/queues/{queue}/selectors", json={
            "when": "match", "match": {"operator": "topic", "pattern": "stock.*"},
            "action": "move", "target": target, "enabled": True})  # fmt: skip
        assert made.status_code == 201
        batch = [{"address": "stock.ibm", "body": "1"}, {"address": "stock.sap", "body": "2"}]
        assert client.post(f"/api/queues/{queue}/publish-batch",
                           json={"messages": batch}).status_code == 202  # fmt: skip
        stats = client.get(f"/api/queues/{queue}/stats").json()
        waiting = client.get(f"/api/queues/{target}/waiting").json()["messages"]
    assert stats["published"] == 2 and stats["routed"] == 2
    assert [m["body"] for m in waiting] == ["1", "2"]


def test_it_refuses_an_oversized_body_with_413(service) -> None:
    limit = 1024 * 1024
    with service.client() as client:
        queue = make_queue(client)
        single = client.post(f"/api/queues/{queue}/publish", json={"body": "x" * (limit + 1)})
        assert single.status_code == 413 and single.json()["error"] == "message_too_large"
        batch = [{"body": "ok"}, {"body_base64": base64.b64encode(b"y" * (limit + 1)).decode()}]
        many = client.post(f"/api/queues/{queue}/publish-batch", json={"messages": batch})
        assert many.status_code == 413 and "messages[1]" in many.json()["detail"]
        at_limit = client.post(f"/api/queues/{queue}/publish", json={"body": "x" * limit})
        assert at_limit.status_code == 202
        assert client.get(f"/api/queues/{queue}/waiting").json()["messages"][0]["size"] == limit


def test_it_handles_a_missing_queue(service) -> None:
    with service.client() as client:
        answer = client.post(f"/api/queues/{unique('missing')}/publish", json={"body": "x"})
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"


def test_a_full_queue_refuses_with_409(service) -> None:
    with service.client() as client:
        queue = make_queue(client, limit=2)
        batch = {"messages": [{"body": "1"}, {"body": "2"}, {"body": "3"}]}
        refused = client.post(f"/api/queues/{queue}/publish-batch", json=batch)
        assert refused.status_code == 409 and refused.json()["error"] == "queue_full"
        assert client.get(f"/api/queues/{queue}/stats").json()["published"] == 0


def test_a_202_into_a_queue_that_drops_when_full_means_published(service) -> None:
    """Publishes racing into the last places of a queue that would drop what does not fit:
    every 202 is a message in the queue, every other answer is a 409 (none published)."""
    with service.client() as client:
        queue = make_queue(client, limit=5)

    def publish(n: int) -> httpx.Response:
        with service.client() as own:
            return own.post(f"/api/queues/{queue}/publish", json={"body": str(n)})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(publish, range(24)))
    accepted = {a.json()["mid"] for a in answers if a.status_code == 202}
    assert len(accepted) == 5
    assert all(a.status_code == 409 for a in answers if a.status_code != 202)
    with service.client() as client:
        waiting = client.get(f"/api/queues/{queue}/waiting").json()["messages"]
        stats = client.get(f"/api/queues/{queue}/stats").json()
    assert {m["mid"] for m in waiting} == accepted
    assert stats["dropped"] == 0


def test_a_publish_its_overflow_selector_cannot_take_is_refused_not_dropped(service) -> None:
    """A full queue without a dead-letter queue whose overflow selector has no credit left:
    a publish answered 202 was dropped (rule 7 says QueueFull for a publish, as the engine's
    `publish` raises it). The answer waits for the router and is a 409."""
    with service.client() as client:
        queue, spill = make_queue(client, limit=1), make_queue(client)
        overflow = {"when": "overflow", "action": "move", "target": spill, "credit": 1,
                    "enabled": True}  # fmt: skip
        assert client.post(f"/api/queues/{queue}/selectors", json=overflow).status_code == 201
        first = client.post(f"/api/queues/{queue}/publish", json={"body": "waits"})
        spilled = client.post(f"/api/queues/{queue}/publish", json={"body": "spills"})
        refused = client.post(f"/api/queues/{queue}/publish", json={"body": "refused"})
        assert (first.status_code, spilled.status_code) == (202, 202)
        assert refused.status_code == 409 and refused.json()["error"] == "queue_full"
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert stats["dropped"] == 0 and stats["published"] == 2
        waiting = client.get(f"/api/queues/{spill}/waiting").json()["messages"]
        assert [m["body"] for m in waiting] == ["spills"]


def test_queue_names_with_colons_and_slashes_work(service) -> None:
    with service.client() as client:
        for name in (unique("jobs") + ":w1", unique("eu") + "/orders"):
            assert client.post("/api/queues", json={"name": name}).status_code == 201
            published = client.post(f"/api/queues/{name}/publish", json={"body": "x"})
            assert published.status_code == 202, published.text
            assert client.get(f"/api/queues/{name}/stats").json()["published"] == 1
            assert client.get(f"/api/queues/{name}").json()["name"] == name
