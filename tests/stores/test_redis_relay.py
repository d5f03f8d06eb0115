"""Processes sharing a Redis store through the relay: one router routes under the store's
lease; clients publish and confirm through the inbox and take deliveries from outboxes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import redis

from engine import Delivery, Engine, Message
from engine.errors import (
    InvalidArgument,
    LeaseLost,
    NotFound,
    NotWritten,
    QueueFull,
    StoreError,
)
from engine.relay import (
    CLAIM_CHECK,
    PURGE,
    STAMP,
    TAKE_THESE,
    Handed,
    RelayClient,
    RelayRouter,
    delivery_keys,
    relay_keys,
)
from tests.conftest import RedisServer

PROCESSES = Path(__file__).with_name("relay_processes.py")


@pytest.fixture
def client(shared):
    """A relay client of the `shared` store, as an application holds one."""
    with closing(RelayClient(*shared)) as made:
        yield made


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(PROCESSES), *args], stdout=subprocess.PIPE, text=True
    )


def wait_ready(process: subprocess.Popen) -> None:
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"


def wait_until(condition, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def take_and_confirm(
    client: RelayClient, destination: str, total: int, count: int
) -> list[Delivery]:
    """What the application receives, `count` at most at a time and confirmed as it goes,
    until `total` came or 120 s passed."""
    got: list[Delivery] = []
    deadline = time.monotonic() + 120
    while len(got) < total and time.monotonic() < deadline:
        batch = client.deliveries(destination, count=count, wait=1)
        client.confirm(batch)
        got += batch
    return got


def router_engine(url: str, name: str, **options) -> tuple[Engine, RelayRouter]:
    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    relay = RelayRouter(engine, name, name="test", lease_ms=2000, **options)
    assert relay.acquire(timeout=5)
    return engine, relay


def app_router(url: str, name: str, **options) -> tuple[Engine, RelayRouter, RelayClient]:
    """A router (not serving: the test runs its steps) routing queue "q" to destination
    "app", and a client."""
    engine, router = router_engine(url, name, **options)
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    return engine, router, RelayClient(url, name)


@contextmanager
def serving_app_queue(url: str, name: str, **options):
    """A router in a thread of this process, routing queue "q" to destination "app"."""
    engine, relay = router_engine(url, name, **options)
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    stop = threading.Event()
    serving = threading.Thread(target=relay.serve, args=(stop,))
    serving.start()
    try:
        yield engine, relay
    finally:
        stop.set()
        serving.join()


def test_clients_publish_and_confirm_through_the_router(shared) -> None:
    url, name = shared
    with serving_app_queue(url, name) as (engine, relay):
        client = RelayClient(url, name)
        client.publish_many("q", [Message(body=str(n).encode()) for n in range(100)])
        got = []
        while len(got) < 100:
            got.extend(client.deliveries("app", count=50, wait=5))
        assert [int(d.message.body) for d in got] == list(range(100))
        client.confirm(got)
        client.confirm(["q:1:nonsense.1"])  # a bad tag is noted, not fatal
        wait_until(lambda: engine.stats("q")["confirmed"] == 100, 10)
        wait_until(lambda: redis.Redis.from_url(url).llen(relay.errors) == 1, 10)


def test_the_errors_list_keeps_the_newest_failures_only(shared) -> None:
    url, name = shared
    with serving_app_queue(url, name, errors_kept=5) as (_, relay):
        client = RelayClient(url, name)
        client.confirm([f"q:1:stale.{n}" for n in range(8)])  # each stale tag is one error
        errors = redis.Redis.from_url(url)
        wait_until(lambda: errors.llen(relay.errors) == 5, 10)
        kept = [json.loads(item)["command"]["tags"] for item in errors.lrange(relay.errors, 0, -1)]
        assert kept == [[f"q:1:stale.{n}"] for n in range(3, 8)]


def test_publish_applied_answers_what_the_router_refuses(shared) -> None:
    """publish_many returns once the inbox holds the messages; publish_applied once the
    router published them, so a full queue's QueueFull reaches the publisher."""
    url, name = shared
    with serving_app_queue(url, name) as (engine, relay):
        engine.queue_create("small", limit=2)
        client = RelayClient(url, name)
        mids = client.publish_applied("small", [Message(body=b"1"), Message(body=b"2")])
        assert [m.mid for m in engine.peek("small", 10)] == mids  # published on return
        with pytest.raises(QueueFull, match="none published"):
            client.publish_applied("small", [Message(body=b"3")])
        with pytest.raises(NotFound):
            client.publish_applied("nowhere", [Message(body=b"4")])
        assert engine.stats("small")["published"] == 2 and engine.stats("small")["dropped"] == 0
        assert redis.Redis.from_url(url).llen(relay.errors) == 0
        # the same through the inbox: accepted, then refused by the router, noted in errors
        client.publish_many("small", [Message(body=b"5")])
        wait_until(lambda: redis.Redis.from_url(url).llen(relay.errors) == 1, 10)


