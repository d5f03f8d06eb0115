"""POST /api/confirm and /api/reject, with deliveries taken from a destination's outbox."""

from __future__ import annotations

from tests.web.conftest import unique


def delivering_queue(client, destination: str, **settings) -> str:
    queue = unique()
    client.post("/api/queues", json={"name": queue, "history": 10, **settings})
    made = client.post(f"/api/queues/{queue}/selectors", json={
        "when": "always", "action": "deliver", "target": destination, "enabled": True})  # fmt: skip
    assert made.status_code == 201
    return queue


def test_it_works(service, relay) -> None:
    destination = unique("d")
    with service.client() as client:
        queue = delivering_queue(client, destination)
        client.post(f"/api/queues/{queue}/publish-batch",
                    json={"messages": [{"body": "a"}, {"body": "b"}]})  # fmt: skip
        deliveries = relay.deliveries(destination, count=2, wait=5)
        assert [d.message.body for d in deliveries] == [b"a", b"b"]
        answer = client.post("/api/confirm", json={"tags": [d.tag for d in deliveries]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"confirmed": 2}
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert stats["confirmed"] == 2
        assert len(client.get(f"/api/queues/{queue}/history").json()["messages"]) == 2


def test_reject_requeues_or_dead_letters(service, relay) -> None:
    destination, dead = unique("d"), unique("dead")
    with service.client() as client:
        client.post("/api/queues", json={"name": dead})
        queue = delivering_queue(client, destination, dead_letter=dead)
        client.post(f"/api/queues/{queue}/publish", json={"body": "x"})
        [first] = relay.deliveries(destination, count=1, wait=5)
        requeued = client.post("/api/reject", json={"tag": first.tag, "requeue": True})
        assert requeued.status_code == 200, requeued.text
        [again] = relay.deliveries(destination, count=1, wait=5)
        assert again.redelivered and again.message.mid == first.message.mid
        dropped = client.post("/api/reject", json={"tag": again.tag, "requeue": False})
        assert dropped.status_code == 200
        [letter] = client.get(f"/api/queues/{dead}/waiting").json()["messages"]
        assert letter["headers"]["x-reason"] == "rejected"


def test_it_handles_unknown_tags(service, relay) -> None:
    destination = unique("d")
    with service.client() as client:
        queue = delivering_queue(client, destination)
        client.post(f"/api/queues/{queue}/publish", json={"body": "x"})
        [delivery] = relay.deliveries(destination, count=1, wait=5)
        for tags in ([delivery.tag, f"{queue}:1:999999"], ["not-a-tag"]):
            answer = client.post("/api/confirm", json={"tags": tags})
            assert answer.status_code == 404 and answer.json()["error"] == "not_found"
        assert client.post("/api/reject", json={"tag": f"{queue}:1:424242"}).status_code == 404
        # all or none: the good tag is still outstanding and confirms now
        assert client.get(f"/api/queues/{queue}/stats").json()["confirmed"] == 0
        assert client.post("/api/confirm", json={"tags": [delivery.tag]}).status_code == 200
