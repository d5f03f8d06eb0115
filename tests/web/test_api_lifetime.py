"""Message lifetime through the service (SPEC §8): queue options over HTTP, delayed and
expiring messages fired by the router's timer, the scheduled list and cancelling, priority,
and bad input refused with nothing changed."""

from __future__ import annotations

import time
from functools import partial

import pytest

from engine.relay import RelayClient
from tests.web import conftest
from tests.web.conftest import unique

LIFETIME = {
    "max_deliveries": 3,
    "redelivery_delay": 0.5,
    "redelivery_backoff": 2.0,
    "redelivery_delay_max": 4.0,
    "ttl": 3600.0,
    "priorities": 10,
}


def deliver_to(client, queue: str, destination: str) -> None:
    made = client.post(f"/api/queues/{queue}/selectors", json={
        "when": "always", "action": "deliver", "target": destination, "enabled": True})  # fmt: skip
    assert made.status_code == 201, made.text


def create(client, **settings) -> str:
    name = unique()
    made = client.post("/api/queues", json={"name": name, **settings})
    assert made.status_code == 201, made.text
    return name


# delays and backoffs take seconds here: look more often, and for longer, than the default
wait_for = partial(conftest.wait_for, within=30.0, every=0.05)


def test_queue_options_are_accepted_returned_and_changed(service) -> None:
    with service.client() as client:
        queue = create(client, **LIFETIME)
        shown = client.get(f"/api/queues/{queue}").json()
        assert {key: shown[key] for key in LIFETIME} == LIFETIME
        assert shown["scheduled"] == 0
        changed = client.patch(f"/api/queues/{queue}", json={"ttl": 60, "max_deliveries": None})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["ttl"], changed.json()["max_deliveries"]) == (60.0, None)
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert {"expired", "delivery_limited", "scheduled"} <= set(stats)


@pytest.mark.parametrize("bad", [
    {"max_deliveries": 0}, {"priorities": 0}, {"priorities": 11}, {"ttl": -1},
    {"ttl": "soon"}, {"redelivery_delay": -0.5}, {"redelivery_backoff": 0.5},
    {"redelivery_delay": 5, "redelivery_delay_max": 1},
])  # fmt: skip
def test_bad_queue_options_are_refused_and_nothing_is_made(service, bad) -> None:
    with service.client() as client:
        name = unique()
        answer = client.post("/api/queues", json={"name": name, **bad})
        assert answer.status_code == 400, answer.text
        assert client.get(f"/api/queues/{name}").status_code == 404
        queue = create(client)
        if "priorities" not in bad:
            answer = client.patch(f"/api/queues/{queue}", json=bad)
            assert answer.status_code == 400, answer.text
        refused = client.patch(f"/api/queues/{queue}", json={"priorities": 5})
        assert refused.status_code == 400, refused.text
        shown = client.get(f"/api/queues/{queue}").json()
        assert (shown["max_deliveries"], shown["ttl"], shown["priorities"]) == (None, None, 1)


@pytest.mark.parametrize("bad", [
    {"ttl": -1}, {"ttl": "1"}, {"delay": -2}, {"delay": "later"}, {"priority": -1},
    {"priority": "high"}, {"priority": 1.5}, {"headers": {"priority": "x"}},
    {"delay": 1, "not_before": 2e9}, {"not_before": "tomorrow"}, {"ttl": 1e12},
])  # fmt: skip
def test_bad_message_fields_are_refused_and_nothing_is_published(service, bad) -> None:
    with service.client() as client:
        queue = create(client)
        one = client.post(f"/api/queues/{queue}/publish", json={"body": "x", **bad})
        assert one.status_code == 400, one.text
        batch = client.post(f"/api/queues/{queue}/publish-batch",
                            json={"messages": [{"body": "ok"}, {"body": "x", **bad}]})  # fmt: skip
        assert batch.status_code == 400 and "messages[1]" in batch.json()["detail"], batch.text
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert stats["published"] == 0 and stats["scheduled"] == 0