def test_publishes_to_one_queue_in_a_row_are_refused_one_by_one(shared) -> None:
    """The router hands consecutive publishes to one queue to the engine in one call; what
    that call refuses is applied command by command, so only the publishes that would have
    been refused alone are (here: the third and fourth into a queue of room for two, the
    one with a body that is not base64, and the two with one mid)."""
    url, name = shared
    engine, router, client = app_router(url, name)
    engine.queue_create("small", limit=2)
    inbox, _, errors = relay_keys(name)
    commands = [client.publish_command("small", [Message(body=b"%d" % n)])[0] for n in range(4)]
    bad = json.loads(client.publish_command("q", [Message(body=b"x")])[0])
    bad["messages"][0]["body"] = "not base64!"
    twice = [client.publish_command("q", [Message(body=b"t%d" % n)])[0] for n in range(2)]
    same = [json.loads(command) for command in twice]
    same[1]["messages"][0]["mid"] = same[0]["messages"][0]["mid"]
    good = client.publish_command("q", [Message(body=b"good")])[0]
    raw = redis.Redis.from_url(url)
    raw.rpush(inbox, *commands, json.dumps(bad), *(json.dumps(c) for c in same), good)
    assert router.run_once() == 8
    assert [m.body for m in engine.peek("small", 10)] == [b"0", b"1"]
    refused = [json.loads(item)["error"] for item in raw.lrange(errors, 0, -1)]
    assert len(refused) == 3 and "room for 0" in refused[0] and "room for 0" in refused[1]
    assert "not a well-formed publish command" in refused[2]
    delivered = client.deliveries("app", count=10, wait=1)
    # one mid twice: each command alone, as before (the engine keeps both)
    assert [d.message.body for d in delivered] == [b"t0", b"t1", b"good"]


def test_a_second_router_waits_for_the_lease_and_a_stale_one_cannot_write(shared) -> None:
    url, name = shared
    first, _first_relay = router_engine(url, name)
    second = Engine()
    second.store_create("redis", name, url=url)
    assert not RelayRouter(second, name, name="second", lease_ms=500).acquire(timeout=0.3)
    first.queue_create("q")
    time.sleep(2.2)  # the first router stalls past its lease...
    assert RelayRouter(second, name, name="second", lease_ms=5000).acquire(timeout=1)
    with pytest.raises(StoreError, match="lost the lease"):
        first.publish("q", Message(body=b"late"))  # ...and can no longer write


def test_a_router_that_stalled_past_its_lease_with_no_successor_takes_it_back(shared) -> None:
    url, name = shared
    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    assert RelayRouter(engine, name, name="slow", lease_ms=300).acquire(timeout=1)
    engine.queue_create("q")
    time.sleep(0.5)  # the lease expires; nobody takes it
    engine.publish("q", Message(body=b"late but alone"))
    # held again, by the same router (asserted on the lease itself: racing another router
    # for a 300 ms lease would depend on how busy the machine is)
    holder = engine.backend(name).client.get(f"xump:{{{name}}}:lease")
    assert holder is not None and holder.startswith(b"slow#")
    assert [m.body for m in engine.peek("q")] == [b"late but alone"]


def test_killed_router_mid_batch_second_router_delivers_every_message_exactly_once(
    shared,
    client,
) -> None:
    url, name = shared
    total = 20_000
    sent: list[str] = []  # the mids, in publishing order
    for start_at in range(0, total, 100):
        sent += client.publish_many("jobs", [Message(body=str(n).encode())
                                             for n in range(start_at, start_at + 100)])  # fmt: skip
    notes = redis.Redis.from_url(url)
    outbox, lease = f"xump:{{{name}}}:outbox:w1", f"xump:{{{name}}}:lease"
    first = start("router", url, name, "w1", "1")  # one command (100 messages) per step
    wait_ready(first)
    wait_until(lambda: notes.llen(outbox) >= 3_000)
    first.kill()  # kill -9 in the middle of routing the 20,000
    first.wait()
    assert notes.llen(outbox) < total
    first_token = notes.get(lease).decode()
    assert notes.pttl(lease) > 0  # the dead router's lease: the next one must wait it out

    second = start("router", url, name, "w1", "1")
    try:
        wait_ready(second)
        second_token = notes.get(lease).decode()
        assert int(second_token.split("#")[1]) == int(first_token.split("#")[1]) + 1
        got = take_and_confirm(client, "w1", total, 500)
        assert client.deliveries("w1", wait=0.5) == []  # nothing more, ever
        assert len(got) == total
        assert [d.message.mid for d in got] == sent  # each id once, none twice, in order
        assert [int(d.message.body) for d in got] == list(range(total))
        assert not any(d.redelivered for d in got)
    finally:
        second.terminate()
        second.wait()
    assert notes.llen(f"xump:{{{name}}}:errors") == 0


def test_router_killed_inside_one_20000_message_step_leaves_it_whole_for_the_next(
    shared,
    client,
) -> None:
    url, name = shared
    total = 20_000
    sent = client.publish_many("jobs", [Message(body=str(n).encode()) for n in range(total)])
    notes = redis.Redis.from_url(url)
    outbox = f"xump:{{{name}}}:outbox:w1"
    first = start("router", url, name, "w1", "1", "announce")
    wait_ready(first)
    assert first.stdout is not None and first.stdout.readline().strip() == "step"
    time.sleep(0.1)  # well inside the step: routing 20,000 takes several times longer
    first.kill()
    first.wait()
    assert notes.llen(outbox) == 0  # nothing of the step was written...
    assert notes.llen(client.inbox) == 1  # ...and its command waits for the next router

    second = start("router", url, name, "w1", "1")
    try:
        wait_ready(second)
        got = take_and_confirm(client, "w1", total, 1000)
        assert client.deliveries("w1", wait=0.5) == []
        assert [d.message.mid for d in got] == sent  # every message once, in order
    finally:
        second.terminate()
        second.wait()


