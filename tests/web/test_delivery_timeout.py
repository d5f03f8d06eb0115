"""Delivery timeouts and absent subscribers, against the running server (SPEC §7): a message
waiting for a destination nobody subscribes to is delivered once when someone does, however
long it waited (the timeout counts from when a subscriber took it); the work a wolfpack
worker that went away held comes back to the other workers of the pack within the timeout.

The service here has a delivery timeout of TIMEOUT seconds (its router expires every half
of it) and routes inline, in the server process."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from celery import Celery
from websockets.sync.client import ClientConnection

from tests.web.conftest import console_login, start_service, unique
from tests.web.test_subscribe import Xump, send, subscribe, take, wait_for

TIMEOUT = 1.0


@pytest.fixture(scope="module")
def quick(redis_server, tmp_path_factory):
    """The service with a delivery timeout of TIMEOUT seconds."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("quick"), "inline",
                            XUMP_DELIVERY_TIMEOUT=str(TIMEOUT))  # fmt: skip
    yield running
    running.close()


@pytest.fixture(scope="module")
def quick_worker(redis_server, tmp_path_factory):
    """The same, routing in a Celery worker, with beat's tick every second (as `make run`
    has it every two): routers come and go, each rebuilding what it holds back."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("quick-worker"), "worker",
                            XUMP_DELIVERY_TIMEOUT=str(TIMEOUT))  # fmt: skip
    running.start_worker()
    app = Celery(broker=running.env["XUMP_REDIS_URL"])
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(1.0):
            app.send_task("xumpweb.router.tasks.tick")

    ticking = threading.Thread(target=beat, daemon=True)
    ticking.start()
    yield running
    stop.set()
    ticking.join()
    app.close()
    running.close()


@pytest.fixture
def xump(quick):
    found = Xump(quick)
    yield found
    found.close()


def outbox_length(xump: Xump, destination: str) -> int:
    return xump.relay.client.llen(f"xump:{{{xump.store}}}:outbox:{destination}")


def refused_tags(xump: Xump) -> list[str]:
    """Tags of the acks (and rejects) the router refused."""
    found = []
    for raw in xump.relay.client.lrange(f"xump:{{{xump.store}}}:errors", 0, -1):
        command = json.loads(raw)["command"]
        found.extend(command.get("tags") or [command.get("tag")])
    return found


def take_and_ack(socket: ClientConnection, count: int, within: float = 20.0) -> list[dict]:
    """`count` deliveries, each acked as it arrives."""
    found: list[dict] = []
    deadline = time.monotonic() + within
    while len(found) < count:
        [delivery] = take(socket, 1, within=max(0.1, deadline - time.monotonic()))
        send(socket, {"type": "ack", "tag": delivery["tag"]})
        found.append(delivery)
    return found


def test_a_waiting_message_is_delivered_once_however_long_it_waited(quick, xump):
    """Issue 13, 1: every timeout used to push another copy into the outbox of a
    destination nobody listened to (92 deliveries of 4 messages, 89 acks refused)."""
    tag = unique("t")
    worker, cat, bird = f"w-{tag}", f"cat-{tag}", f"bird-{tag}"
    xump.pattern("wolfpack", worker, f"jobs-{tag}", credit=1)
    xump.pattern("housecat", cat, f"house-{tag}")
    xump.pattern("parrot", bird, f"news-{tag}", topic="news.#")
    xump.publish(f"jobs-{tag}", [f"job {n}" for n in range(4)])
    xump.publish(f"house-{tag}", [{"body": f"mail {n}", "address": cat} for n in range(4)])
    xump.publish(f"news-{tag}", [{"body": f"news {n}", "address": "news.x"} for n in range(4)])
    expected = {cat: 4, bird: 4}
    assert wait_for(lambda: all(outbox_length(xump, d) == n for d, n in expected.items()))
    # the worker's credit is 1, and with no subscriber it is away: its MOVE is held once
    # the router has seen it away, so one job reached its outbox or none did
    expected[worker] = outbox_length(xump, worker)
    assert expected[worker] <= 1
    # no subscriber for several timeouts (the router expires every TIMEOUT / 2 seconds)
    time.sleep(4 * TIMEOUT)
    assert {d: outbox_length(xump, d) for d in expected} == expected
    waited = xump.stats(f"house-{tag}:{cat}")
    assert (waited["delivered"], waited["timed_out"], waited["expired"]) == (4, 0, 0)
    for destination, queue, prefix in ((worker, f"jobs-{tag}:{worker}", "job"),
                                       (cat, f"house-{tag}:{cat}", "mail"),
                                       (bird, f"news-{tag}:{bird}", "news")):  # fmt: skip
        with subscribe(quick, destination) as socket:
            send(socket, {"type": "credit", "n": 100})
            got = take_and_ack(socket, 4)
            assert [d["message"]["body"] for d in got] == [f"{prefix} {n}" for n in range(4)]
            assert not any(d["redelivered"] for d in got)
            stats = wait_for(lambda q=queue: (s := xump.stats(q))["confirmed"] == 4 and s)
            assert stats, xump.stats(queue)
            assert (stats["delivered"], stats["expired"], stats["outstanding"]) == (4, 0, 0)
            assert outbox_length(xump, destination) == 0
        assert not set(refused_tags(xump)) & {d["tag"] for d in got}  # every ack accepted


def test_the_timeout_counts_from_when_a_subscriber_took_the_delivery(quick, xump):
    """Taken and not acked: back after the timeout (redelivered), one copy; the late ack of
    the first copy is refused, the ack of the second accepted."""
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(quick, destination) as socket:
        send(socket, {"type": "credit", "n": 2})
        xump.publish(queue, ["once"])
        [first] = take(socket, 1)
        [again] = take(socket, 1, within=10 * TIMEOUT)
        assert (again["message"]["body"], again["redelivered"]) == ("once", True)
        assert again["tag"] != first["tag"]
        send(socket, {"type": "ack", "tags": [again["tag"]]})
        assert wait_for(lambda: xump.stats(queue)["confirmed"] == 1)
        assert outbox_length(xump, destination) == 0
        stats = xump.stats(queue)
        assert (stats["delivered"], stats["timed_out"], stats["outstanding"]) == (2, 1, 0)
        assert stats["expired"] == 0  # a timeout, not a ttl expiry
        with console_login(quick.url) as console:  # the console says which it was
            page = console.get(f"/queues/{queue}/").text
            assert re.search(r"<dt[^>]*>Timed out</dt><dd>1</dd>", page), page
            assert ">Expired</dt>" not in page  # no ttl, none expired
        send(socket, {"type": "ack", "tag": first["tag"]})  # too late: refused, logged
        assert wait_for(lambda: first["tag"] in refused_tags(xump))
        assert xump.stats(queue)["confirmed"] == 1


@pytest.mark.parametrize("routing", ["inline", "worker"])
def test_work_held_by_a_worker_that_left_goes_to_the_other_workers(routing, request):
    """Issue 13, 4: w1 takes 3 of its 5 jobs without acking and leaves for good; within the
    timeout (and the presence key's life) w2 gets every job, w1's among them, each once."""
    quick = request.getfixturevalue("quick" if routing == "inline" else "quick_worker")
    xump = Xump(quick)
    request.addfinalizer(xump.close)
    tag = unique("t")
    service, w1, w2 = f"jobs-{tag}", f"w1-{tag}", f"w2-{tag}"
    xump.pattern("wolfpack", w1, service, credit=5)
    xump.pattern("wolfpack", w2, service, credit=5)
    total = 20
    with subscribe(quick, w1) as first:
        send(first, {"type": "credit", "n": 3})
        xump.publish(service, [f"job {n:02}" for n in range(total)])
        held = take(first, 3)
    # w1 is gone: its 3 unacked went back to its queue and outbox, with its 2 others
    with subscribe(quick, w2) as second:
        send(second, {"type": "credit", "n": 1000})
        got = take_and_ack(second, total, within=30)
        bodies = [d["message"]["body"] for d in got]
        assert sorted(bodies) == [f"job {n:02}" for n in range(total)]  # all, each once
        w1_jobs = [b for b in bodies if b in {d["message"]["body"] for d in held}]
        assert len(w1_jobs) == 3  # the duplicates: the ones w1 held unacked
        assert w1_jobs == sorted(w1_jobs)  # given back in order
        assert wait_for(lambda: xump.stats(f"{service}:{w2}")["confirmed"] == total)
        assert wait_for(lambda: outbox_length(xump, w1) == 0)
        assert xump.stats(f"{service}:{w1}")["outstanding"] == 0
        [mover] = [s for s in xump.call("selectors", queue=service) if s["target"].endswith(w1)]
        assert mover["held"]  # it takes nothing while w1 is away
        assert not set(refused_tags(xump)) & {d["tag"] for d in got}
        # w1 comes back: it gets new work again (w2 now holds its credit's worth unacked)
        with subscribe(quick, w1) as back:
            send(back, {"type": "credit", "n": 100})
            xump.publish(service, [f"new {n}" for n in range(10)])
            to_w2 = take(second, 5)
            to_w1 = take_and_ack(back, 5, within=20)
            news = sorted(d["message"]["body"] for d in to_w1 + to_w2)
            assert not xump.call("selector_get", queue=service, id=mover["id"])["held"]
            assert news == [f"new {n}" for n in range(10)]
            for delivery in to_w2:
                send(second, {"type": "ack", "tag": delivery["tag"]})


def test_a_worker_that_arrives_rings_the_router_and_gets_the_work_held_for_it(xump):
    """A wolfpack worker that subscribes to a destination nobody held rings the router's
    doorbell with an arrival (so the router looks at who is away at once, rather than at
    its next expire pass, and the work held while it was away goes out to it); a second
    consumer of a destination already held does not."""
    tag = unique("t")
    service, worker = f"jobs-{tag}", f"w-{tag}"
    xump.pattern("wolfpack", worker, service, credit=5)
    xump.publish(service, ["held 1", "held 2"])
    [mover] = xump.call("selectors", queue=service)
    assert wait_for(lambda: xump.call("selector_get", queue=service, id=mover["id"])["held"])
    rings = xump.relay.client.pubsub(ignore_subscribe_messages=True)
    rings.subscribe(f"xump:{{{xump.store}}}:doorbell")
    try:
        with subscribe(xump.service, worker) as first:
            send(first, {"type": "credit", "n": 10})
            heard = []
            deadline = time.monotonic() + 20
            while b"arrival" not in heard and time.monotonic() < deadline:
                ring = rings.get_message(timeout=1.0)
                if ring is not None:
                    heard.append(ring["data"])
            assert b"arrival" in heard
            got = take(first, 2)
            assert sorted(d["message"]["body"] for d in got) == ["held 1", "held 2"]
            for delivery in got:
                send(first, {"type": "ack", "tag": delivery["tag"]})
            while rings.get_message(timeout=0.2) is not None:
                pass  # what the acks rang
            with subscribe(xump.service, worker):
                xump.publish(service, ["one more"])
                assert take(first, 1)[0]["message"]["body"] == "one more"
                late = []
                while (ring := rings.get_message(timeout=0.5)) is not None:
                    late.append(ring["data"])
                assert b"arrival" not in late  # the destination was held all along
    finally:
        rings.close()