def test_a_delayed_message_is_delivered_once_due(service, relay) -> None:
    destination = unique("d")
    with service.client() as client:
        queue = create(client, history=10)
        deliver_to(client, queue, destination)
        sent = time.time()
        answer = client.post(f"/api/queues/{queue}/publish", json={"body": "later", "delay": 1})
        assert answer.status_code == 202, answer.text
        [waiting] = client.get(f"/api/queues/{queue}/scheduled").json()["messages"]
        assert waiting["mid"] == answer.json()["mid"] and waiting["due"] >= sent + 1
        found = wait_for(lambda: relay.deliveries(destination, count=1, wait=0.2))
        arrived = time.time()
    [delivery] = found
    assert delivery.message.mid == answer.json()["mid"]
    assert arrived >= sent + 1 and delivery.message.timestamp >= sent + 1


def test_not_before_and_batch_delays_fire_in_due_order(service, relay) -> None:
    destination = unique("d")
    with service.client() as client:
        queue = create(client)
        deliver_to(client, queue, destination)
        now = time.time()
        answer = client.post(f"/api/queues/{queue}/publish-batch", json={"messages": [
            {"body": "second", "delay": 1.2}, {"body": "first", "not_before": now + 0.6},
            {"body": "now", "not_before": now - 100},
        ]})  # fmt: skip
        assert answer.status_code == 202, answer.text
        found: list = []
        wait_for(lambda: found.extend(relay.deliveries(destination, count=3, wait=0.2))
                 or len(found) >= 3)  # fmt: skip
    assert [d.message.body for d in found] == [b"now", b"first", b"second"]


def test_a_message_past_its_ttl_expires_to_the_dead_letter_queue(service) -> None:
    with service.client() as client:
        dead = create(client)
        queue = create(client, dead_letter=dead)  # no selector: nobody takes it
        mid = client.post(f"/api/queues/{queue}/publish",
                          json={"body": "stale", "ttl": 0.3}).json()["mid"]  # fmt: skip

        def letters():
            return client.get(f"/api/queues/{dead}/waiting").json()["messages"]

        [letter] = wait_for(letters)
        assert letter["mid"] == mid and letter["headers"]["x-reason"] == "expired"
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert stats["expired"] == 1 and stats["depth"] == 0


def test_a_scheduled_message_can_be_cancelled(service) -> None:
    with service.client() as client:
        queue = create(client)
        mids = client.post(f"/api/queues/{queue}/publish-batch", json={"messages": [
            {"body": "a", "delay": 3600, "headers": {"k": "v"}}, {"body": "b", "delay": 3000},
        ]}).json()["mids"]  # fmt: skip
        listed = client.get(f"/api/queues/{queue}/scheduled").json()
        assert listed["total"] == 2
        assert [m["mid"] for m in listed["messages"]] == mids[::-1]  # soonest first
        assert listed["messages"][1]["headers"] == {"k": "v"}
        gone = client.delete(f"/api/queues/{queue}/scheduled/{mids[0]}")
        assert gone.status_code == 200 and gone.json() == {"cancelled": 1}, gone.text
        again = client.delete(f"/api/queues/{queue}/scheduled/{mids[0]}")
        assert again.status_code == 404, again.text
        assert [m["mid"] for m in client.get(f"/api/queues/{queue}/scheduled").json()[
            "messages"]] == [mids[1]]  # fmt: skip
        stats = client.get(f"/api/queues/{queue}/stats").json()
        assert stats["scheduled"] == 1 and stats["dropped"] == 1


def test_priority_overtakes_within_a_queue(service) -> None:
    with service.client() as client:
        queue = create(client, priorities=10)
        for body, priority in (("low", 1), ("high", 9), ("mid", 5), ("mid2", None)):
            extra = {} if priority is None else {"priority": priority}
            client.post(f"/api/queues/{queue}/publish", json={"body": body, **extra})

        def four():
            found = client.get(f"/api/queues/{queue}/waiting").json()["messages"]
            return found if len(found) == 4 else None

        waiting = wait_for(four)
    assert [m["body"] for m in waiting] == ["high", "mid", "low", "mid2"]
    assert waiting[0]["headers"]["priority"] == 9