def test_two_publishers_two_confirmers_share_a_wolfpack_without_loss_or_duplicates(
    shared,
) -> None:
    url, name = shared
    notes = redis.Redis.from_url(url)
    router = start("router", url, name, "w1,w2", "50")
    wait_ready(router)
    confirmers = [start("confirmer", url, name, worker) for worker in ("w1", "w2")]
    publishers = [start("publisher", url, name, who, "10000") for who in ("p1", "p2")]
    try:
        for process in publishers:
            assert process.wait(timeout=120) == 0
        wait_until(lambda: notes.llen("results") >= 20_000)
        notes.set("stop", 1)
        for process in confirmers:
            process.wait(timeout=30)
        results = [raw.decode() for raw in notes.lrange("results", 0, -1)]
        seen = [r.split(":", 1)[1] for r in results]
        assert len(seen) == len(set(seen)) == 20_000
        assert set(seen) == {f"{p}:{n}" for p in ("p1", "p2") for n in range(10_000)}
        for worker in ("w1", "w2"):
            mine = [r.split(":")[1:] for r in results if r.startswith(worker + ":")]
            assert mine, f"{worker} got nothing"
            for publisher in ("p1", "p2"):
                numbers = [int(n) for p, n in mine if p == publisher]
                assert numbers == sorted(numbers)  # FIFO per worker
        assert redis.Redis.from_url(url).llen(f"xump:{{{name}}}:errors") == 0
    finally:
        router.terminate()
        router.wait()
        for process in confirmers + publishers:
            process.kill()
            process.wait()


def test_a_delivery_nobody_confirms_comes_back_after_the_timeout(shared) -> None:
    url, name = shared
    with serving_app_queue(url, name, delivery_timeout=1.0) as (engine, _):
        client = RelayClient(url, name)
        client.publish("q", Message(body=b"lost"))
        [first] = client.deliveries("app", wait=5)  # ...and the client "dies" holding it
        assert not first.redelivered
        [again] = client.deliveries("app", wait=5)
        assert (again.message.body, again.redelivered, again.delivery_count) == (b"lost", True, 2)
        client.confirm([again])
        wait_until(lambda: engine.stats("q")["confirmed"] == 1, 10)


def test_relayed_publishes_that_returned_survive_kill_9_of_the_server(tmp_path) -> None:
    server = RedisServer(tmp_path)  # its own: this test kills it
    server.start()
    try:
        client = RelayClient(server.url, "crash")
        accepted: list[str] = []
        killer = threading.Timer(0.3, server.kill)
        killer.start()
        while True:
            try:
                accepted.append(client.publish("jobs", Message(body=str(len(accepted)).encode())))
            except StoreError as error:
                assert server.url in str(error) and "check that redis-server runs" in str(error)
                break
        killer.join()
        assert len(accepted) > 10

        server.start()  # the same directory: it replays its AOF
        engine, relay = router_engine(server.url, "crash")
        engine.queue_create("jobs")
        while relay.run_once():
            pass
        kept = engine.peek("jobs", count=len(accepted) + 10)
        assert [m.mid for m in kept[: len(accepted)]] == accepted
        assert [int(m.body) for m in kept] == list(range(len(kept)))
        assert len(kept) <= len(accepted) + 1  # at most the one in flight at the kill
    finally:
        server.stop()


def test_headers_at_the_edge_of_what_json_carries_cross_the_relay_unchanged(shared) -> None:
    url, name = shared
    headers = {"u64": 2**64 - 1, "i64": -(2**63), "text": "héllo ✓", "flag": True, "n": 1.25}
    with serving_app_queue(url, name):
        client = RelayClient(url, name)
        client.publish_many("q", [Message(headers=headers, body=b"odd"), Message(body=b"plain")])
        got: list[Delivery] = []
        while len(got) < 2:
            got.extend(client.deliveries("app", count=10, wait=5))
    odd = dict(got[0].message.headers)
    assert odd == headers
    assert type(odd["u64"]) is int and type(odd["i64"]) is int
    assert (got[1].message.body, dict(got[1].message.headers)) == (b"plain", {})


@pytest.mark.parametrize(
    "message",
    [Message(headers={"nan": float("nan")}), Message(headers={"inf": float("-inf")}),
     Message(headers={"big": 2**64}), Message(address="a\udfff"),
     Message(return_address="\udfff"), Message(headers={"h": "\udfff"})],
    ids=["nan", "infinity", "beyond-64-bits", "surrogate-address", "surrogate-return",
         "surrogate-header"],
)  # fmt: skip
def test_the_client_refuses_what_a_later_stage_could_not_carry(shared, client, message) -> None:
    url, _ = shared
    with pytest.raises(InvalidArgument):
        client.publish_many("q", [Message(body=b"good"), message])
    assert redis.Redis.from_url(url).llen(client.inbox) == 0  # nothing of the batch sent


def _raw_publish(body: str, address: str = "a") -> bytes:
    """A publish command as a client writes it, built by hand (bypassing the client's
    checks, as a hostile or broken writer could)."""
    data = {"address": address, "headers": {}, "body": base64.b64encode(body.encode()).decode(),
            "return_address": None, "mid": f"raw-{body}"}  # fmt: skip
    return json.dumps({"op": "publish", "queue": "q", "messages": [data]}).encode()


def test_a_hostile_command_in_the_inbox_is_set_aside_and_the_router_goes_on(shared) -> None:
    """Issue 12: a lone surrogate in an address jammed the router for good, re-applying
    half a step (published counted again and again). Written straight to the inbox, it is
    now set aside with its reason; the commands around it are routed exactly once."""
    url, name = shared
    raw = redis.Redis.from_url(url)
    with serving_app_queue(url, name) as (engine, relay):
        raw.rpush(relay.inbox, _raw_publish("before"), _raw_publish("bad", "a\udfff"),
                  b"{not json", _raw_publish("after"))  # fmt: skip
        client = RelayClient(url, name)
        got: list[Delivery] = []
        while len(got) < 2:
            got.extend(client.deliveries("app", count=10, wait=5))
        wait_until(lambda: raw.llen(relay.errors) == 2, 10)
        assert [d.message.body for d in got] == [b"before", b"after"]
        assert engine.stats("q")["published"] == 2
        assert raw.llen(relay.inbox) == 0
    refused = [json.loads(item) for item in raw.lrange(relay.errors, 0, -1)]
    assert "lone surrogate" in refused[0]["error"]
    assert refused[0]["command"]["messages"][0]["mid"] == "raw-bad"  # kept, to recover
    assert "\udfff" not in refused[0]["error"]  # the reason says what, not the bytes
    assert refused[1]["error"] == "a command in the inbox is not readable JSON"


def test_a_step_that_fails_half_way_is_rolled_back_and_only_its_culprit_set_aside(
    shared,
) -> None:
    """A command that fails after it changed the engine (here an operation that publishes,
    then breaks: a defect) leaves nothing: the step is rolled back, retried in parts, the
    culprit set aside with its reason and its caller answered; every other command in the
    same step is applied exactly once, and no counter counts a retry."""

    def publish_then_break(engine: Engine, **_: object) -> tuple:
        engine.publish("q", Message(body=b"from the broken call"))
        raise RuntimeError("defect")

    url, name = shared
    raw = redis.Redis.from_url(url)
    engine, relay = router_engine(url, name, calls={"broken": publish_then_break})
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    client = RelayClient(url, name)
    client.publish_many("q", [Message(body=str(n).encode()) for n in range(5)])
    reply = f"xump:{{{name}}}:reply:test"
    raw.rpush(relay.inbox, json.dumps({"op": "call", "method": "broken", "args": {},
                                       "reply": reply}))  # fmt: skip
    client.publish_many("q", [Message(body=str(n).encode()) for n in range(5, 10)])
    assert relay.run_once() == 3  # one step holds all three commands
    got = client.deliveries("app", count=100, wait=1)
    assert [d.message.body for d in got] == [str(n).encode() for n in range(10)]
    stats = engine.stats("q")
    assert (stats["published"], stats["outstanding"]) == (10, 10)
    answer = json.loads(raw.lpop(reply))
    assert answer["error"] == "XumpError" and "RuntimeError: defect" in answer["detail"]
    [refused] = [json.loads(item) for item in raw.lrange(relay.errors, 0, -1)]
    assert refused["command"]["method"] == "broken"
    assert raw.llen(relay.inbox) == 0
    # what Redis holds is what this process holds: a new router sees the same
    relay.store.release_lease()
    again, _ = router_engine(url, name)
    again.queue_create("q")
    assert (again.stats("q")["published"], again.stats("q")["routed"]) == (10, 10)


def test_threads_sharing_a_client_publish_in_their_order_with_fewer_round_trips(
    shared, client
) -> None:
    url, name = shared
    pushes_before = _rpush_calls(url)
    returned: dict[int, list[str]] = {}

    def publish(thread: int) -> None:
        returned[thread] = [client.publish("q", Message(body=f"{thread}:{n}".encode()))
                            for n in range(200)]  # fmt: skip

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _rpush_calls(url) - pushes_before < 8 * 200  # commands shared RPUSHes
    with serving_app_queue(url, name):
        got: list[Delivery] = []
        while len(got) < 8 * 200:
            got.extend(client.deliveries("app", count=1000, wait=5))
    for thread, mids in returned.items():
        mine = [d for d in got if d.message.body.startswith(f"{thread}:".encode())]
        assert [d.message.mid for d in mine] == mids  # each thread's order kept
        assert [d.message.body for d in mine] == [f"{thread}:{n}".encode() for n in range(200)]