def test_a_poison_message_stops_at_its_delivery_limit(service, relay) -> None:
    destination = unique("d")
    with service.client() as client:
        dead = create(client)
        queue = create(client, dead_letter=dead, max_deliveries=2, redelivery_delay=0.1)
        deliver_to(client, queue, destination)
        client.post(f"/api/queues/{queue}/publish", json={"body": "poison"})
        for _ in range(2):
            [delivery] = wait_for(lambda: relay.deliveries(destination, count=1, wait=0.2))
            answer = client.post("/api/reject", json={"tag": delivery.tag, "requeue": True})
            assert answer.status_code == 200, answer.text
        [letter] = wait_for(lambda: client.get(f"/api/queues/{dead}/waiting").json()["messages"])
        assert letter["headers"]["x-reason"] == "delivery-limit"
        assert letter["headers"]["x-delivery-count"] == 2
        assert client.get(f"/api/queues/{queue}/stats").json()["delivery_limited"] == 1


def test_worker_routing_keeps_the_options_and_fires_a_delay_beyond_its_linger(
    worker_service,
) -> None:
    """A new worker rebuilds the engine from the catalog (the options survive), and the
    router stays while a message waits to be due (no beat runs here: nothing else would
    schedule a router once the inbox is empty)."""
    destination = unique("d")
    relay = RelayClient(worker_service.env["XUMP_REDIS_URL"], worker_service.env["XUMP_STORE"])
    try:
        with worker_service.client() as client:
            queue = create(client, **LIFETIME)
            deliver_to(client, queue, destination)
            worker_service.stop("worker")  # the next one builds its engine from the wiring
            worker_service.start_worker("second")
            shown = client.get(f"/api/queues/{queue}").json()
            assert {key: shown[key] for key in LIFETIME} == LIFETIME
            sent = time.time()
            delay = runtime_linger() + 2
            answer = client.post(f"/api/queues/{queue}/publish",
                                 json={"body": "later", "delay": delay})  # fmt: skip
            assert answer.status_code == 202, answer.text
            found = wait_for(lambda: relay.deliveries(destination, count=1, wait=0.2))
    finally:
        relay.close()
    assert [d.message.mid for d in found] == [answer.json()["mid"]]
    assert time.time() >= sent + delay


def runtime_linger() -> float:
    from xumpweb.runtime import LINGER

    return LINGER


def test_the_standing_router_fires_a_message_due_beyond_the_horizon_without_beat(
    worker_service,
) -> None:
    """No beat runs here and the inbox stays empty: the worker's standing router
    (router/watch.py) keeps the lease and fires a message due beyond SCHEDULED_HORIZON
    (where a router that let go would need beat's tick to come back)."""
    from xumpweb.runtime import LINGER, SCHEDULED_HORIZON, keys

    store = worker_service.env["XUMP_STORE"]
    destination = unique("d")
    relay = RelayClient(worker_service.env["XUMP_REDIS_URL"], store)
    try:
        with worker_service.client() as client:
            queue = create(client)
            deliver_to(client, queue, destination)
            delay = SCHEDULED_HORIZON + LINGER + 3  # beyond the horizon once it lingered
            sent = time.time()  # before the call: the server's clock starts the delay in it
            answer = client.post(f"/api/queues/{queue}/publish",
                                 json={"body": "much later", "delay": delay})  # fmt: skip
            assert answer.status_code == 202, answer.text
        lease = keys(store)["lease"]
        assert wait_for(lambda: relay.client.get(lease)), "no router holds the lease"
        time.sleep(LINGER + 1)  # a router that lingers would have let go by now
        held = relay.client.get(lease)
        assert held, "the router let go"
        found = wait_for(lambda: relay.deliveries(destination, count=1, wait=0.2),
                         within=delay + 60)  # fmt: skip
        assert relay.client.get(lease) == held  # the same router, all along
    finally:
        relay.close()
    assert [d.message.mid for d in found] == [answer.json()["mid"]]
    assert time.time() >= sent + delay