def test_a_failed_group_push_reaches_every_waiting_thread(tmp_path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    client = RelayClient(server.url, "crash")
    failures: list[str] = []

    def publish() -> None:
        try:
            while True:
                client.publish("q", Message(body=b"x"))
        except StoreError as error:
            failures.append(str(error))

    threads = [threading.Thread(target=publish) for _ in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    server.kill()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)  # nobody left waiting
    assert len(failures) == 6 and all(server.url in failure for failure in failures)


def _rpush_calls(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get("cmdstat_rpush", {}).get("calls", 0))


def test_the_timeout_runs_only_for_deliveries_a_client_took(shared) -> None:
    """SPEC §7: a delivery waiting in its outbox is never expired (each expire used to add
    a copy); once taken, the timeout runs; a stale ack is refused, the new one accepted."""
    url, name = shared
    engine, router, client = app_router(url, name, delivery_timeout=0.0)
    client.publish_many("q", [Message(body=b"a"), Message(body=b"b")])
    router.run_once()
    for _ in range(3):
        assert router.expire() == 0
    assert [d.message.body for d in client.waiting("app")] == [b"a", b"b"]
    [first] = client.deliveries("app", count=1, wait=0)
    assert router.expire() == 1  # taken, unsettled, past the (zero) timeout
    again = client.waiting("app")
    assert [(d.message.body, d.redelivered) for d in again] == [(b"b", False), (b"a", True)]
    taken = client.deliveries("app", count=2, wait=0)
    client.confirm([first])  # too late: refused
    client.confirm(taken)
    router.run_once()
    assert engine.stats("q")["confirmed"] == 2
    assert router.expire() == 0
    refused = [json.loads(raw)["command"]["tags"] for raw in redis.Redis.from_url(url).lrange(
        f"xump:{{{name}}}:errors", 0, -1)]  # fmt: skip
    assert refused == [[first.tag]]
    assert redis.Redis.from_url(url).zcard(f"xump:{{{name}}}:taken") == 0
    client.close()
    router.store.release_lease()


def test_the_router_fires_delayed_messages_when_due_and_never_delivers_expired_ones(
    shared,
) -> None:
    url, name = shared
    with serving_app_queue(url, name) as (engine, _):
        client = RelayClient(url, name)
        sent = time.time()
        client.publish_many("q", [Message(body=b"later", delay=0.5),
                                  Message(body=b"stale", delay=0.3, ttl=0.0)])  # fmt: skip
        [delivery] = client.deliveries("app", wait=30)
        assert delivery.message.body == b"later" and time.time() >= sent + 0.5
        wait_until(lambda: engine.stats("q")["expired"] == 1, 30)
        assert engine.next_due() is None and client.deliveries("app", wait=0.3) == []


def outbox_of_d(url: str, name: str, count: int, revoked: list[str]) -> tuple:
    """Destination "d"'s outbox holding `count` items tagged q:1:0, q:1:1, ..., those of
    `revoked` listed in its revoked set: (a client, the delivery keys, the outbox key, the
    items)."""
    client = redis.Redis.from_url(url)
    keys = delivery_keys(name)
    outbox = relay_keys(name)[1] + "d"
    items = [json.dumps({"tag": f"q:1:{n}", "n": n}).encode() for n in range(count)]
    client.rpush(outbox, *items)
    client.sadd(keys["revoked"] + "d", *revoked)
    return client, keys, outbox, items


def test_take_these_takes_only_the_chosen_items_and_notes_them_taken(shared) -> None:
    """A consumer with a filter of its own (a STOMP queue selector) takes exactly the items
    it chose: the others stay in the outbox, in order; what another consumer took first is
    not taken twice; a revoked one is dropped."""
    client, keys, outbox, items = outbox_of_d(*shared, 5, revoked=["q:1:3"])
    take_these = client.register_script(TAKE_THESE)
    taken = take_these(keys=[outbox, keys["taken"], keys["revoked"] + "d"],
                       args=[items[1], items[3], items[4]])  # fmt: skip
    assert taken == [items[1], items[4]]
    assert client.lrange(outbox, 0, -1) == [items[0], items[2]]
    assert {m.decode() for m in client.zrange(keys["taken"], 0, -1)} == {"q:1:1", "q:1:4"}
    assert not client.sismember(keys["revoked"] + "d", "q:1:3")
    # taken by someone else meanwhile: not there, not taken
    assert take_these(keys=[outbox, keys["taken"], keys["revoked"] + "d"], args=[items[1]]) == []
    client.delete(outbox, keys["taken"])


# -- claims: the live path's take (SPEC §11; the package doc's "claims") ---------------------
def _claim(url: str, name: str, destination: str, wait: float = 5) -> bytes | None:
    """What a consumer's BLMOVE does: the outbox's head onto the store's claimed list."""
    outbox = relay_keys(name)[1] + destination
    with redis.Redis.from_url(url, socket_timeout=wait + 30) as server:
        return server.blmove(outbox, delivery_keys(name)["claimed"], wait, "LEFT", "RIGHT")


def test_a_consumer_that_dies_after_a_claim_gets_it_delivered_again_after_the_timeout(
    shared,
) -> None:
    """The claim is the take's durable record: the router's sweep starts the timeout of a
    claim nobody stamped, and the timeout returns it, redelivered, once."""
    url, name = shared
    engine, router, client = app_router(url, name, delivery_timeout=0.0)
    client.publish("q", Message(body=b"claimed"))
    router.run_once()
    assert _claim(url, name, "app") is not None  # ...and the consumer dies before its STAMP
    server = redis.Redis.from_url(url)
    keys = delivery_keys(name)
    assert server.llen(keys["claimed"]) == 1 and server.zcard(keys["taken"]) == 0
    assert router.expire() == 1  # swept (the timeout starts), then past the zero timeout
    assert server.llen(keys["claimed"]) == 0
    [again] = client.deliveries("app", count=5, wait=0)
    assert (again.message.body, again.redelivered, again.delivery_count) == (b"claimed", True, 2)
    client.confirm([again])
    router.run_once()
    assert router.expire() == 0 and engine.stats("q")["confirmed"] == 1
    assert server.zcard(keys["taken"]) == 0 and server.llen(keys["claimed"]) == 0
    client.close()
    router.store.release_lease()


def test_a_stamped_claim_runs_its_timeout_from_the_stamp_and_is_swept_no_more(shared) -> None:
    url, name = shared
    engine, router, client = app_router(url, name, delivery_timeout=3600.0)
    client.publish_many("q", [Message(body=b"one"), Message(body=b"two")])
    router.run_once()
    server = redis.Redis.from_url(url)
    keys = delivery_keys(name)
    stamp = server.register_script(STAMP)
    first, second = _claim(url, name, "app"), _claim(url, name, "app")
    assert stamp(keys=[keys["claimed"], keys["taken"]], args=[first]) == 1
    assert server.lrange(keys["claimed"], 0, -1) == [second]
    tags = [json.loads(item)["tag"] for item in (first, second)]
    assert server.zrange(keys["taken"], 0, -1) == [tags[0].encode()]
    assert router.expire() == 0  # the sweep stamps the second: no timeout has run out
    assert server.llen(keys["claimed"]) == 0 and server.zcard(keys["taken"]) == 2
    # a STAMP after the sweep changes nothing: the sweep's time stands
    swept = server.zscore(keys["taken"], tags[1])
    assert stamp(keys=[keys["claimed"], keys["taken"]], args=[second]) == 0
    assert server.zscore(keys["taken"], tags[1]) == swept
    client.confirm(tags)
    router.run_once()
    assert engine.stats("q")["confirmed"] == 2 and server.zcard(keys["taken"]) == 0
    client.close()
    router.store.release_lease()


def test_a_revoked_delivery_claimed_before_the_purge_is_never_handed_on(shared) -> None:
    """Between the router's step that revokes a destination's deliveries and its PURGE, a
    BLMOVE may claim a revoked one: CLAIM_CHECK drops it; PURGE removes revoked items from
    the claimed list too, and a check after that finds them gone."""
    url, name = shared
    server, keys, outbox, items = outbox_of_d(url, name, 4, revoked=["q:1:0", "q:1:2"])
    check = server.register_script(CLAIM_CHECK)
    purge = server.register_script(PURGE)
    check_keys = [keys["claimed"], keys["taken"], keys["revoked"] + "d"]
    revoked, kept = _claim(url, name, "d"), _claim(url, name, "d")
    assert check(keys=check_keys, args=[revoked]) == 0  # revoked: never handed on
    assert check(keys=check_keys, args=[kept]) == 1  # may go, and is stamped
    assert server.zscore(keys["taken"], "q:1:1") is not None
    assert server.llen(keys["claimed"]) == 0
    late = _claim(url, name, "d")  # claimed just before the PURGE
    assert purge(keys=[outbox, keys["revoked"] + "d", keys["claimed"]]) == 1
    assert server.llen(keys["claimed"]) == 0 and not server.exists(keys["revoked"] + "d")
    assert check(keys=check_keys, args=[late]) == 0  # gone: revoked
    assert server.lrange(outbox, 0, -1) == [items[3]]
    server.delete(outbox, keys["taken"])


def test_a_claim_waits_for_the_routing_step_and_nothing_leaves_a_step_that_failed(
    shared,
) -> None:
    """SPEC §11: a consumer learns of a delivery only from the router's committed step (its
    BLMOVE is answered in the step's own turn, after the step's fsync); a step that is not
    committed (here: the router lost its lease) puts nothing in anybody's hands."""
    url, name = shared
    _, router, client = app_router(url, name)
    got: list[bytes | None] = []
    waiting = threading.Thread(target=lambda: got.append(_claim(url, name, "app", wait=60)))
    waiting.start()
    server = redis.Redis.from_url(url)
    wait_until(lambda: any(c.get("cmd") == "blmove" for c in server.client_list()), 30)
    server.set(f"xump:{{{name}}}:lease", "someone-else#999", px=60_000)  # a successor
    client.publish("q", Message(body=b"not yet"))
    with pytest.raises(StoreError, match="lost the lease"):
        router.run_once()
    assert waiting.is_alive() and server.llen(relay_keys(name)[1] + "app") == 0
    server.delete(f"xump:{{{name}}}:lease")  # the successor is gone: the router takes over
    assert router.acquire(timeout=5)
    router.run_once()
    waiting.join(60)
    assert got and got[0] is not None and b"not yet" not in got[0]  # the body is base64
    assert json.loads(got[0])["message"]["body"] == base64.b64encode(b"not yet").decode()
    client.close()
    router.store.release_lease()


def test_a_claim_by_an_auto_ack_consumer_settles_the_delivery_in_the_next_step(shared) -> None:
    """ack:auto (STOMP): the consumer's BLMOVE onto the autoacked list is its ack; the
    router confirms those deliveries at the head of its next step, in the same commit that
    takes them off the list, with no command of the consumer's. Items that are not
    deliveries (or deliveries already settled) leave the list too, noted in the errors."""
    url, name = shared
    engine, router, client = app_router(url, name)
    client.publish_many("q", [Message(body=b"one"), Message(body=b"two")])
    router.run_once()
    server = redis.Redis.from_url(url)
    keys = delivery_keys(name)
    outbox = relay_keys(name)[1] + "app"
    for _ in range(2):
        assert server.blmove(outbox, keys["autoacked"], 1, "LEFT", "RIGHT") is not None
    server.rpush(keys["autoacked"], b"not an item", b'{"tag": 7}', b'{"tag":"q:9:9"}')
    assert router.run_once() == 5  # nothing in the inbox: the settlements alone
    stats = engine.stats("q")
    assert (stats["confirmed"], stats["outstanding"]) == (2, 0)
    assert server.llen(keys["autoacked"]) == 0 and server.llen(outbox) == 0
    refused = [json.loads(raw)["command"]["tags"] for raw in server.lrange(client.errors, 0, -1)]
    assert refused == [["q:9:9"]]  # the unknown tag; the two unreadable items had none
    client.publish("q", Message(body=b"three"))  # the next step goes on as ever
    assert router.run_once() == 1 and server.llen(outbox) == 1
    client.close()
    router.store.release_lease()


# -- handed commands: the co-located path (SPEC §11, engine.relay.Handed) ------------------
def test_handed_publishes_are_applied_after_the_inbox_head_and_take_nothing_off_it(
    shared,
) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    inbox, _, _ = relay_keys(name)
    raw = redis.Redis.from_url(url)
    client.publish("q", Message(body=b"first"))
    client.publish("q", Message(body=b"third"))
    payload, mids, _ = client.publish_command("q", [Message(body=b"handed")])
    handed = Handed.of(payload)
    assert router.run_once(limit=1, handed=[handed]) == 2
    assert handed.committed
    assert raw.llen(inbox) == 1  # the step read one inbox command: it took that one off
    delivered = client.deliveries("app", count=10, wait=1)
    assert [d.message.body for d in delivered] == [b"first", b"handed"]
    assert delivered[1].message.mid == mids[0]
    assert router.run_once() == 1
    assert [d.message.body for d in client.deliveries("app", count=10, wait=1)] == [b"third"]


def test_a_handed_publish_the_router_refuses_is_set_aside_and_counts_as_committed(
    shared,
) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    _, _, errors_key = relay_keys(name)
    payload, _, _ = client.publish_command("nowhere", [Message(body=b"x")])
    good, _, _ = client.publish_command("q", [Message(body=b"good")])
    handed = [Handed.of(payload), Handed.of(good)]
    router.run_once(handed=handed)
    assert all(command.committed for command in handed)
    [failure] = redis.Redis.from_url(url).lrange(errors_key, 0, -1)
    assert json.loads(failure)["command"]["queue"] == "nowhere"
    assert [d.message.body for d in client.deliveries("app", count=10, wait=1)] == [b"good"]


def test_handed_messages_are_applied_as_the_same_publish_read_off_the_inbox(shared) -> None:
    """Handed.publishing carries a publish's messages as they are (RelayClient.stamped:
    checked at the door, mids given out): the router applies them as it would their
    JSON read off the inbox, and their `payload` is that JSON."""
    url, name = shared
    _, router, client = app_router(url, name)
    sent = [
        Message(body=b"one", headers={"n": 1, "x": 1.5, "s": "text"}, ttl=60.0),
        Message(body="two \u00e9", address="a.b", return_address="back"),
    ]
    stamped = client.stamped(sent)
    assert len(stamped) == 2 and all(message.mid for message in stamped)
    handed = Handed.publishing("q", stamped)
    assert Handed.of(handed.payload()).inbox_form() == handed.inbox_form()
    assert router.run_once(handed=[handed]) == 1 and handed.committed
    by_hand = client.deliveries("app", count=10, wait=1)
    payload, _, _ = client.publish_command("q", sent)
    assert router.run_once(handed=[Handed.of(payload)]) == 1
    from_json = client.deliveries("app", count=10, wait=1)
    assert [d.message.mid for d in by_hand] == [m.mid for m in stamped]
    for one, other in zip(by_hand, from_json, strict=True):
        assert one.message._replace(mid=None, seq=None, timestamp=None) == (
            other.message._replace(mid=None, seq=None, timestamp=None))  # fmt: skip


def test_a_handed_publish_of_messages_set_aside_keeps_its_messages(shared) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    _, _, errors_key = relay_keys(name)
    handed = Handed.publishing("nowhere", client.stamped([Message(body=b"kept")]))
    router.run_once(handed=[handed])
    assert handed.committed
    [failure] = redis.Redis.from_url(url).lrange(errors_key, 0, -1)
    command = json.loads(failure)["command"]
    assert command["queue"] == "nowhere"
    assert base64.b64decode(command["messages"][0]["body"]) == b"kept"


# -- deferred commits: the co-located step on the event loop (RedisStore.defer) -------------
def _send_deferred(url: str, commits: list[tuple]) -> None:
    """What the event loop's step does with its deferred commits: send them, in order."""
    raw = redis.Redis.from_url(url)
    for commit in commits:
        raw.execute_command(*commit)


def test_a_deferred_commit_is_written_only_when_its_caller_sends_it(shared) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    payload, mids, _ = client.publish_command("q", [Message(body=b"deferred")])
    handed = Handed.of(payload)
    router.store.defer()
    assert router.run_once(handed=[handed]) == 1
    commits = router.store.sent_later()
    assert handed.committed and handed.part == 0 and len(commits) == 1
    assert client.deliveries("app", count=10, wait=0.2) == []  # not written yet
    _send_deferred(url, commits)
    [delivered] = client.deliveries("app", count=10, wait=1)
    assert (delivered.message.body, delivered.message.mid) == (b"deferred", mids[0])
    # the store sends its own commits again, on top of the deferred one
    client.publish("q", Message(body=b"next"))
    assert router.run_once() == 1
    assert [d.message.body for d in client.deliveries("app", count=10, wait=1)] == [b"next"]


def test_a_deferred_commit_refused_for_a_lost_lease_writes_nothing_and_stops_the_store(
    shared,
) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    payload, _, _ = client.publish_command("q", [Message(body=b"deferred")])
    handed = Handed.of(payload)
    router.store.defer()
    router.run_once(handed=[handed])
    commits = router.store.sent_later()
    raw = redis.Redis.from_url(url)
    raw.delete(f"xump:{{{name}}}:lease")  # the lease expired...
    other = Engine()
    other.store_create("redis", name, url=url)
    assert RelayRouter(other, name, name="other", lease_ms=5000).acquire(timeout=1)  # ...taken
    with pytest.raises(redis.ResponseError) as refused:
        _send_deferred(url, commits)
    assert isinstance(router.store.deferred_failed(refused.value), LeaseLost)
    assert client.deliveries("app", count=10, wait=0.2) == []
    # memory holds what Redis does not: the store writes nothing more until loaded again
    client.publish("q", Message(body=b"after"))
    with pytest.raises(NotWritten):
        router.run_once()
    assert client.deliveries("app", count=10, wait=0.2) == []


def test_a_store_whose_deferred_commit_failed_lets_its_lease_go(shared) -> None:
    """Memory ahead of Redis is dropped, and so is the lease: another router starts at
    once from what Redis holds, not a lease time later (its commits refused meanwhile)."""
    url, name = shared
    _, router, client = app_router(url, name)
    router.store.defer()
    router.run_once(handed=[Handed.publishing("q", client.stamped([Message(body=b"x")]))])
    router.store.sent_later()
    router.store.deferred_failed(redis.ConnectionError("lost on its way"))
    router.store.release_lease()
    other = Engine()
    other.store_create("redis", name, url=url)
    assert RelayRouter(other, name, name="other", lease_ms=5000).acquire(timeout=0.5)


def test_a_command_failing_in_a_deferred_step_makes_the_step_not_written(
    shared, monkeypatch
) -> None:
    """A step that fails (not a refusal: a defect, here injected) is rolled back by
    loading the engine again from Redis, which lacks the commits still deferred: the
    step stops instead, NotWritten, commits nothing, and its caller has the store loaded
    again (xumpweb/runtime.py) and the publisher appends the commands to the inbox."""
    url, name = shared
    engine, router, client = app_router(url, name)
    publish_many = engine.publish_many

    def failing(queue, messages, **options):
        if any(message.body == b"boom" for message in messages):
            raise RuntimeError("a defect")
        return publish_many(queue, messages, **options)

    monkeypatch.setattr(engine, "publish_many", failing)
    good, _, _ = client.publish_command("q", [Message(body=b"good")])
    bad, _, _ = client.publish_command("q", [Message(body=b"boom")])
    handed = [Handed.of(good), Handed.of(bad)]
    router.store.defer()
    with pytest.raises(NotWritten):
        router.run_once(handed=handed)
    assert router.store.sent_later() == []
    assert not any(command.committed for command in handed)
    assert client.deliveries("app", count=10, wait=0.2) == []


def test_a_handed_settlement_stops_its_delivery_timeout_in_its_commit(shared) -> None:
    """An appended confirm's client takes its tags off the taken set as it appends it; a
    handed one (the STOMP server's acks, stepped on its event loop) has no such client
    write: the commit that applies it does it, so the router's expire never returns a
    settled delivery to its queue."""
    url, name = shared
    engine, router, client = app_router(url, name)
    taken = delivery_keys(name)["taken"]
    raw = redis.Redis.from_url(url)
    client.publish("q", Message(body=b"one"))
    client.publish("q", Message(body=b"two"))
    router.run_once()
    one, two = client.deliveries("app", count=10, wait=1)
    assert raw.zscore(taken, one.tag) is not None  # taken: its timeout runs
    confirm = Handed({"op": "confirm", "tags": [one.tag]})
    reject = Handed({"op": "reject", "tag": two.tag, "requeue": False})
    assert router.run_once(handed=[confirm, reject]) == 2
    assert confirm.committed and reject.committed
    assert raw.zrange(taken, 0, -1) == []
    stats = engine.stats("q")
    assert (stats["confirmed"], stats["rejected"], stats["outstanding"]) == (1, 1, 0)


def test_a_handed_publish_under_a_lost_lease_is_not_written_and_says_so(shared) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    inbox, _, _ = relay_keys(name)
    raw = redis.Redis.from_url(url)
    raw.delete(f"xump:{{{name}}}:lease")  # the lease expired...
    other = Engine()
    other.store_create("redis", name, url=url)
    assert RelayRouter(other, name, name="other", lease_ms=5000).acquire(timeout=1)  # ...taken
    payload, _, _ = client.publish_command("q", [Message(body=b"handed")])
    handed = Handed.of(payload)
    with pytest.raises(LeaseLost):
        router.run_once(handed=[handed])
    assert not handed.committed
    assert raw.llen(inbox) == 0
    assert client.deliveries("app", count=10, wait=0.2) == []
